"""Benchmark: the core on a GPU, written to be run in one go on a lent H100.

Sections (``--only``, comma-separated):

- ``phi3``: greedy tokens/s for a model of Phi-3-mini's exact architecture and size (3.8 B parameters,
  built from its config with random weights: no weights can be downloaded there) in bf16: ours on the
  plain path and on the fast path (``--fast``: static KV cache, CUDA graphs), against transformers'
  ``generate`` (its default dynamic cache, and its own static cache compiled) on the same GPU in the same
  run; each as a fraction of the memory-bandwidth bound, weight bytes / bandwidth (3.35 TB/s for an
  H100 SXM, ``--bandwidth``). Random weights decode at the same speed as trained ones: the work per
  token does not depend on the values. End of sequence is disabled so every run decodes all tokens.
- ``verify``: the cost of one forward over k = 1, 2, 4, 8, 16 tokens (a verification of k-1 drafts
  plus the pending token) relative to one decoding step, on the same model; the fast path for k = 1,
  4, 16 (each k is a graph to compile).
- ``drafting``: on the embedded SmolLM2 (bf16): PLD (fixed and adaptive) and speculative decoding with each
  draft of ``--drafts`` (default int4, int8, self, layers:10), at the default length and adaptive, over our
  greedy, on the CPU benchmark's prompts: speed-up with its range, acceptance, c, and the draft lengths the
  adaptive mode chooses on this device.
- ``draftcost``: c of the int4 and int8 drafts of the Phi-3-mini-sized model (bandwidth-bound: the int4 draft
  should cost clearly less than a step), then what a step's weight products cost by kind (bf16, int4 in groups
  of 32 and of 128, int8), to split c into the products and the rest of the step.
- ``beamahead``: beam search on the embedded SmolLM2 with each step's pass queued before the last step is read
  back (an option, off by default until this times it) against the steps in order (the default; here the
  control), alternated.

Changes that were measured and kept (the shared write position, the replayed reorder, float masks in the graphs)
keep no switch in the package: their control is the commit before them, timed from a ``git worktree``
(``benchmarks/worktree_bench.py``). The fused draft layers' control is built by ``tests/controls.py``.
- ``app``: the app's tokens/s against headless on the embedded model (as ``app_vs_headless.py``): greedy, PLD and
  beam, each also against headless in a process as young as the app's, then greedy and PLD with the decoding
  thread pinned to a CPU of its own (the control for its moves).
- ``behind``: the background compile (core/execution/background_compile.py) on the Phi-3-mini-sized model, as the
  app uses it: greedy on the default path (CUDA graphs of the eager model), then runs while the worker
  compiles, then runs on the compiled graphs; the seconds until it settled and whether the tokens stay the
  same. The two sides cannot be alternated: the switch is one-way, as it is in the app.

``--tiny`` swaps the Phi-3-mini-sized model for a small one of the same architecture, so the script
can be checked on a CPU before device time is spent.

    python benchmarks/gpu.py [--only phi3,verify,draftcost,drafting,beamahead,app,behind]
                             [--new-tokens 256] [--repeats 3] [--drafts int4,int8,self,layers:10]
                             [--ahead [int4,self]] [--unfused [int4]] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import torch

from decode_tui.core.execution.forward import forward, new_cache, rollback
from decode_tui.core.execution.transfers import to_host
from decode_tui.core.model.loading import LoadedModel
from decode_tui.core.params import DecodeConfig, DraftParams
from decode_tui.core.record.events import DraftProposed, Finished
from decode_tui.core.run import Run

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.controls
from decode_vs_hf import PROMPTS, machine

# microsoft/Phi-3-mini-4k-instruct's config.json, the fields that set the architecture and its size.
PHI3_MINI: dict[str, Any] = dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                 original_max_position_embeddings=4096, sliding_window=2047, rms_norm_eps=1e-5,
                 rope_theta=10000.0, hidden_act="silu", bos_token_id=1, eos_token_id=32000, pad_token_id=32000,
                 tie_word_embeddings=False)
PHI3_TINY: dict[str, Any] = {**PHI3_MINI, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 4}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def word_tokenizer(vocab_size: int) -> Any:
    """A word-level tokenizer with exactly ``vocab_size`` tokens ('w0' ... ), for a model with random weights.

    Phi-3's own tokenizer cannot be downloaded there; what matters for speed is that every id the model
    can produce decodes, as it does here, and that detokenising costs what it costs for a real one.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="w32000", pad_token="w32000")


