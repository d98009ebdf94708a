"""The default CUDA path (captured graphs of the eager model on a pooled static cache), checked on the CPU.

A CUDA graph cannot be captured without CUDA, so these tests swap ``torch.cuda.CUDAGraph`` for an eager
stand-in with a graph's contract: static input ids, one static output that every replay overwrites, the
cache's write position advanced by the recorded pass. Everything else runs as it does on a GPU: the
pool that hands a cache and its graphs to the next run, the capture's warm-up that must leave the cache
as it was, the copy that protects a replay's output from the next replay (run-ahead), the padded
verification and the fallback when capture fails. The real capture is tested in tests/test_gpu.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
import torch

from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.execution import forward as forward_module
from decode_tui.core.execution.forward import StaticKV, graph_failure, graphs_available, new_cache, release
from decode_tui.core.execution.model_state import state_of
from decode_tui.core.params import BeamParams, SamplingParams
from decode_tui.core.record.events import BeamStepped, DraftProposed, DraftVerified, Event, Finished, TokenEmitted
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.beam import beam_search
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model
from .test_fast_path import ARCHS, V, assert_same_events, sliding_phi3, transcript
from .test_speculative import repetitive_prompt


class EagerGraphs:
    """Stands in for CudaGraphs: 'capture' records the pass, 'replay' runs it again into the same output."""

    captures = 0
    by_model: dict[int, int] = {}  # noqa: RUF012 - id(model) -> its captures; reset by the fixture

    @classmethod
    def capture(cls, model: Any, run: Callable[[], torch.Tensor], put_back: Callable[[], None],
                ) -> tuple[Callable[[], None], torch.Tensor]:
        cls.captures += 1
        cls.by_model[id(model)] = cls.by_model.get(id(model), 0) + 1
        warm = run()  # the warm-up pass, as on CUDA: it advances the cache, which put_back() must undo
        put_back()
        out = torch.full_like(warm, float("nan"))  # a graph's output holds nothing until it is replayed

        def replay() -> None:
            out.copy_(run())

        return replay, out


class FailingGraphs:
    @staticmethod
    def capture(model: Any, run: Callable[[], torch.Tensor], put_back: Callable[[], None]) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")


@pytest.fixture
def cpu_graphs(monkeypatch: pytest.MonkeyPatch) -> type[EagerGraphs]:
    monkeypatch.setattr(forward_module, "GRAPH_DEVICES", frozenset({"cpu"}))
    monkeypatch.setattr(forward_module, "GraphBackend", EagerGraphs)
    EagerGraphs.captures = 0
    EagerGraphs.by_model = {}
    return EagerGraphs


def model_for(seed: int) -> Any:
    return sliding_phi3(seed) if seed == 7 else tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sample"])
@pytest.mark.parametrize("run_ahead", [False, True], ids=["in-order", "run-ahead"])
def test_replayed_steps_give_the_plain_paths_events(byte_bpe: Any, cpu_graphs: type[EagerGraphs], seed: int,
                                                    sample: bool, run_ahead: bool) -> None:
    model = model_for(seed)
    prompt = repetitive_prompt(seed, 1 + 3 * seed)
    params = SamplingParams(repetition_penalty=1.2, top_k=20) if seed % 2 else SamplingParams()

    def go(graphs: bool) -> list[Event]:
        return list(autoregressive(model, transcript(byte_bpe, prompt, 24), params, greedy=not sample,
                                   generator=torch.Generator().manual_seed(seed), graphs=graphs,
                                   run_ahead=run_ahead))

    plain = go(False)
    assert cpu_graphs.captures == 0
    assert_same_events(plain, go(True))
    assert cpu_graphs.captures == 1, "one graph for the step"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("drafter", ["lookup tree", "suffix"])
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sample"])
def test_tree_verifications_on_the_graph_path_give_the_plain_paths_events(
        byte_bpe: Any, cpu_graphs: type[EagerGraphs], seed: int, drafter: str, sample: bool) -> None:
    """A tree's forward replays one graph captured at the drafter's budget (the tree padded to it, its mask and
    position ids inputs of the graph like its ids), between replayed steps: its kept path's keys moved in place,
    its end moved back, the same events as the plain path."""
    from decode_tui.core.drafting.suffix_drafting import SuffixDrafter, SuffixHistory
    from decode_tui.core.execution.forward import captured_shapes

    model = model_for(seed)
    prompt = repetitive_prompt(seed, 6 + seed)

    def go(graphs: bool) -> list[Event]:
        proposer = PromptLookup(2, 4, tree_budget=8) if drafter == "lookup tree" else \
            SuffixDrafter(SuffixHistory(), 4, 8)
        return list(speculative(model, transcript(byte_bpe, prompt, 24), proposer,
                                SamplingParams(top_k=30) if sample else SamplingParams(), greedy=not sample,
                                num_draft_tokens=4, generator=torch.Generator().manual_seed(seed), graphs=graphs))

    plain, replayed = go(False), go(True)
    assert_same_events(plain, replayed)
    trees = [e for e in replayed if isinstance(e, DraftVerified) and e.path is not None]
    if trees:  # a round that drafted a tree replayed the tree graph of the budget's width, 8 nodes and the pending
        assert any(width == 9 == kept for _, _, width, kept in captured_shapes(model)), captured_shapes(model)
    assert_same_events(plain, go(True))  # the next run replays the pooled cache's graphs


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("drafter", ["lookup", "model"])
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sample"])
def test_replayed_verifications_give_the_plain_paths_events(byte_bpe: Any, cpu_graphs: type[EagerGraphs], seed: int,
                                                            drafter: str, sample: bool) -> None:
    model = model_for(seed)
    prompt = repetitive_prompt(seed, 4 + seed)
    k = 1 + seed % 6

    draft_model = tiny_model("llama", vocab_size=V, seed=seed + 50)

    def go(graphs: bool) -> list[Event]:
        proposer = PromptLookup(3, 6) if drafter == "lookup" else ModelDrafter(draft_model, V)
        return list(speculative(model, transcript(byte_bpe, prompt, 2 + 5 * seed), proposer,
                                SamplingParams(top_k=30) if sample else SamplingParams(), greedy=not sample,
                                num_draft_tokens=k, generator=torch.Generator().manual_seed(seed), graphs=graphs))

    plain, replayed = go(False), go(True)
    assert_same_events(plain, replayed)
    # The verification of k + 1 tokens is captured right after the prefill, whatever the rounds proposed, and the
    # one-token step: plain steps where nothing was drafted, and a draft model's timed step (what c divides by).
    assert cpu_graphs.by_model.get(id(model)) == 2
    # The draft model follows the target onto graphs: each width it feeds (a step, a catch-up) captured once.
    drafted = sum(e.draft_forwards for e in replayed if isinstance(e, Finished) and e.draft_forwards) \
        if drafter == "model" else 0
    assert (cpu_graphs.by_model.get(id(draft_model), 0) > 0) == (drafted > 1)


def test_a_second_run_reuses_the_pooled_cache_and_its_graphs(byte_bpe: Any, cpu_graphs: type[EagerGraphs]) -> None:
    model = tiny_model("llama", vocab_size=V, seed=3)
    prompt = repetitive_prompt(3, 14)
    runs = [list(autoregressive(model, transcript(byte_bpe, p, 20), SamplingParams(), greedy=True, graphs=True))
            for p in (prompt, prompt[:9], prompt)]
    assert cpu_graphs.captures == 1, "captured once, replayed by every run of the same cache size"
    assert runs[0][-1] == runs[2][-1] or (
        isinstance(runs[0][-1], Finished) and isinstance(runs[2][-1], Finished)
        and runs[0][-1].token_ids == runs[2][-1].token_ids), "a reused cache forgets the last run"
    plain = list(autoregressive(model, transcript(byte_bpe, prompt[:9], 20), SamplingParams(), greedy=True))
    assert_same_events(plain, runs[1])


def test_a_leased_cache_is_never_handed_to_a_second_run(byte_bpe: Any, cpu_graphs: type[EagerGraphs]) -> None:
    """Two runs of one model interleaved (a drafter, a comparison, an abandoned generator): two caches."""
    model = tiny_model("llama", vocab_size=V, seed=5)
    prompt = repetitive_prompt(5, 12)
    plain = list(autoregressive(model, transcript(byte_bpe, prompt, 16), SamplingParams(), greedy=True))
    a = autoregressive(model, transcript(byte_bpe, prompt, 16), SamplingParams(), greedy=True, graphs=True)
    b = autoregressive(model, transcript(byte_bpe, prompt, 16), SamplingParams(), greedy=True, graphs=True)
    events_a: list[Event] = []
    events_b: list[Event] = []
    for ea, eb in zip(a, b, strict=True):  # step by step, alternately
        events_a.append(ea)
        events_b.append(eb)
    assert_same_events(plain, events_a)
    assert_same_events(plain, events_b)


def test_release_returns_a_cache_and_a_stopped_run_releases_its_own(byte_bpe: Any,
                                                                     cpu_graphs: type[EagerGraphs]) -> None:
    model = tiny_model("llama", vocab_size=V, seed=6)
    cache = new_cache(model, graphs=True, max_len=40)
    assert isinstance(cache, StaticKV) and cache.leased and cache.path == "graphs"
    other = new_cache(model, graphs=True, max_len=40)
    assert other is not cache, "leased: another run gets another cache"
    release(cache)
    assert new_cache(model, graphs=True, max_len=40) is cache
    release(cache)
    release(other)
    run = autoregressive(model, transcript(byte_bpe, [5, 6, 7], 30), SamplingParams(), greedy=True, graphs=True)
    next(run)
    run.close()  # the consumer stopped: the strategy's finally hands the cache back
    assert not any(c.leased for caches in state_of(model).pool.values() for c in caches)


def test_a_failed_capture_falls_back_to_eager_passes_with_the_same_tokens(
        byte_bpe: Any, cpu_graphs: type[EagerGraphs], monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("qwen2", vocab_size=V, seed=2)
    prompt = repetitive_prompt(2, 10)
    plain = list(speculative(model, transcript(byte_bpe, prompt, 20), PromptLookup(3, 6), SamplingParams(),
                             greedy=True, num_draft_tokens=4))
    monkeypatch.setattr(forward_module, "GraphBackend", FailingGraphs)
    assert graphs_available(model)
    fallback = list(speculative(model, transcript(byte_bpe, prompt, 20), PromptLookup(3, 6), SamplingParams(),
                                greedy=True, num_draft_tokens=4, graphs=True))
    assert_same_events(plain, fallback)
    reason = graph_failure(model)
    assert reason is not None and reason.startswith("RuntimeError: operation not permitted") and "\n" not in reason
    assert not graphs_available(model), "a model whose capture failed is not tried again"


@pytest.mark.parametrize("mode", ["greedy", "sample", "pld", "beam"])
def test_a_run_replays_graphs_only_where_the_device_has_them(byte_bpe: Any, monkeypatch: pytest.MonkeyPatch,
                                                             mode: str) -> None:
    from decode_tui.core.params import DecodeConfig
    from decode_tui.core.run import Run

    from .test_autoregressive import loaded

    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    config = DecodeConfig(mode=mode, max_new_tokens=12, seed=5)
    assert Run(lm, "ab ab ab ab", config).path == "plain", "no CUDA here: the plain path"
    monkeypatch.setattr(forward_module, "GRAPH_DEVICES", frozenset({"cpu"}))
    monkeypatch.setattr(forward_module, "GraphBackend", EagerGraphs)
    run = Run(lm, "ab ab ab ab", config)
    assert run.path == "cuda-graphs"
    assert run.params()["path"] == run.path
    off = Run(lm, "ab ab ab ab", DecodeConfig(mode=mode, max_new_tokens=12, seed=5, cuda_graphs=False))
    assert off.path == "plain"
    events = list(run.events())
    assert isinstance(events[-1], Finished)
    assert events[-1].token_ids == next(e for e in off.events() if isinstance(e, Finished)).token_ids


def assert_same_beam_events(plain: list[Event], replayed: list[Event]) -> None:
    """Same beams, parents, candidates and verdicts at every step; scores equal to float32 rounding."""
    assert [type(e) for e in plain] == [type(e) for e in replayed]
    for a, b in zip(plain, replayed, strict=True):
        if isinstance(a, BeamStepped):
            assert isinstance(b, BeamStepped)
            assert [(x.token_ids, x.parent) for x in a.beams] == [(x.token_ids, x.parent) for x in b.beams]
            assert [(c.parent, c.token_id, c.verdict) for c in a.candidates] == \
                [(c.parent, c.token_id, c.verdict) for c in b.candidates]
            assert [c.sum_logprobs for c in a.candidates] == \
                pytest.approx([c.sum_logprobs for c in b.candidates], abs=1e-4)
            assert [h.token_ids for h in a.finished] == [h.token_ids for h in b.finished]
            assert a.early_stop.done == b.early_stop.done
        elif isinstance(a, Finished):
            assert isinstance(b, Finished) and a.token_ids == b.token_ids
            assert [h.token_ids for h in a.hypotheses or ()] == [h.token_ids for h in b.hypotheses or ()]
            assert [h.score for h in a.hypotheses or ()] == \
                pytest.approx([h.score for h in b.hypotheses or ()], abs=1e-4)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("run_ahead", [False, True], ids=["in-order", "run-ahead"])
def test_replayed_beam_steps_give_the_plain_paths_search(byte_bpe: Any, cpu_graphs: type[EagerGraphs],
                                                         seed: int, run_ahead: bool) -> None:
    """The N beams' batched step replayed on a static cache, its rows reordered in place after every step; run
    ahead (an option) or in order, and again on the pooled cache, which a search that ran ahead left with a pass
    past its end."""
    model = model_for(seed)
    prompt = repetitive_prompt(seed, 3 + 2 * seed)
    beam = BeamParams(num_beams=2 + seed % 3, num_return_sequences=2, length_penalty=(1.0, 0.5, -0.5)[seed % 3],
                      early_stopping=(True, False, "never")[seed % 3])

    def go(graphs: bool) -> list[Event]:
        return list(beam_search(model, transcript(byte_bpe, prompt, 6 + 2 * seed), beam, SamplingParams(),
                                do_sample=seed % 4 == 3, generator=torch.Generator().manual_seed(seed),
                                decode=byte_bpe.decode, graphs=graphs, run_ahead=run_ahead and graphs))

    plain = go(False)
    assert sum(isinstance(e, BeamStepped) for e in plain) > 2
    assert_same_beam_events(plain, go(True))
    assert cpu_graphs.captures == 2, "one graph for the beams' batched step, one for the reorder of their rows"
    again = go(True)
    assert_same_beam_events(plain, again)
    assert cpu_graphs.captures == 2, "the second search replays the pooled cache's graphs"


def test_beam_and_single_sequence_runs_never_share_a_pooled_cache(byte_bpe: Any,
                                                                   cpu_graphs: type[EagerGraphs]) -> None:
    """A cache's first pass fixes its rows: a beam search's N-row cache is pooled apart from greedy's one-row one."""
    model = tiny_model("llama", vocab_size=V, seed=9)
    prompt = repetitive_prompt(9, 10)
    greedy_plain = list(autoregressive(model, transcript(byte_bpe, prompt, 12), SamplingParams(), greedy=True))
    beam_plain = list(beam_search(model, transcript(byte_bpe, prompt, 12), BeamParams(3), SamplingParams(),
                                  decode=byte_bpe.decode))
    for _ in range(2):
        assert_same_events(greedy_plain, list(autoregressive(model, transcript(byte_bpe, prompt, 12),
                                                             SamplingParams(), greedy=True, graphs=True)))
        assert_same_beam_events(beam_plain, list(beam_search(model, transcript(byte_bpe, prompt, 12), BeamParams(3),
                                                             SamplingParams(), decode=byte_bpe.decode, graphs=True)))
    assert cpu_graphs.captures == 3, "one graph for greedy's step, one for the beams' and one for their reorder"


