"""Drafts made from the target (int4, int8, its first layers): lossless under greedy, sharing the target's
weights, refused clearly where they cannot be built."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, cast

import pytest
import torch

from decode_tui.core.drafting import target_drafts
from decode_tui.core.drafting.draft_models import load_draft
from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.errors import UsageError
from decode_tui.core.execution import float_mask
from decode_tui.core.execution.forward import forward, new_cache
from decode_tui.core.params import DEMO_PROMPTS, DecodeConfig, DraftParams, TargetDraft, target_draft
from decode_tui.core.record.events import Finished
from decode_tui.core.run import Run

from .conftest import tiny_model
from .test_cli import assert_clean_failure, cli
from .test_speculative import V, greedy, run

DRAFTS = {"int4": TargetDraft(4), "int8": TargetDraft(8), "layers:1": TargetDraft(None, 1),
          "int4+layers:1": TargetDraft(4, 1)}


@pytest.mark.parametrize(("spec", "expected"), [*DRAFTS.items(), ("layers:20+int8", TargetDraft(8, 20)),
                                                ("self", None), ("HuggingFaceTB/SmolLM2-360M", None),
                                                ("./int4-model", None)])
def test_specs_name_drafts_made_from_the_target(spec: str, expected: TargetDraft | None) -> None:
    assert target_draft(spec) == expected
    assert (DraftParams(draft=spec).model_spec is None) == (expected is not None or spec == "self")


@pytest.mark.parametrize(("spec", "fragment"), [("layers:x", "'layers:x' is not a draft made from the target"),
                                                ("int4+int8", "two quantisations"),
                                                ("layers:2+layers:3", "names the layers twice"),
                                                ("int4+int3", "'int3' is not")])
def test_malformed_specs_say_what_is_accepted(spec: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        DraftParams(draft=spec)


@pytest.mark.parametrize("layers", [0, -1, 2, 7])
def test_layer_counts_outside_one_to_layers_minus_one_are_refused(layers: int) -> None:
    model = tiny_model("llama", vocab_size=V)  # 2 decoder layers: only layers:1 is a draft
    with pytest.raises(UsageError, match="N must be between 1 and 1"):
        target_drafts.check(TargetDraft(None, layers), model, f"layers:{layers}")


def test_a_model_without_decoder_layers_where_we_look_is_refused_with_a_message() -> None:
    with pytest.raises(UsageError, match="cannot draft with its first layers"):
        target_drafts.check(TargetDraft(None, 1), tiny_model("gpt2", vocab_size=V), "layers:1")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3"])
@pytest.mark.parametrize("spec", list(DRAFTS))
def test_greedy_speculative_with_each_draft_is_exactly_greedy(byte_bpe: Any, arch: str, spec: str) -> None:
    """With the draft's own keys and values of the prompt, and with the target's (as runs draft)."""
    model = tiny_model(arch, vocab_size=V, seed=6)
    draft = target_drafts.build(model, DRAFTS[spec])
    prompt = [9, 8, 7, 6, 9, 8, 7]
    for kv in (None, target_drafts.kv_dtype(model, DRAFTS[spec])):
        for k in (1, 4):
            result = run(model, byte_bpe, ModelDrafter(draft, V, target_kv=kv), prompt, 30, k=k)[-1]
            assert isinstance(result, Finished) and result.drafted
            assert result.token_ids == greedy(model, byte_bpe, prompt, 30).token_ids, (arch, spec, kv, k)


@pytest.mark.parametrize("spec", ["int4", "int8"])
def test_a_draft_made_from_the_target_starts_from_the_targets_keys_and_values(spec: str) -> None:
    """The target's keys and values of the prompt, in the draft's dtype, instead of a prefill of its own (which
    a quantised draft computes differently); a drafter not told to take them keeps its own."""
    model = tiny_model("llama", vocab_size=V, seed=6)
    made = DRAFTS[spec]
    draft = target_drafts.build(model, made)
    prompt = [9, 8, 7, 6, 9, 8, 7]
    target_cache = new_cache(model)
    with torch.inference_mode():
        forward(model, torch.tensor([prompt]), target_cache)
    own, taken = ModelDrafter(draft, V), ModelDrafter(draft, V, target_kv=target_drafts.kv_dtype(model, made))
    for drafter in (own, taken):
        drafter.prefilled(prompt, target_cache)
        with torch.inference_mode():
            drafter.propose([*prompt, 3], 2, [], True, None)
    target_keys = cast(Any, target_cache.layers[0]).keys
    for drafter, same in ((taken, True), (own, False)):
        keys = cast(Any, drafter.cache.layers[0]).keys[:, :, : len(prompt)]
        assert keys.dtype == target_drafts.kv_dtype(model, made)
        assert torch.equal(keys, target_keys.to(keys.dtype)) == same, spec


@pytest.mark.parametrize("spec", ["int4", "layers:1"])
def test_a_draft_made_from_the_target_takes_the_keys_and_values_of_tokens_it_skipped(spec: str) -> None:
    """After plain steps the draft has skipped their tokens: one made from the target copies their keys and
    values from the target's cache and is fed the pending token alone; another model feeds them all through
    itself (a catch-up as wide as the stretch)."""
    model = tiny_model("llama", vocab_size=V, seed=6)
    made = DRAFTS[spec]
    draft = target_drafts.build(model, made)
    prompt, skipped, pending = [9, 8, 7, 6, 9, 8, 7], [5, 4, 3], 2
    target_cache = new_cache(model, rollback=True)
    kv = target_drafts.kv_dtype(model, made)
    taken, own = ModelDrafter(draft, V, target_kv=kv), ModelDrafter(draft, V)
    with torch.inference_mode():
        forward(model, torch.tensor([prompt]), target_cache)
        for drafter in (taken, own):
            drafter.prefilled(prompt, target_cache)
            drafter.propose([*prompt, skipped[0]], 1, [], True, None)  # a round, then plain steps
            drafter.rollback(len(prompt))
        forward(model, torch.tensor([skipped]), target_cache)  # the plain steps: the target's cache holds them
        drafts = {name: d.propose([*prompt, *skipped, pending], 2, [], True, None)
                  for name, d in (("taken", taken), ("own", own))}
    assert drafts["taken"].fed == 1 and drafts["own"].fed == len(skipped) + 1
    span = slice(len(prompt), len(prompt) + len(skipped))
    for i in range(draft.config.num_hidden_layers):
        target_keys = cast(Any, target_cache.layers[i]).keys[:, :, span]
        assert torch.equal(cast(Any, taken.cache.layers[i]).keys[:, :, span], target_keys.to(kv))
    context = [*prompt, *skipped, pending]
    assert taken.cached[: len(context)] == own.cached[: len(context)] == context


@pytest.mark.parametrize("spec", list(DRAFTS))
def test_a_draft_shares_the_targets_weights_and_leaves_the_target_as_it_was(spec: str) -> None:
    model = tiny_model("qwen2", vocab_size=V, seed=3)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        before = model(ids).logits
    target_params = {p.data_ptr() for p in model.parameters()}
    draft: Any = target_drafts.build(model, DRAFTS[spec])
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, before)
        draft(ids)
    assert len(model.model.layers) == model.config.num_hidden_layers == 2
    embedding = draft.get_input_embeddings().weight
    assert embedding.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    if DRAFTS[spec].bits is None:  # an early exit owns nothing: every tensor it has is the target's
        assert {p.data_ptr() for p in draft.parameters()} <= target_params
    else:
        assert not any(isinstance(m, torch.nn.Linear) and m.in_features % 32 == 0 and m.out_features % 16 == 0
                       for m in draft.modules()), "every Linear the kernel takes is quantised"


def _owned_bytes(draft: Any, target: Any) -> int:
    shared = {t.data_ptr() for t in [*target.parameters(), *target.buffers()]}
    tensors = {t.data_ptr(): t for t in [*draft.parameters(), *draft.buffers()] if t.data_ptr() not in shared}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def test_the_default_draft_of_the_embedded_model_is_small_and_mostly_accepted(smollm2: Any) -> None:
    """The int4 draft owns under a fifth of the target's bytes, every one of its 30 layers runs the fused attention
    and MLP, its passes build float masks (a check that silently failed on the real weights would cost a GPU half
    its draft's speed, and nothing else would show it), greedy speculative decoding with it gives plain greedy's
    tokens, and the target accepts most of what it drafts (the GGUF the model came from was 4-bit)."""
    from decode_tui.core.drafting import draft_layers

    draft = load_draft(smollm2, DraftParams().draft)
    layers = cast(Any, draft.model).model.layers
    assert len(layers) == 30 and all(isinstance(layer.self_attn, draft_layers.FusedAttention) and
                                     isinstance(layer.mlp, draft_layers.FusedMLP) for layer in layers)
    assert cast(Any, draft.model).config._attn_implementation == float_mask.FLOAT_MASK_SDPA  # its masks too
    target_bytes = sum(p.numel() * p.element_size() for p in smollm2.model.parameters())
    assert _owned_bytes(draft.model, smollm2.model) < 0.2 * target_bytes
    prompt = DEMO_PROMPTS["speculative"]
    plain = list(Run(smollm2, prompt, DecodeConfig(max_new_tokens=32)).events())[-1]
    fast = list(Run(smollm2, prompt, DecodeConfig(mode="speculative", max_new_tokens=32), draft=draft).events())[-1]
    assert isinstance(plain, Finished) and isinstance(fast, Finished)
    assert fast.token_ids == plain.token_ids
    assert fast.acceptance_rate is not None and fast.acceptance_rate >= 0.9
    assert fast.draft_cost_ratio is not None and 0 < fast.draft_cost_ratio < 1


@pytest.mark.real_model
def test_every_layer_of_the_embedded_models_int4_draft_is_fused_in_bf16_too() -> None:
    """The draft's layers and masks are fused in bf16, as a GPU loads it, too (here on the CPU, where the same check
    fails the same way): the real weights give attention outputs of a few hundred, whose entries near zero carry a
    unit or two of bf16's last place at that size. A check with a tolerance that does not grow with the output
    failed 7 of the 30 attentions, which kept transformers' slower forward, silently; a test on a GPU caught it."""
    from decode_tui.core.drafting import draft_layers
    from decode_tui.core.model.embedded import pull
    from decode_tui.core.model.loading import load_model
    from decode_tui.core.model.registry import resolve

    pull("smollm2")
    lm = load_model(resolve("smollm2"), device="cpu", dtype="bfloat16")
    draft = load_draft(lm, DraftParams().draft)
    layers = cast(Any, draft.model).model.layers
    assert next(draft.model.parameters()).dtype == torch.bfloat16
    assert len(layers) == 30 and all(isinstance(layer.self_attn, draft_layers.FusedAttention) and
                                     isinstance(layer.mlp, draft_layers.FusedMLP) for layer in layers)
    assert cast(Any, draft.model).config._attn_implementation == float_mask.FLOAT_MASK_SDPA  # its masks too