def phi3_sized(device: torch.device, dtype: torch.dtype, tiny: bool, layers: int | None = None) -> LoadedModel:
    """The Phi-3-mini-sized model with random weights (``tiny``: a small one of its architecture), all its layers or
    the first ``layers`` (each alike: what a layer costs or computes is seen in a few)."""
    from transformers import AutoModelForCausalLM, Phi3Config

    config = Phi3Config(**(PHI3_TINY if tiny else PHI3_MINI))
    if layers is not None:
        config.num_hidden_layers = layers
    torch.manual_seed(0)
    with device:  # initialised where it will run: 3.8 B parameters initialise in seconds on a GPU
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    return LoadedModel(name="phi3-mini-sized (random weights)", model=model,
                       tokenizer=word_tokenizer(config.vocab_size), device=device, dtype=dtype,
                       eos_token_ids=frozenset(), context_length=config.max_position_embeddings)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes read per decoding step: every weight but the input embedding, of which a step reads one row."""
    embedding = model.get_input_embeddings().weight  # type: ignore[operator]
    return sum(p.numel() * p.element_size() for p in model.parameters() if p is not embedding)


def ours(lm: LoadedModel, prompt: str, new_tokens: int, fast: bool) -> tuple[Finished, list[int]]:
    final = None
    for event in Run(lm, prompt, DecodeConfig(mode="greedy", max_new_tokens=new_tokens, fast=fast)).events():
        final = event
    assert isinstance(final, Finished)
    return final, list(final.token_ids)


def hf(lm: LoadedModel, prompt_ids: list[int], new_tokens: int, **kwargs: Any) -> tuple[float, list[int]]:
    model: Any = lm.model
    ids = torch.tensor([prompt_ids], device=lm.device)
    sync(lm.device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=0, **kwargs)
    sync(lm.device)
    tokens = [int(t) for t in out[0, len(prompt_ids):]]
    return len(tokens) / (time.perf_counter() - start), tokens


PHI3_PROMPT = " ".join(f"w{(i * 7919) % 30000 + 100}" for i in range(128))  # 128 prompt tokens


def phi3_section(lm: LoadedModel, new_tokens: int, repeats: int, bandwidth: float) -> dict[str, Any]:
    prompt = PHI3_PROMPT
    prompt_ids = Run(lm, prompt, DecodeConfig(max_new_tokens=new_tokens)).prompt_ids
    # End of sequence off on both sides: ours has no EOS ids; HF stops only at a token ours never produced.
    never = next(t for t in range(lm.model.config.vocab_size - 1, 0, -1)
                 if t not in ours(lm, prompt, new_tokens, fast=False)[1])
    size = weight_bytes(lm.model)
    bound = bandwidth / size
    variants: dict[str, Any] = {
        "ours plain": lambda: ours(lm, prompt, new_tokens, fast=False),
        "ours fast": lambda: ours(lm, prompt, new_tokens, fast=True),
        "HF generate": lambda: hf(lm, prompt_ids, new_tokens, eos_token_id=never),
        # transformers compiles the forward by itself when generate is given a static cache
        "HF generate, static cache": lambda: hf(lm, prompt_ids, new_tokens, eos_token_id=never,
                                                cache_implementation="static"),
    }
    rates: dict[str, list[float]] = {}
    tokens: dict[str, list[int]] = {}
    errors: dict[str, str] = {}
    for name, call in variants.items():  # warm-up: compiles, cuBLAS heuristics, the allocator's pools
        try:
            call()
        except Exception as exc:  # HF's compiled path is a reference, not ours: report it, do not stop
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(f"phi3 {name}: failed: {errors[name]}", flush=True)
    for _ in range(repeats):
        for name, call in variants.items():
            if name in errors:
                continue
            result, ids = call()
            rates.setdefault(name, []).append(result.tokens_per_s if isinstance(result, Finished) else result)
            tokens[name] = ids
    rows: dict[str, Any] = {"weight_bytes": size, "bandwidth_bytes_per_s": bandwidth, "bound_tok_s": bound,
                            "prompt_tokens": len(prompt_ids), "new_tokens": new_tokens, "errors": errors}
    for name, rs in rates.items():
        tps = statistics.median(rs)
        rows[name] = {"tok_s": tps, "fraction_of_bound": tps / bound, "runs": rs,
                      "same_tokens_as_ours_plain": tokens[name] == tokens["ours plain"]}
        print(f"phi3 {name:>36}: {tps:7.1f} tok/s  {tps / bound:5.1%} of the bound ({bound:.0f} tok/s)  "
              f"same tokens as ours plain: {rows[name]['same_tokens_as_ours_plain']}", flush=True)
    return rows


def behind_section(lm: LoadedModel, new_tokens: int, repeats: int, bandwidth: float) -> dict[str, Any]:
    """Greedy tok/s on the eager graphs, while the background compile runs, and on the compiled graphs."""
    from decode_tui.core.execution import background_compile

    bound = bandwidth / weight_bytes(lm.model)

    prompt_ids: list[int] = []

    def run() -> tuple[float, list[int]]:
        result, ids = ours(lm, PHI3_PROMPT, new_tokens, fast=False)
        prompt_ids[:] = result.prompt_token_ids
        return result.tokens_per_s, ids

    run()  # warm-up: captures the step's graph, as the app's warm-up does
    eager = [run() for _ in range(repeats)]
    started = time.perf_counter()
    background_compile.start(lm.model)
    during = []
    while not background_compile.settled(lm.model):
        during.append(run()[0])
    settle_s = time.perf_counter() - started
    run()  # the first run after it settled switches its graph (one capture of the compiled pass)
    compiled = [run() for _ in range(repeats)]
    progress = background_compile.progress(lm.model)
    rows: dict[str, Any] = {"bound_tok_s": bound, "new_tokens": new_tokens, "settle_s": settle_s,
                            "progress": progress.describe() if progress else None,
                            "same_tokens": all(ids == eager[0][1] for _, ids in eager + compiled)}
    for name, rates in (("eager graphs", [r for r, _ in eager]), ("while compiling", during),
                        ("compiled graphs", [r for r, _ in compiled])):
        tps = statistics.median(rates) if rates else None
        rows[name] = {"tok_s": tps, "fraction_of_bound": tps / bound if tps else None, "runs": rates}
        print(f"behind {name:>16}: " + (f"{tps:7.1f} tok/s  {tps / bound:5.1%} of the bound" if tps else "no run")
              + f"  ({len(rates)} runs)", flush=True)
    print(f"behind: settled after {settle_s:.1f} s; {rows['progress']}; same tokens: {rows['same_tokens']}",
          flush=True)
    rows["first_divergence"] = divergence(lm, prompt_ids, eager[0][1], compiled[0][1])
    if rows["first_divergence"]:
        print(f"behind: first divergence {rows['first_divergence']}", flush=True)
    return rows


def divergence(lm: LoadedModel, prompt_ids: list[int], eager: list[int], compiled: list[int]) -> dict[str, Any] | None:
    """Where two outputs of one prompt part first, and why: the eager model's logits there (a plain forward over
    the prompt and the common part), its top two's margin and its logits of the two tokens chosen. A margin of a
    few hundredths in bf16 is a near-tie that another kernel's rounding may flip."""
    at = next((i for i, (a, b) in enumerate(zip(eager, compiled, strict=False)) if a != b), None)
    if at is None:
        return None
    ids = torch.tensor([prompt_ids + eager[:at]], device=lm.device)
    with torch.inference_mode():
        logits = lm.model(input_ids=ids).logits[0, -1].float()
    top = logits.topk(2).values
    return {"index": at, "eager_token": eager[at], "compiled_token": compiled[at],
            "top_two_margin": float(top[0] - top[1]),
            "logits_of_the_two": [float(logits[eager[at]]), float(logits[compiled[at]])]}