def test_a_static_cache_reorders_its_rows_in_place() -> None:
    """Beam search's reorder must keep every layer's storage (a captured graph reads those addresses)."""
    model = tiny_model("llama", vocab_size=V, seed=1)
    cache = new_cache(model, graphs=True, max_len=16, batch=3)
    assert isinstance(cache, StaticKV)
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2], [3, 4], [5, 6]]), cache=cache, use_cache=True)
    layer: Any = cache.layers[0]
    before = layer.keys.clone()
    address = layer.keys.data_ptr()
    cache.reorder_cache(torch.tensor([2, 2, 0]))  # type: ignore[arg-type]
    assert layer.keys.data_ptr() == address
    assert torch.equal(layer.keys, before[[2, 2, 0]])
    release(cache)


def test_a_beam_steps_reorder_is_one_replayed_graph_that_keeps_every_address(
        byte_bpe: Any, cpu_graphs: type[EagerGraphs], monkeypatch: pytest.MonkeyPatch) -> None:
    """On the graph path the rows of all layers are reordered by one replay, not by four ops a layer, in place."""
    model = tiny_model("llama", vocab_size=V, seed=3, num_hidden_layers=3)
    prompt = repetitive_prompt(3, 8)
    plain = list(beam_search(model, transcript(byte_bpe, prompt, 10), BeamParams(3), SamplingParams(),
                             decode=byte_bpe.decode))
    eager_reorders: list[int] = []
    replaying: list[torch.Tensor] = []
    real_rows, real_call = StaticKV.reorder_rows, forward_module._CapturedReorder.__call__

    def rows(cache: StaticKV, beam_idx: torch.Tensor) -> None:
        eager_reorders.append(len(replaying))
        real_rows(cache, beam_idx)

    def call(reorder: Any, beam_idx: torch.Tensor) -> None:
        replaying.append(beam_idx.clone())
        real_call(reorder, beam_idx)

    monkeypatch.setattr(StaticKV, "reorder_rows", rows)
    monkeypatch.setattr(forward_module._CapturedReorder, "__call__", call)
    events = list(beam_search(model, transcript(byte_bpe, prompt, 10), BeamParams(3), SamplingParams(),
                              decode=byte_bpe.decode, graphs=True))
    assert_same_beam_events(plain, events)
    steps = sum(isinstance(e, BeamStepped) for e in events)
    assert len(replaying) == steps, "every step's reorder went through the captured graph"
    # The stand-in's replay runs the recorded copies again; the one more is the capture's warm-up, in identity order.
    assert len(eager_reorders) == steps + 1
    cache = next(c for caches in state_of(model).pool.values() for c in caches if c.reorder_graph)
    assert cache.reorder_graph is not None
    layer: Any = cache.layers[0]
    keys = layer.keys.clone()
    address = layer.keys.data_ptr()
    with torch.inference_mode():  # as in a search, where the graph's index was made
        cache.reorder_cache(torch.tensor([2, 0, 0]))
    assert layer.keys.data_ptr() == address
    assert torch.equal(layer.keys, keys[[2, 0, 0]])