@pytest.mark.parametrize(("spec", "fragment"), [("layers:2", "N must be between 1 and 1"),
                                                ("layers:abc", "is not a draft made from the target")])
def test_the_cli_refuses_bad_layer_drafts_with_exit_2(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                      spec: str, fragment: str) -> None:
    done = cli("generate", "--model", str(tiny_model_dir), "-p", "hello", "--mode", "speculative", "--draft", spec,
               "--max-new-tokens", "4", env=isolated_env)
    assert_clean_failure(done, 2, fragment)


# Which devices run a quantised draft: checked by a product whose quantised form is exact, not guessed from a name.

@pytest.mark.parametrize("bits", [4, 8])
def test_the_cpu_kernels_pass_the_exact_product_check(bits: int) -> None:
    assert target_drafts._probe(bits, torch.device("cpu")) is None


@pytest.mark.parametrize("group", [32, 128])
def test_int4_products_are_exact_for_weights_exact_in_groups_of_the_layers_size(group: int) -> None:
    """A layer quantises and multiplies in its own group size (the draft's 32; the benchmark times gpt-fast's 128
    beside it). One 32-wide block spans 0 to 45 in steps of 3, every other 0 to 15 in steps of 1: exact with a
    scale per 32 inputs, rounded with one per 128, so the product tells which groups the kernel read."""
    generator = torch.Generator().manual_seed(1)
    n, k = 32, 256
    w = torch.randint(0, 16, (n, k), generator=generator).float()
    w[:, ::group], w[:, 1::group] = 0, 15
    w[:, 32:64] *= 3  # a group of 32 from 0 to 45: exact at 32 (scale 3), not at 128 (one scale of 45/15 for all)
    linear = torch.nn.Linear(k, n, bias=False)
    linear.weight.data = w
    x = torch.randint(-2, 3, (3, k), generator=generator).float()
    got = target_drafts.Int4Linear(linear, group=group)(x).float()
    exact = torch.allclose(got, x @ w.T, rtol=1e-2, atol=1.0)
    assert exact == (group == 32)