def verify_section(lm: LoadedModel, ks: list[int], fast_ks: list[int], repeats: int) -> dict[str, Any]:
    """Median time of a forward over k new tokens at position ~256, each followed by the one host copy.

    The fast path compiles one graph per k, about a minute each for this model, so it measures fewer.
    """
    model = lm.model
    prompt = torch.randint(100, 30000, (1, 256), device=lm.device)
    rows: dict[str, Any] = {}
    for fast in (False, True):
        cache = new_cache(model, rollback=True, fast=fast, max_len=256 + max(ks) + 1)
        with torch.inference_mode():
            forward(model, prompt, cache)
            times: dict[int, float] = {}
            for k in fast_ks if fast else ks:
                ids = torch.randint(100, 30000, (1, k), device=lm.device)
                samples = []
                for i in range(repeats + 3):  # the first passes compile (fast path) and warm up
                    sync(lm.device)
                    start = time.perf_counter()
                    logits = forward(model, ids, cache, keep=k)
                    to_host([logits.argmax(-1)])  # what a verification copies back; it waits for the GPU
                    if i >= 3:
                        samples.append(time.perf_counter() - start)
                    rollback(cache, 256)
                times[k] = statistics.median(samples)
        name = "fast" if fast else "plain"
        rows[name] = {str(k): {"ms": 1000 * t, "relative_to_step": t / times[1]} for k, t in times.items()}
        print(f"verify {name:>5}: " + "  ".join(f"k={k} {1000 * t:.2f} ms ({t / times[1]:.2f}x)"
                                                 for k, t in times.items()), flush=True)
    return rows