def test_a_failed_reorder_capture_falls_back_to_the_eager_copies(byte_bpe: Any, cpu_graphs: type[EagerGraphs],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("llama", vocab_size=V, seed=5)
    prompt = repetitive_prompt(5, 8)
    plain = list(beam_search(model, transcript(byte_bpe, prompt, 10), BeamParams(2), SamplingParams(),
                             decode=byte_bpe.decode))

    class ReorderFails(EagerGraphs):
        @classmethod
        def capture(cls, model: Any, run: Callable[[], torch.Tensor], put_back: Callable[[], None],
                    ) -> tuple[Callable[[], None], torch.Tensor]:
            if cls.captures:  # the step's graph is captured first, then the reorder's
                raise RuntimeError("operation not permitted when stream is capturing")
            return super().capture(model, run, put_back)

    monkeypatch.setattr(forward_module, "GraphBackend", ReorderFails)
    assert_same_beam_events(plain, list(beam_search(model, transcript(byte_bpe, prompt, 10), BeamParams(2),
                                                    SamplingParams(), decode=byte_bpe.decode, graphs=True)))
    reason = graph_failure(model)
    assert reason is not None and reason.startswith("RuntimeError: operation not permitted")


def test_a_models_pooled_caches_and_graphs_do_not_keep_it_alive(byte_bpe: Any, cpu_graphs: type[EagerGraphs]) -> None:
    """The app lets a model go when another is loaded: its graphs (kept with their cache, in a pool weakly keyed by
    the model) must not hold it, or its device memory stays taken."""
    import gc
    import weakref

    model = tiny_model("llama", vocab_size=V, seed=12)
    list(autoregressive(model, transcript(byte_bpe, repetitive_prompt(12, 10), 12), SamplingParams(), greedy=True,
                        graphs=True))
    assert cpu_graphs.captures == 1
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("spec", ["self", "int8", "layers:1"])
def test_a_draft_made_from_the_target_replays_graphs_on_its_own_pooled_cache(
        byte_bpe: Any, cpu_graphs: type[EagerGraphs], spec: str) -> None:
    """The draft follows the target onto the graph path: the target's keys and values of the prompt copied into
    its static cache, its steps and catch-ups replayed, its cache rolled back by moving its end; the same events
    as the plain path, its cache handed back at the end (also when the consumer stops) and its graphs reused by
    the next run."""
    from decode_tui.core.drafting import target_drafts
    from decode_tui.core.params import target_draft

    model = tiny_model("llama", vocab_size=V, seed=11)
    made = target_draft(spec)
    draft_model = model if made is None else target_drafts.build(model, made)
    kv = model.dtype if made is None else target_drafts.kv_dtype(model, made)
    prompt = repetitive_prompt(11, 9)

    def go(graphs: bool, drafter: ModelDrafter) -> list[Event]:
        return list(speculative(model, transcript(byte_bpe, prompt, 30), drafter, SamplingParams(), greedy=True,
                                num_draft_tokens=4, generator=torch.Generator().manual_seed(0), graphs=graphs))

    plain = go(False, ModelDrafter(draft_model, V, target_kv=kv, confidence_threshold=0.0))
    drafter = ModelDrafter(draft_model, V, target_kv=kv, confidence_threshold=0.0)
    replayed = go(True, drafter)
    assert_same_events(plain, replayed)
    assert isinstance(drafter.cache, StaticKV) and drafter.cache.path == "graphs" and not drafter.cache.leased
    assert {(1, 1, 1), (1, 2, 1)} <= set(drafter.cache.graphs), "a step and a catch-up of two, captured up front"
    captured = cpu_graphs.captures
    again = ModelDrafter(draft_model, V, target_kv=kv, confidence_threshold=0.0)
    assert_same_events(plain, go(True, again))
    assert isinstance(again.cache, StaticKV) and again.cache.graphs, "a pooled cache and its graphs serve again"
    assert cpu_graphs.captures == captured, "nothing captured twice"
    stopped = ModelDrafter(draft_model, V, target_kv=kv, confidence_threshold=0.0)
    run = speculative(model, transcript(byte_bpe, prompt, 30), stopped, SamplingParams(), greedy=True,
                      num_draft_tokens=4, graphs=True)
    next(e for e in run if isinstance(e, DraftVerified))  # a round verified, then the consumer stops
    assert isinstance(stopped.cache, StaticKV) and stopped.cache.leased
    run.close()
    assert isinstance(stopped.cache, StaticKV) and not stopped.cache.leased


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
@pytest.mark.usefixtures("untimed_policy")
def test_an_adaptive_draft_made_from_the_target_never_catches_up_through_itself(
        byte_bpe: Any, cpu_graphs: type[EagerGraphs], graphs: bool) -> None:
    """A poor draft made from the target (its first layer): the adaptive policy takes plain steps and probes now
    and then. Every probe's draft takes the skipped tokens' keys and values from the target and is fed one or
    two tokens, on the plain path and replaying graphs alike (no catch-up graph of a stretch's width captured),
    and the tokens stay greedy's."""
    from decode_tui.core.drafting import target_drafts
    from decode_tui.core.params import target_draft

    from .test_speculative import greedy
    from .test_speculative import transcript as with_eos

    model = tiny_model("llama", vocab_size=V, seed=5)
    made = target_draft("layers:1")
    assert made is not None
    drafter = ModelDrafter(target_drafts.build(model, made), V, target_kv=target_drafts.kv_dtype(model, made),
                           confidence_threshold=0.0)
    prompt = [3, 4, 5]
    events = list(speculative(model, with_eos(byte_bpe, prompt, 120, eos=-1), drafter, SamplingParams(),
                              greedy=True, num_draft_tokens=4, adaptive=True, graphs=graphs,
                              generator=torch.Generator().manual_seed(0)))
    rounds: list[DraftVerified] = []
    since, after_plain = 0, 0
    for e in events:
        if isinstance(e, DraftVerified):
            previous = rounds[-1] if rounds else None
            if previous is not None and since > previous.accepted + (previous.extra_token_id is not None):
                after_plain += 1
            rounds.append(e)
            since = 0
        elif isinstance(e, TokenEmitted):
            since += 1
    # At least the first probe comes after plain steps; told that it did not catch up, the policy may rule drafting
    # out for good there (its ceiling), so how many more come depends on the times measured.
    assert after_plain >= 1, "the policy probed after plain steps"
    assert all(e.draft_fed in (1, 2) for e in rounds[1:]), [e.draft_fed for e in rounds]
    final = events[-1]
    assert isinstance(final, Finished)
    assert final.token_ids == greedy(model, byte_bpe, prompt, 120, eos=-1).token_ids
    if graphs:
        assert isinstance(drafter.cache, StaticKV)
        assert {key[1] for key in drafter.cache.graphs} <= {1, 2}, "no catch-up wider than a round's"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sample"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_a_draft_running_ahead_drafts_what_an_in_order_draft_drafts(byte_bpe: Any, cpu_graphs: type[EagerGraphs],
                                                                    seed: int, sample: bool, graphs: bool) -> None:
    """Running ahead (an option, and a benchmark's control), a draft step's pass is queued before the last drafted
    token is read back. Where the draft then stops (an unsure token, an end-of-text token) that pass ran past the
    stop: the next round must still draft from the right cache, so every round's draft, q and verdicts equal the
    in-order loop's, on a random draft whose confidence cut-off stops it often, with the runners-up tree too."""
    model = model_for(seed)
    draft_model = tiny_model(ARCHS[(seed + 1) % 4], vocab_size=V, seed=seed + 70)
    prompt = repetitive_prompt(seed, 6 + seed)
    eos = frozenset({int(t) for t in torch.randperm(V, generator=torch.Generator().manual_seed(seed))[:40]})

    def go(run_ahead: bool) -> tuple[list[Event], ModelDrafter]:
        drafter = ModelDrafter(draft_model, V, confidence_threshold=0.05 + 0.03 * (seed % 3), eos_token_ids=eos,
                               tree_budget=0 if sample or seed % 2 else 12, run_ahead=run_ahead)
        events = list(speculative(model, transcript(byte_bpe, prompt, 40), drafter,
                                  SamplingParams(top_k=30) if sample else SamplingParams(), greedy=not sample,
                                  num_draft_tokens=2 + seed % 5, generator=torch.Generator().manual_seed(seed),
                                  graphs=graphs))
        return events, drafter

    (in_order, _), (ahead, drafter) = go(False), go(True)
    assert_same_events(in_order, ahead)
    proposed = [(a, b) for a, b in zip(in_order, ahead, strict=True)
                if isinstance(a, DraftProposed) and isinstance(b, DraftProposed)]
    assert [a.q_probs for a, _ in proposed] == [pytest.approx(b.q_probs, abs=1e-6) for _, b in proposed]
    assert [a.stopped for a, _ in proposed] == [b.stopped for _, b in proposed]
    # A round whose chain is shorter than it could be stopped early (a tree's event counts its runners-up too).
    chains = [next((i for i, parent in enumerate(a.parents or ()) if parent != i - 1), len(a.token_ids))
              for a, _ in proposed]
    assert any(n < (a.max_tokens or 0) for n, (a, _) in zip(chains, proposed, strict=True)), \
        "the draft stopped in some round: a pass ran past the stop"
    first, second = (next(e for e in run if isinstance(e, Finished)) for run in (in_order, ahead))
    # Each stop cost the running-ahead draft one pass, except where its keys and values served the next round.
    assert first.draft_forwards is not None and second.draft_forwards is not None
    assert first.draft_forwards <= second.draft_forwards <= first.draft_forwards + len(proposed)
    assert drafter.cached == [*prompt, *second.token_ids][: len(drafter.cached)], "the cache holds the text's prefix"