def test_a_device_type_without_kernels_is_named_in_the_reason() -> None:
    assert target_drafts._probe(4, torch.device("meta")) == "torch has no int4 kernel for meta (the target is on meta)"


def test_a_kernel_giving_wrong_products_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check catches a packing that came out wrong (the rows of the product shuffled), not only a missing op."""
    right = target_drafts.Int4Linear.matmul
    monkeypatch.setattr(target_drafts.Int4Linear, "matmul", lambda self, flat: right(self, flat).flip(-1))
    assert target_drafts._probe(4, torch.device("cpu")) == "torch's int4 kernel gives wrong products on cpu"


def test_a_kernel_that_raises_fails_the_check_with_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, flat: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(target_drafts.Int8Linear, "matmul", broken)
    reason = target_drafts._probe(8, torch.device("cpu"))
    assert reason is not None and reason.startswith("torch's int8 kernel does not run on cpu (RuntimeError: no kernel")


@pytest.mark.parametrize(("width", "tiles"), [(576, 4), (1536, 8), (3072, 8), (96, 2), (32, 2)])
def test_the_cuda_packing_takes_the_most_inner_tiles_that_divide_the_input(width: int, tiles: int) -> None:
    """SmolLM2's 576 inputs are 36 tiles of 16: 8 does not divide them, 4 does."""
    assert target_drafts.inner_k_tiles(width, torch.device("cuda")) == tiles
    assert target_drafts.inner_k_tiles(width, torch.device("cpu")) == target_drafts.INNER_K_TILES