def drafting_section(lm: LoadedModel, new_tokens: int, repeats: int, drafts: list[str], prompts: list[str],
                     rows: dict[str, Any], save: Callable[[], None], ahead: Collection[str] = (),
                     unfused: Collection[str] = ()) -> None:
    """Each draft made from the target (built as the CLI builds it: int4/int8 on the device's own kernels, its
    graphs captured like the target's), at the default draft length and adaptive, and PLD, against our greedy
    on the same path: speed-up (ratio of medians), identical tokens, acceptance, c (a draft step over a target
    step) and the prediction. ``ahead``: the drafts that also run ahead (each step's pass queued before the last
    drafted token is read back; the control for the default, stepping in order). ``unfused``: the drafts that
    are also timed with transformers' own modules (the control for the fused layers a built draft has).
    Each prompt's row goes into ``rows`` and is saved as soon as it is measured: a phase stopped at its time limit
    keeps the prompts it finished.
    """
    from decode_tui.core.drafting.draft_models import load_draft

    built = {spec: load_draft(lm, spec) for spec in drafts}
    variants: dict[str, tuple[DecodeConfig, Any]] = {
        "pld": (DecodeConfig(mode="pld", max_new_tokens=new_tokens), None),
        "pld adaptive": (DecodeConfig(mode="pld", max_new_tokens=new_tokens,
                                      draft=DraftParams(adaptive=True)), None),
    }
    for spec, draft in built.items():
        variants[f"speculative {spec}"] = (DecodeConfig(mode="speculative", max_new_tokens=new_tokens,
                                                        draft=DraftParams(draft=spec)), draft)
        variants[f"speculative {spec} adaptive"] = (DecodeConfig(
            mode="speculative", max_new_tokens=new_tokens, draft=DraftParams(draft=spec, adaptive=True)), draft)
        if spec in unfused:  # the control: the draft with transformers' norms, attention and MLP
            variants[f"speculative {spec} unfused"] = (DecodeConfig(
                mode="speculative", max_new_tokens=new_tokens, draft=DraftParams(draft=spec)), unfused_draft(lm, spec))
        if spec in ahead:  # the control: each step's pass queued before the last drafted token is read back
            variants[f"speculative {spec} ahead"] = (DecodeConfig(
                mode="speculative", max_new_tokens=new_tokens, draft=DraftParams(draft=spec)),
                dataclasses.replace(draft, run_ahead=True))
    for name in prompts:
        prompt = PROMPTS[name]
        greedy = DecodeConfig(mode="greedy", max_new_tokens=new_tokens)
        reference = run_once(lm, prompt, greedy)[0]  # warm-up
        for config, drafter in variants.values():
            run_once(lm, prompt, config, drafter)  # each variant's warm-up: its graphs captured before timing
        times: dict[str, list[float]] = {}
        row: dict[str, Any] = {}
        for _ in range(repeats):  # alternated: greedy, then every variant, round after round
            times.setdefault("greedy", []).append(run_once(lm, prompt, greedy)[1])
            for variant, (config, drafter) in variants.items():
                final, elapsed, lengths = run_once(lm, prompt, config, drafter)
                times.setdefault(variant, []).append(elapsed)
                row[variant] = {"identical": final.token_ids == reference.token_ids,
                                "acceptance_rate": final.acceptance_rate, "c": final.draft_cost_ratio,
                                "predicted": final.predicted_speedup,
                                "tokens_per_forward": final.new_tokens / final.target_forwards,
                                "draft_lengths": dict(sorted(Counter(lengths).items()))}
        base = statistics.median(times["greedy"])
        for variant in variants:
            ratios = [base / t for t in times[variant]]
            row[variant]["speedup"] = base / statistics.median(times[variant])
            row[variant]["range"] = [min(ratios), max(ratios)]
            v = row[variant]
            c = f"  c {v['c']:.2f}" if v["c"] is not None else ""
            print(f"drafting {name:>10} {variant:>32}: {v['speedup']:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})  "
                  f"identical={v['identical']}  acceptance {v['acceptance_rate']:.0%}{c}  "
                  f"tokens/forward {v['tokens_per_forward']:.2f}"
                  + (f"  draft lengths {v['draft_lengths']}" if "adaptive" in variant else ""), flush=True)
        rows[name] = row
        save()


