"""Phi-3 without the hub: the ``phi3`` alias finds a local checkpoint, no remote code, sliding window rolled back.

A tiny model with Phi-3's architecture (``Phi3Config``, a sliding window of
8 tokens so drafts reach past it) is saved in the Hugging Face cache layout
under a temporary ``HF_HOME``, exactly where ``hf download
microsoft/Phi-3-mini-4k-instruct`` would put it; then the real console script
decodes with ``--model phi3``, offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from .test_cli import cli

REPO = "microsoft/Phi-3-mini-4k-instruct"
PROMPT = "ab ab ab ab ab ab ab ab ab ab ab ab"


@pytest.fixture(scope="module")
def phi3_home(tmp_path_factory: pytest.TempPathFactory, byte_bpe: Any) -> tuple[Path, Any]:
    from transformers import AutoModelForCausalLM, Phi3Config

    home = tmp_path_factory.mktemp("hf-home")
    eos = int(byte_bpe.convert_tokens_to_ids("<|im_end|>"))
    config = Phi3Config(vocab_size=len(byte_bpe), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512, sliding_window=8,
                        eos_token_id=eos, bos_token_id=0, pad_token_id=0, initializer_range=0.2)
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = eos
    revision = "0" * 40
    repo_dir = home / "hub" / f"models--{REPO.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / revision
    model.save_pretrained(snapshot)
    byte_bpe.save_pretrained(snapshot)
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(revision)
    return home, model


def decode(home: Path, isolated_env: dict[str, str], *options: str) -> dict[str, Any]:
    env = {**isolated_env, "HF_HOME": str(home)}
    done = cli("generate", "--model", "phi3", "--no-chat", "-p", PROMPT, "--format", "jsonl", "--max-new-tokens",
               "24", *options, env=env)
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout.splitlines()[-1])
    assert final["event"] == "finished"
    return dict(final)


def test_the_phi3_alias_decodes_a_local_checkpoint_like_generate(phi3_home: tuple[Path, Any], byte_bpe: Any,
                                                                 isolated_env: dict[str, str]) -> None:
    home, model = phi3_home
    ours = decode(home, isolated_env)["token_ids"]
    ids = byte_bpe(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        theirs = model.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:].tolist()
    assert ours == theirs[: len(ours)] and len(ours) == len(theirs)
    assert len(ids[0]) + len(ours) > 8, "the run goes past the sliding window"


@pytest.mark.slow
# At full length (--no-adaptive): the rollback is what is tested, and the adaptive default may not draft at all.
@pytest.mark.parametrize("mode", [["--mode", "pld", "--num-pred-tokens", "6", "--no-adaptive"],
                                  ["--mode", "speculative", "--draft", "int4", "--no-adaptive"]],
                         ids=["pld", "speculative"])
def test_drafting_on_phi3_rolls_the_sliding_window_back_and_stays_lossless(
        phi3_home: tuple[Path, Any], isolated_env: dict[str, str], mode: list[str]) -> None:
    home, _ = phi3_home
    drafted = decode(home, isolated_env, *mode)
    assert drafted["token_ids"] == decode(home, isolated_env)["token_ids"]
    assert drafted["drafted"] > 0, drafted
    if mode[1] == "pld":  # rejected copies: the cache was really cropped, past the 8-token window
        assert drafted["accepted"] < drafted["drafted"], drafted