class _Target:
    """A LoadedModel's few fields that load_draft reads."""

    def __init__(self, model: Any, vocab: int) -> None:
        self.model, self.tokenizer, self.device = model, list(range(vocab)), model.device


@pytest.mark.parametrize("spec", ["int4", "int8", "int4+layers:1"])
def test_a_default_draft_the_device_cannot_run_falls_back_to_self_with_a_note(
        monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    made = target_draft(spec)
    assert made is not None and made.bits is not None
    monkeypatch.setitem(target_drafts._WORKS, (made.bits, "cpu"), "no kernel here")
    model = tiny_model("llama", vocab_size=V)
    draft = load_draft(cast(Any, _Target(model, V)), spec, named=False)
    assert draft.model is model and draft.spec == "self"
    assert draft.note == (f"the default draft ({spec}) cannot run here: no kernel here; the target drafts for "
                          "itself (--draft self). --draft names another.")
    with pytest.raises(UsageError, match=f"--draft {spec.replace('+', '.')}: no kernel here. Pass --draft layers:N"):
        load_draft(cast(Any, _Target(model, V)), spec, named=True)


def test_a_draft_the_device_runs_is_built_whether_named_or_not() -> None:
    model = tiny_model("llama", vocab_size=V)
    for named in (False, True):
        draft = load_draft(cast(Any, _Target(model, V)), "int4", named=named)
        assert draft.spec == "int4" and draft.note is None and draft.model is not model


def test_an_int8_draft_on_cuda_says_it_costs_more_than_a_step() -> None:
    """torch's int8 weight-only CUDA kernel is slow (BENCHMARKS.md): an int8 draft there runs,
    and says once that int4 is the cheap draft on a GPU; on a CPU, and for int4 anywhere, nothing is said."""
    from decode_tui.core.drafting.draft_models import _dear_on

    note = _dear_on(TargetDraft(8), torch.device("cuda"))
    assert note is not None and "--draft int4" in note and "many times slower" in note
    assert _dear_on(TargetDraft(8, 20), torch.device("cuda", 0)) == note
    assert _dear_on(TargetDraft(8), torch.device("cpu")) is None
    assert _dear_on(TargetDraft(4), torch.device("cuda")) is None
    assert load_draft(cast(Any, _Target(tiny_model("llama", vocab_size=V), V)), "int8").note is None


NO_CPU_KERNELS = ("import sys; from decode_tui.core.drafting import target_drafts; target_drafts.KERNELS.pop('cpu'); "
                  "from decode_tui.cli.main import main; sys.argv[0] = 'decode-tui'; main()")


def _without_cpu_kernels(*args: str, env: dict[str, str]) -> Any:
    """decode-tui on a device with no int4 kernel: the CPU's removed from the table of kernels."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", NO_CPU_KERNELS, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_the_cli_drafts_with_self_where_the_default_draft_has_no_kernel(tiny_model_dir: Path,
                                                                       isolated_env: dict[str, str]) -> None:
    """Speculative decoding runs by default on such a device: one note, exit 0, greedy's tokens."""
    common = ("generate", "--model", str(tiny_model_dir), "-p", "hello", "--max-new-tokens", "6", "--no-chat")
    plain = cli(*common, env=isolated_env)
    done = _without_cpu_kernels(*common, "--mode", "speculative", env=isolated_env)
    assert done.returncode == 0, done.stderr
    message = " ".join(done.stderr.split())
    assert "note: the default draft (int4) cannot run here: torch has no int4 kernel for cpu" in message
    assert message.count("cannot run here") == 1 and "Traceback" not in message
    assert done.stdout == plain.stdout


def test_the_cli_refuses_a_named_draft_the_device_cannot_run_with_exit_2(tiny_model_dir: Path,
                                                                         isolated_env: dict[str, str]) -> None:
    done = _without_cpu_kernels("generate", "--model", str(tiny_model_dir), "-p", "hello", "--mode", "speculative",
                                "--draft", "int4", "--max-new-tokens", "4", env=isolated_env)
    assert_clean_failure(done, 2, "--draft int4: torch has no int4 kernel for cpu", "--draft self")


def test_the_apps_runner_says_once_that_the_default_draft_gave_way_to_self(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the app, on a device with no int4 kernel: the loading notices say the default draft gave way to the
    target drafting for itself, once; the run decodes greedy's tokens; a second run says nothing more."""
    from decode_tui.core.live import LiveParams
    from decode_tui.tui.pump import Notice
    from decode_tui.tui.settings import Settings
    from decode_tui.tui.sources import ModelRunner

    monkeypatch.setitem(target_drafts._WORKS, (4, "cpu"), "torch has no int4 kernel for cpu")
    runner = ModelRunner()

    def run(mode: Literal["speculative", "greedy"]) -> list[Any]:
        settings = Settings(model=str(tiny_model_dir), device="cpu", prompt="ab ab ab ab",
                            config=DecodeConfig(mode=mode, max_new_tokens=12, seed=1))
        return list(runner.source(settings, LiveParams(settings.config.sampling, settings.config.draft))())

    first, again, plain = run("speculative"), run("speculative"), run("greedy")
    notes = [e.message for e in first if isinstance(e, Notice) and e.kind == "note"]
    assert notes == ["the default draft (int4) cannot run here: torch has no int4 kernel for cpu; the target drafts "
                     "for itself (--draft self). --draft names another."]
    assert not [e for e in again if isinstance(e, Notice) and e.kind == "note"]
    finals = [next(e for e in events if isinstance(e, Finished)) for events in (first, again, plain)]
    assert finals[0].token_ids == finals[1].token_ids == finals[2].token_ids
    assert finals[0].drafted, "it drafted, with the target itself"