def against_control(lm: LoadedModel, prompt: str, config: DecodeConfig, control: Callable[[], Any], repeats: int,
                    drafts: dict[bool, Any] | None = None) -> dict[str, Any]:
    """Warm runs of ``config`` as it is and inside ``control()`` (a context manager), alternated round by round,
    each round's ratio of the control's time over the default's; ``drafts``: each side's draft (by "default")."""

    def timed(default: bool) -> tuple[Finished, float]:
        with contextlib.nullcontext() if default else control():
            final, elapsed, _ = run_once(lm, prompt, config, drafts[default] if drafts else None)
        return final, elapsed

    for default in (True, False):
        timed(default)  # warm-up: each side's caches built and graphs captured
    times: dict[bool, list[float]] = {True: [], False: []}
    tokens: dict[bool, list[int]] = {}
    for _ in range(repeats):
        for default in (True, False):
            final, elapsed = timed(default)
            times[default].append(elapsed)
            tokens[default] = list(final.token_ids)
    ratios = [control_s / default_s for default_s, control_s in zip(times[True], times[False], strict=True)]
    return {"tok_s": len(tokens[True]) / statistics.median(times[True]),
            "control_tok_s": len(tokens[False]) / statistics.median(times[False]),
            "speedup": statistics.median(ratios), "range": [min(ratios), max(ratios)],
            "identical": tokens[True] == tokens[False]}


def ab_line(row: dict[str, Any]) -> str:
    return (f"{row['tok_s']:.1f} tok/s, the control {row['control_tok_s']:.1f} tok/s: {row['speedup']:.3f}x "
            f"({row['range'][0]:.3f}-{row['range'][1]:.3f}), identical={row['identical']}")


def beam_against(lm: LoadedModel, new_tokens: int, repeats: int, control: Callable[[], Any],
                 line: str) -> dict[str, Any]:
    """Beam search (4 beams) on the code edit and the summary against ``control``, a row a prompt, each printed
    after ``line`` (its ``{prompt}`` filled in)."""
    rows: dict[str, Any] = {}
    for prompt in ("code-edit", "summarise"):
        config = DecodeConfig(mode="beam", max_new_tokens=new_tokens)
        rows[prompt] = against_control(lm, PROMPTS[prompt], config, control, repeats)
        print(f"{line.format(prompt=prompt)}: {ab_line(rows[prompt])}", flush=True)
    return rows


@contextlib.contextmanager
def beam_steps(ahead: bool) -> Iterator[None]:
    """Beam searches started inside run one pass ahead (each step's pass queued before the last step is read back
    and told) or their steps in order (the core's default)."""
    from unittest import mock

    from decode_tui.core import run
    from decode_tui.core.strategies.beam import beam_search

    with mock.patch.object(run, "beam_search", functools.partial(beam_search, run_ahead=ahead)):
        yield


def beam_ahead_section(lm: LoadedModel, new_tokens: int, repeats: int) -> dict[str, Any]:
    """Beam search (4 beams, SmolLM2, the code edit and the summary) running one pass ahead, an option, against
    the control, its steps in order (the default): warm runs alternated round by round, so that the row reads as
    the reorder's and the masks' do, the option's speed-up over the control."""
    with beam_steps(ahead=True):
        return beam_against(lm, new_tokens, repeats, functools.partial(beam_steps, ahead=False),
                            "beamahead {prompt}: one pass ahead against steps in order (the control)")