def masks_seen(model: Any, monkeypatch: pytest.MonkeyPatch, run: Callable[[], object]) -> tuple[set[str], set[str]]:
    """The kinds of attention mask torch's attention got while graphs were captured, and outside captures."""
    seen: dict[bool, set[str]] = {True: set(), False: set()}
    capturing = [False]
    attention: Any = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        mask = kwargs.get("attn_mask")
        seen[capturing[0]].add("none" if mask is None else "bool" if mask.dtype == torch.bool else "float")
        return cast(torch.Tensor, attention(*args, **kwargs))

    class Watched(EagerGraphs):
        @classmethod
        def capture(cls, model: Any, run: Callable[[], torch.Tensor], put_back: Callable[[], None],
                    ) -> tuple[Callable[[], None], torch.Tensor]:
            capturing[0] = True
            try:
                return super().capture(model, run, put_back)
            finally:
                capturing[0] = False

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(forward_module, "GraphBackend", Watched)
    run()
    return seen[True], seen[False]


@pytest.mark.parametrize("arch", ["llama", "phi3"])
def test_the_targets_graphs_are_captured_with_float_masks_and_its_eager_passes_keep_transformers(
        byte_bpe: Any, cpu_graphs: type[EagerGraphs], monkeypatch: pytest.MonkeyPatch, arch: str) -> None:
    """A captured step records the attention mask built as floats once a pass (fewer kernels on a GPU, the same
    numbers); the eager passes (the prefill, here the stand-in's replays too) keep transformers' boolean masks, and
    the model is back on transformers' SDPA after each capture, so ``generate`` on it is transformers' own."""
    model = sliding_phi3(3) if arch == "phi3" else tiny_model(arch, vocab_size=V, seed=3)
    prompt = repetitive_prompt(3, 9)
    plain = list(autoregressive(model, transcript(byte_bpe, prompt, 12), SamplingParams(), greedy=True))
    events: list[Event] = []
    captured, eager = masks_seen(model, monkeypatch, lambda: events.extend(autoregressive(
        model, transcript(byte_bpe, prompt, 12), SamplingParams(), greedy=True, graphs=True)))
    assert captured == {"float"} and "bool" in eager, (captured, eager)
    assert model.config._attn_implementation == "sdpa"
    assert_same_events(plain, events)