def unfused_draft(lm: LoadedModel, spec: str) -> Any:
    """The draft ``spec`` with transformers' own modules, the control for the fused layers a draft has by default."""
    from unittest import mock

    from decode_tui.core.drafting import target_drafts
    from decode_tui.core.drafting.draft_models import load_draft
    from tests.controls import unfused_build

    with mock.patch.object(target_drafts, "build", unfused_build):
        return load_draft(lm, spec)


def draft_cost_section(lm: LoadedModel, drafts: list[str], new_tokens: int) -> dict[str, Any]:
    """c of each quantised draft on the Phi-3-mini-sized model (random weights: the acceptance means nothing
    there, the cost per step does): a warm speculative run's draft step over its measured target step, with the
    draft's layers fused (the default) and, the control, with transformers' own: what the fewer kernels save.
    Beside each c, the CUDA kernels one eager step launches (the target's too), which c should follow."""
    from decode_tui.core.drafting import draft_layers
    from decode_tui.core.drafting.draft_models import load_draft
    from decode_tui.core.params import target_draft

    rows: dict[str, Any] = {"target": {"kernels": step_kernels(lm.model)}}
    for spec in drafts:
        config = DecodeConfig(mode="speculative", max_new_tokens=new_tokens, draft=DraftParams(draft=spec,
                                                                                               confidence_threshold=0.0))
        for name, build in ((spec, load_draft), (f"{spec} unfused", unfused_draft)):
            draft = build(lm, spec)
            run_once(lm, "the the the the", config, draft)  # warm-up: the draft's graphs captured
            final = run_once(lm, "the the the the", config, draft)[0]
            kernels = step_kernels(draft.model)
            # What the draft kept of transformers' modules where a fused form was tried: the first lease's fused
            # row had kept most attentions (728 kernels a step against 530), which only the kernel count showed.
            made = target_draft(spec)
            kept = draft_layers.kept(draft.model, join_products=made is not None and made.bits is not None)
            rows[name] = {"c": final.draft_cost_ratio, "draft_forwards": final.draft_forwards, "kernels": kernels,
                          "kept": kept}
            print(f"draft cost phi3-sized {name}: c {final.draft_cost_ratio}; kernels a step {kernels} (the "
                  f"target's {rows['target']['kernels']}); kept of transformers' modules {kept or 'none'}",
                  flush=True)
            del draft
    return rows


def step_kernels(model: Any) -> int | None:
    """The CUDA kernels one eager decoding step of ``model`` launches (one token after 32, a cache of its own),
    counted by torch's profiler: what c should follow where a step is small kernels. None off CUDA."""
    from torch._C._autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    device = next(model.parameters()).device
    if device.type != "cuda":
        return None
    try:  # an extra figure: where the profiler fails, the row keeps its c
        cache = new_cache(model, rollback=True)
        with torch.inference_mode():
            forward(model, torch.arange(100, 132, device=device)[None], cache)
            forward(model, torch.tensor([[7]], device=device), cache)  # once untimed: every kernel loaded
            rollback(cache, 32)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                forward(model, torch.tensor([[7]], device=device), cache)
                torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    except Exception as exc:
        print(f"kernels of a step not counted: {type(exc).__name__}: {exc}", flush=True)
        return None


COLD_BYTES = 256 * 2**20  # weights a product cycles through, past an H100's 50 MB of L2 (and a CPU's caches)


def products_section(lm: LoadedModel, calls: int = 50) -> dict[str, Any]:
    """What one decoding step's weight products cost, one input row, by kind: bf16 (the target's), the int4 draft's
    (groups of 32) and, for comparison, int4 in gpt-fast's groups of 128 and int8. Summed over the model's Linear
    layers by shape, so that c can be split into the products and the rest of a step (norms, attention, rotary,
    the host), which a draft pays as the target does. At 32 a group's scale and offset add a quarter to the 4-bit
    weights' bytes, at 128 a sixteenth: whether that is what keeps c over its target is what this says.

    In a step each layer's weights are read once, from memory; a product timed over and over on one layer would
    find them in the cache (an int4 3072x3072 layer is 6 MB, an H100's L2 50 MB) and flatter the small kinds. So
    each timing cycles through copies of the layer, COLD_BYTES of them (at most ``calls``). On CUDA the ``calls``
    products are one CUDA graph (each a few microseconds: launches would swamp them); on the CPU, the clock."""
    from decode_tui.core.drafting.target_drafts import Int4Linear, Int8Linear

    shapes = Counter((m.in_features, m.out_features) for m in lm.model.modules() if isinstance(m, torch.nn.Linear))
    kinds: dict[str, Callable[[torch.nn.Linear], torch.nn.Module]] = {
        "bf16": lambda linear: copy.deepcopy(linear), "int4 g32": Int4Linear,
        "int4 g128": lambda linear: Int4Linear(linear, group=128), "int8": Int8Linear}
    totals = dict.fromkeys(kinds, 0.0)
    by_shape: dict[str, dict[str, float]] = {}
    with torch.inference_mode():
        for (k, n), count in sorted(shapes.items()):
            linear = torch.nn.Linear(k, n, bias=False, device=lm.device, dtype=torch.bfloat16)
            x = torch.randn(1, k, device=lm.device, dtype=torch.bfloat16)
            row = by_shape[f"{k}x{n} (x{count})"] = {}
            for kind, make in kinds.items():
                if kind == "int4 g128" and k % 128:
                    continue
                layers = [make(linear)]
                size = sum(t.numel() * t.element_size() for t in [*layers[0].parameters(), *layers[0].buffers()])
                layers += [make(linear) for _ in range(min(calls, -(-COLD_BYTES // size)) - 1)]
                row[kind] = round(product_us(layers, x, calls), 2)
                totals[kind] += row[kind] * count
                del layers
            del linear
    result: dict[str, Any] = {"us_per_step": {kind: round(t, 1) for kind, t in totals.items()},
                              "over_bf16": {kind: round(t / totals["bf16"], 3) for kind, t in totals.items()},
                              "by_shape": by_shape}
    print(f"products of one step: {result['us_per_step']} us; over bf16 {result['over_bf16']}", flush=True)
    return result


def product_us(layers: list[torch.nn.Module], x: torch.Tensor, calls: int) -> float:
    """Microseconds of one product: the median of 5 timings of ``calls`` products, the layers taken in turn."""
    def all_calls() -> None:
        for i in range(calls):
            layers[i % len(layers)](x)

    all_calls()
    if x.device.type == "cuda":
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warmed up on a side stream, as a capture wants
            all_calls()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            all_calls()
        graph.replay()
        times = []
        for _ in range(5):
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / calls)
        return float(statistics.median(times))
    times = []
    for _ in range(5):
        start_s = time.perf_counter()
        all_calls()
        times.append((time.perf_counter() - start_s) * 1e6 / calls)
    return float(statistics.median(times))


def run_once(lm: LoadedModel, prompt: str, config: DecodeConfig, draft: Any = None
             ) -> tuple[Finished, float, list[int]]:
    lengths: list[int] = []
    start = time.perf_counter()
    final = None
    for event in Run(lm, prompt, config, draft).events():
        final = event
        if isinstance(event, DraftProposed):
            lengths.append(len(event.token_ids))
    assert isinstance(final, Finished)
    return final, time.perf_counter() - start, lengths


def listed(value: str, drafts: list[str]) -> list[str]:
    """An option that names drafts: every one of ``drafts`` for "all" (the option given without a list), else its
    comma-separated names, none for ""."""
    return drafts if value == "all" else value.split(",") if value else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="phi3,verify,drafting,app")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bandwidth", type=float, default=3.35e12, help="bytes/s; 3.35e12 for an H100 SXM")
    parser.add_argument("--drafts", default="int4,int8,self,layers:10", help="drafts made from the target")
    parser.add_argument("--prompts", help="comma-separated: which of decode_vs_hf.py's prompts the drafting section "
                        "runs (all by default)")
    parser.add_argument("--ahead", nargs="?", const="all", default="", help="the drafting section also times these "
                        "drafts (all without a list) running ahead: each step's pass queued before the last token is "
                        "read back (the control for the default, stepping in order)")
    parser.add_argument("--unfused", nargs="?", const="all", default="", help="the drafting section also times these "
                        "drafts (all without a list) with transformers' own modules (the control for the fused layers)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tiny", action="store_true", help="a small Phi-3, to check the script on a CPU")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sections = set(args.only.split(","))
    from decode_tui.core.model.loading import resolve_device, resolve_dtype

    device = resolve_device(args.device)
    dtype = resolve_dtype("auto", device)
    results: dict[str, Any] = {"machine": machine(), "device": str(device), "dtype": str(dtype)}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)
        results["cuda"] = torch.version.cuda
        try:
            import subprocess

            results["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                               capture_output=True, text=True).stdout.strip()
        except OSError:
            results["driver"] = None
    print(json.dumps({k: v for k, v in results.items() if k != "machine"}), flush=True)

    def save() -> None:  # after every section: a run stopped at its time limit keeps what it measured
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    drafts = args.drafts.split(",")
    if sections & {"phi3", "verify", "behind", "draftcost"}:
        lm = phi3_sized(device, dtype, args.tiny)
        if "draftcost" in sections:
            results["draftcost"] = draft_cost_section(lm, [d for d in drafts if d.startswith("int")], 64)
            save()
            results["draftcost"]["products"] = products_section(lm)
            save()
        if "phi3" in sections:
            results["phi3"] = phi3_section(lm, args.new_tokens, args.repeats, args.bandwidth)
            save()
        if "verify" in sections:
            results["verify"] = verify_section(lm, [1, 2, 4, 8, 16], [1, 4, 16], max(10, 5 * args.repeats))
            save()
        if "behind" in sections:  # last on this model: once switched, its default path is the compiled one
            results["behind"] = behind_section(lm, args.new_tokens, args.repeats, args.bandwidth)
            save()
        del lm
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if sections & {"drafting", "app", "beamahead"}:
        from decode_tui.core.model.embedded import pull
        from decode_tui.core.model.loading import load_model
        from decode_tui.core.model.registry import resolve

        pull("smollm2")
        smol = load_model(resolve("smollm2"), device=args.device, dtype="auto")
        # Each change on the embedded model against its control, in the order listed.
        controlled = {"beamahead": beam_ahead_section}
        for name, section in controlled.items():
            if name in sections:
                results[name] = section(smol, 128, args.repeats)
                save()
        if "drafting" in sections:
            drafting_section(smol, 128, args.repeats, drafts,
                             args.prompts.split(",") if args.prompts else list(PROMPTS),
                             results.setdefault("drafting", {}), save,
                             listed(args.ahead, drafts), listed(args.unfused, drafts))
        if "app" in sections:
            import app_vs_headless

            lm = dataclasses.replace(smol, eos_token_ids=frozenset())
            rows: dict[str, Any] = results.setdefault("app", {})
            # The last rows are controls: the decoding thread pinned to a CPU of its own on both sides (the UI
            # thread to the others), for what the decoder's moves between CPUs cost it. Earlier controls, answered
            # (BENCHMARKS.md): Python's own switch interval (0.858 against 0.920) and decoding at once while the app
            # paints a run's start (greedy 0.824 against 0.923).
            # The greedy, PLD and beam rows also decode headlessly in a child process as young as the app's (its
            # start, one untimed run, then the timed ones): the control for the app's side being a young process
            # each round while the headless side decodes in this long-lived one. On the H200 (2026-11-27) this
            # process's headless greedy went 278-289 tok/s in the first round and 326-328 in the second, where the
            # app's and the young child's went 275-288 in both: the app kept 1.00 of the first round's and 0.87 of
            # the second's. A user's headless `decode-tui generate` is a young process too.
            for name, mode, pin in (("greedy", "greedy", False), ("pld", "pld", False), ("beam", "beam", False),
                                    ("greedy, decoder pinned", "greedy", True), ("pld, decoder pinned", "pld", True)):
                # Three runs a side a round (a run there is under half a second; a round's app side is a process of its
                # own, most of whose time is its start), and each round's ratio kept, the two sides back to back.
                rows[name] = app_vs_headless.throughput(lm, "summarise", mode, 128, args.repeats, per_round=3,
                                                        pin=pin, fresh_headless=not pin)
                print(f"app {name}: {app_vs_headless.summary(rows[name])}", flush=True)
                save()  # row by row: a call that runs out of time keeps what it measured
    save()


if __name__ == "__main__":
    main()