def test_a_model_compiled_in_the_background_and_a_model_whose_float_mask_moves_its_logits_capture_transformers_masks(
        byte_bpe: Any, cpu_graphs: type[EagerGraphs], monkeypatch: pytest.MonkeyPatch) -> None:
    from decode_tui.core.execution import float_mask

    prompt = repetitive_prompt(4, 9)

    def greedy_on_graphs(model: Any) -> Callable[[], object]:
        return lambda: list(autoregressive(model, transcript(byte_bpe, prompt, 8), SamplingParams(), greedy=True,
                                           graphs=True))

    model = tiny_model("llama", vocab_size=V, seed=5)
    state_of(model).background = _NothingCompiled()  # it compiles in the background
    assert masks_seen(model, monkeypatch, greedy_on_graphs(model))[0] == {"bool"}

    def sees_the_future(**kwargs: Any) -> torch.Tensor:
        return torch.zeros((kwargs["batch_size"], 1, kwargs["q_length"], kwargs["kv_length"]))

    model = tiny_model("llama", vocab_size=V, seed=7)
    assert float_mask.exact(model)
    switch = model.set_attn_implementation

    def refuses(implementation: str) -> None:  # a switch that fails at the capture: the capture goes on without it
        if implementation == float_mask.FLOAT_MASK_SDPA:
            raise ValueError("no")
        switch(implementation)

    monkeypatch.setattr(model, "set_attn_implementation", refuses)
    assert masks_seen(model, monkeypatch, greedy_on_graphs(model))[0] == {"bool"}
    assert graph_failure(model) is None, "the graphs were captured"

    monkeypatch.setattr(float_mask, "additive_mask", sees_the_future)  # the check finds the logits moved
    model = tiny_model("llama", vocab_size=V, seed=6)
    assert masks_seen(model, monkeypatch, greedy_on_graphs(model))[0] == {"bool"}
    assert not float_mask.exact(model) and model.config._attn_implementation == "sdpa"


class _NothingCompiled:
    """A background compile that has compiled nothing yet: every graph replays the eager pass it captured."""

    def upgrade(self, model: Any, cache: Any, key: tuple[int, ...], captured: Any, input_ids: Any) -> Any:
        return captured

    def ask(self, model: Any, shape: tuple[int, int, int, int]) -> None:
        pass
