"""Constrained decoding and the new stages in every mode: the same tokens as ``generate`` with the same processors,
outputs that always satisfy their constraint, drafts cut by the grammar, and bad constraints refused."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decode_tui.core.choosing.bad_words import token_bytes
from decode_tui.core.choosing.grammar import Grammar, GrammarMask
from decode_tui.core.choosing.sampling import StageContext
from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.errors import UsageError
from decode_tui.core.params import BeamParams, Constraint, DecodeConfig, SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import BeamStepped, DraftVerified, Event, Finished, TokenSampled
from decode_tui.core.record.path import Path as DecodePath
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.run import Run
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.beam import beam_search
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model
from .test_autoregressive import loaded
from .test_cli import assert_clean_failure, cli

ARCHS = ["llama", "qwen2", "gpt2", "phi3"]
EOS_TOKEN = "<|im_end|>"


def eos_of(tokenizer: Any) -> int:
    return int(tokenizer.convert_tokens_to_ids(EOS_TOKEN))


def context(tokenizer: Any, prompt: list[int], constraint: Constraint | None = None) -> StageContext:
    eos = eos_of(tokenizer)
    mask = GrammarMask(Grammar(constraint, tokenizer, frozenset({eos})), len(prompt)) if constraint else None
    return StageContext(eos_token_ids=(eos,), prompt_length=len(prompt),
                        token_bytes=functools.partial(token_bytes, tokenizer), grammar=mask)


def transcript(tokenizer: Any, prompt: list[int], max_new: int, mode: str = "greedy") -> Transcript:
    return Transcript(mode, prompt, Detokenizer(tokenizer), frozenset({eos_of(tokenizer)}), max_new)


def model_for(tokenizer: Any, seed: int) -> Any:
    return tiny_model(ARCHS[seed % 4], vocab_size=len(tokenizer), seed=seed, eos_token_id=eos_of(tokenizer))


def decode(model: Any, tokenizer: Any, prompt: list[int], params: SamplingParams, max_new: int, *,
           greedy: bool = True, seed: int = 0, constraint: Constraint | None = None) -> list[Event]:
    return list(autoregressive(model, transcript(tokenizer, prompt, max_new), params, greedy=greedy,
                               generator=torch.Generator().manual_seed(seed),
                               stages=context(tokenizer, prompt, constraint)))


def hf_generate(model: Any, tokenizer: Any, prompt: list[int], params: SamplingParams, max_new: int, *,
                greedy: bool = True, seed: int = 0, constraint: Constraint | None = None, **extra: Any) -> list[int]:
    """``generate`` with the same stages from its own GenerationConfig, and our bad words and a fresh GrammarMask
    as its ``logits_processor``."""
    eos = eos_of(tokenizer)
    stages = context(tokenizer, prompt, constraint)
    torch.manual_seed(seed)
    out = model.generate(
        torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long), do_sample=not greedy,
        max_new_tokens=max_new, eos_token_id=eos, pad_token_id=0, temperature=params.temperature, top_k=params.top_k,
        top_p=params.top_p, repetition_penalty=params.repetition_penalty, min_p=params.min_p,
        typical_p=params.typical_p, epsilon_cutoff=params.epsilon_cutoff, eta_cutoff=params.eta_cutoff,
        top_h=params.top_h, no_repeat_ngram_size=params.no_repeat_ngram_size or None,
        min_new_tokens=params.min_new_tokens or None,
        # Our bad words (generate's bad_words_ids bans token runs, ours the text) and the grammar as the caller's
        # processors: both only ban, so where generate applies them changes nothing.
        logits_processor=[p for p in (stages.bad_words(params.bad_words) if params.bad_words else None,
                                      stages.grammar) if p is not None] or None, **extra)
    return [int(t) for t in out[0, len(prompt):]]


def tokens(events: list[Event]) -> list[int]:
    finished = events[-1]
    assert isinstance(finished, Finished)
    return list(finished.token_ids)


def prompt_of(tokenizer: Any, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, len(tokenizer) - 5, (3 + seed % 7,), generator=g).tolist()


PROCESSORS = [SamplingParams(no_repeat_ngram_size=2), SamplingParams(bad_words=("the", "ing")),
              SamplingParams(min_new_tokens=12), SamplingParams(repetition_penalty=1.2, no_repeat_ngram_size=3,
                                                                bad_words=("o",), min_new_tokens=5)]
WARPERS = [SamplingParams(top_k=0, min_p=0.1, temperature=1.5), SamplingParams(typical_p=0.7),
           SamplingParams(epsilon_cutoff=3e-3), SamplingParams(eta_cutoff=3e-3, temperature=0.8),
           SamplingParams(top_h=0.6, top_k=0), SamplingParams(min_p=0.05, typical_p=0.9, no_repeat_ngram_size=2)]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("params", PROCESSORS, ids=lambda p: "+".join(k for k, v in p.to_dict().items() if v))
def test_greedy_with_the_processors_equals_generate(byte_bpe: Any, seed: int, params: SamplingParams) -> None:
    model, prompt = model_for(byte_bpe, seed), prompt_of(byte_bpe, seed)
    ours = tokens(decode(model, byte_bpe, prompt, params, 24))
    assert ours == hf_generate(model, byte_bpe, prompt, params, 24)[: len(ours)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("params", WARPERS, ids=lambda p: "+".join(k for k, v in p.to_dict().items() if v))
def test_sampling_with_the_new_stages_equals_generates_draws(byte_bpe: Any, seed: int, params: SamplingParams) -> None:
    model, prompt = model_for(byte_bpe, seed), prompt_of(byte_bpe, seed)
    ours = tokens(decode(model, byte_bpe, prompt, params, 16, greedy=False, seed=seed))
    assert ours == hf_generate(model, byte_bpe, prompt, params, 16, greedy=False, seed=seed)[: len(ours)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sample", [False, True])
def test_beam_search_with_the_new_stages_equals_generate(byte_bpe: Any, seed: int, sample: bool) -> None:
    model, prompt = model_for(byte_bpe, seed), prompt_of(byte_bpe, seed)
    params = SamplingParams(no_repeat_ngram_size=2, min_new_tokens=4, bad_words=("e",),
                            min_p=0.05 if sample else None, typical_p=0.9 if sample else 1.0)
    beam = BeamParams(num_beams=3)
    events = list(beam_search(model, transcript(byte_bpe, prompt, 10, "beam"), beam, params, do_sample=sample,
                              generator=torch.Generator().manual_seed(seed), decode=byte_bpe.decode,
                              stages=context(byte_bpe, prompt)))
    ours = tokens(events)
    assert ours == hf_generate(model, byte_bpe, prompt, params, 10, greedy=not sample, seed=seed, num_beams=3)[
        : len(ours)]


def drafters(tokenizer: Any, seed: int) -> dict[str, Any]:
    eos = frozenset({eos_of(tokenizer)})
    return {"lookup": PromptLookup(2, 4, eos), "model": ModelDrafter(model_for(tokenizer, seed + 100), len(tokenizer))}


def repetitive(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text * 4, add_special_tokens=False))


REGEXES = [r"[a-z]{3,12}( [a-z]{2,8}){0,3}\.", r"(yes|no|maybe)", r"[0-9]{1,4}(-[0-9]{2}){2}",
           r"\d+ apples? (and|or) \w+"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("regex", REGEXES)
def test_greedy_speculative_and_lookup_under_a_grammar_equal_constrained_greedy(byte_bpe: Any, seed: int,
                                                                               regex: str) -> None:
    model = model_for(byte_bpe, seed)
    prompt = repetitive(byte_bpe, "12 apples and 34 pears. yes no maybe. ")[: 20 + seed]
    constraint = Constraint("regex", regex)
    params = SamplingParams(repetition_penalty=1.1) if seed % 2 else SamplingParams()
    expected = tokens(decode(model, byte_bpe, prompt, params, 20, constraint=constraint))
    assert expected == hf_generate(model, byte_bpe, prompt, params, 20, constraint=constraint)[: len(expected)]
    for name, drafter in drafters(byte_bpe, seed).items():
        events = list(speculative(model, transcript(byte_bpe, prompt, 20, "pld"), drafter, params, greedy=True,
                                  num_draft_tokens=4, stages=context(byte_bpe, prompt, constraint)))
        assert tokens(events) == expected, name


def test_a_lookup_copy_the_grammar_forbids_is_cut_before_verification(byte_bpe: Any) -> None:
    """The prompt repeats letters and digits; the grammar takes digits only: copies of letters are cut, shown as
    such, never verified, and the output is constrained greedy's."""
    model = model_for(byte_bpe, 1)
    prompt = repetitive(byte_bpe, "1 a 2 b 3 c 1 a 2 b 3 c ")
    constraint = Constraint("regex", r"[0-9 ]{1,30}")
    lookup = PromptLookup(1, 6, frozenset({eos_of(byte_bpe)}))
    events = list(speculative(model, transcript(byte_bpe, prompt, 30, "pld"), lookup, SamplingParams(), greedy=True,
                              num_draft_tokens=6, stages=context(byte_bpe, prompt, constraint)))
    assert tokens(events) == tokens(decode(model, byte_bpe, prompt, SamplingParams(), 30, constraint=constraint))
    verdicts = [v for e in events if isinstance(e, DraftVerified) for v in e.verdicts]
    cut = [v for v in verdicts if v.verdict == "cut"]
    assert cut, "no copy was cut"
    for v in cut:
        assert v.p == 0.0 and not re.fullmatch(r"[0-9 ]*", byte_bpe.decode([v.token_id]))
    verified = 0
    for e in (e for e in events if isinstance(e, DraftVerified)):  # what was cut is never verified nor counted
        cuts = [v.position for v in e.verdicts if v.verdict == "cut"]
        assert all(v.verdict == "untested" for v in e.verdicts if cuts and v.position > cuts[0])
        assert e.accepted == sum(v.verdict == "accepted" for v in e.verdicts)
        verified += cuts[0] if cuts else len(e.verdicts)
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.drafted == verified


def valid_json_prefix(grammar: Grammar, ids: list[int]) -> bool:
    return grammar.allows(ids) == len(ids)


SCHEMAS = st.recursive(
    st.one_of(
        st.just({"type": "boolean"}),
        st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
                  st.integers(-50, 50), st.integers(0, 200)),
        st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 6)),
        st.lists(st.sampled_from(["red", "green", "blue", "x", "long value"]), min_size=1, max_size=4,
                 unique=True).map(lambda e: {"enum": e}),
    ),
    lambda inner: st.one_of(
        st.builds(lambda item, n: {"type": "array", "items": item, "maxItems": n}, inner, st.integers(0, 3)),
        st.dictionaries(st.sampled_from(["a", "name", "age", "tags"]), inner, min_size=1, max_size=3).map(
            lambda props: {"type": "object", "properties": props, "required": sorted(props),
                           "additionalProperties": False}),
    ),
    max_leaves=5,
)


@settings(max_examples=40, deadline=None)
@given(schema=SCHEMAS, seed=st.integers(0, 2**16))
def test_every_output_under_a_json_schema_parses_and_validates(byte_bpe: Any, schema: dict[str, Any],
                                                                seed: int) -> None:
    """Sampled at a high temperature, so the model tries everything the grammar leaves it: a finished output parses
    and validates; one cut by max_new_tokens is a valid start, and says it is incomplete."""
    model = _MODELS.setdefault("json", model_for(byte_bpe, 7))
    prompt = prompt_of(byte_bpe, seed)
    constraint = Constraint("json_schema", json.dumps(schema))
    grammar = Grammar(constraint, byte_bpe, frozenset({eos_of(byte_bpe)}))
    events = decode(model, byte_bpe, prompt, SamplingParams(temperature=2.0, top_k=0), 80, greedy=False, seed=seed,
                    constraint=constraint)
    finished = events[-1]
    assert isinstance(finished, Finished)
    ids = list(finished.token_ids)
    if finished.finish_reason == "eos":
        assert grammar.complete(ids)
        jsonschema.validate(json.loads(finished.text), schema)
    else:
        assert valid_json_prefix(grammar, ids) and not grammar.complete(ids)


_MODELS: dict[str, Any] = {}

FIXED_SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
     "required": ["name", "age", "tags"], "additionalProperties": False},
    {"enum": ["red", "green"]},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 4},
]


@pytest.mark.parametrize("schema", FIXED_SCHEMAS, ids=["object", "enum", "array"])
@pytest.mark.parametrize("seed", range(3))
def test_bounded_schemas_finish_and_validate(byte_bpe: Any, schema: dict[str, Any], seed: int) -> None:
    """A schema whose every value is bounded finishes well inside the limit, even from a random model."""
    model = _MODELS.setdefault("json", model_for(byte_bpe, 7))
    events = decode(model, byte_bpe, prompt_of(byte_bpe, seed), SamplingParams(temperature=2.0, top_k=0), 80,
                    greedy=False, seed=seed, constraint=Constraint("json_schema", json.dumps(schema)))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "eos"
    jsonschema.validate(json.loads(finished.text), schema)


def watch_reads(monkeypatch: pytest.MonkeyPatch, reads: list[str]) -> None:
    """Record in ``reads`` who computed each mask: prepare() or prepare_rows() ahead, or the call reading the ids
    back."""
    original_host = GrammarMask._host_words
    ahead = [False]

    def ahead_of(original: Any) -> Any:
        def prepared(self: GrammarMask, *args: Any) -> None:
            ahead[0] = True
            try:
                original(self, *args)
            finally:
                ahead[0] = False

        return prepared

    def host_words(self: GrammarMask, outputs: list[list[int]]) -> torch.Tensor:
        reads.append("ahead" if ahead[0] else "call")
        return original_host(self, outputs)

    monkeypatch.setattr(GrammarMask, "prepare", ahead_of(GrammarMask.prepare))
    monkeypatch.setattr(GrammarMask, "prepare_rows", ahead_of(GrammarMask.prepare_rows))
    monkeypatch.setattr(GrammarMask, "_host_words", host_words)


@pytest.mark.parametrize("run_ahead", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_the_mask_computed_ahead_is_applied_without_reading_the_ids_back(byte_bpe: Any, seed: int, run_ahead: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop hands the grammar each step's output on the host before the step's call (on a GPU, while the
    queued pass runs); the call then applies that mask and reads nothing back. Every event is the same as with
    the mask computed in the call, on the loop's two orders (the pass queued first, as on a GPU, or not)."""
    model, prompt = model_for(byte_bpe, seed), prompt_of(byte_bpe, seed)
    constraint = Constraint("regex", REGEXES[seed % len(REGEXES)])
    reads: list[str] = []  # who computed each mask: prepare() ahead, or the call reading the ids back
    watch_reads(monkeypatch, reads)
    runs = {}
    for computed_ahead in (True, False):
        reads.clear()
        stages = context(byte_bpe, prompt, constraint)
        assert isinstance(stages.grammar, GrammarMask)
        stages.grammar.ahead = computed_ahead
        runs[computed_ahead] = list(autoregressive(model, transcript(byte_bpe, prompt, 24), SamplingParams(),
                                                   greedy=True, run_ahead=run_ahead, stages=stages))
        steps = sum(isinstance(e, TokenSampled) for e in runs[computed_ahead])
        if computed_ahead:  # the first step's mask is the call's (nothing ran before it); every later one ahead
            assert reads[0] == "call" and reads.count("call") == 1 and reads.count("ahead") >= steps - 1, reads
        else:
            assert reads == ["call"] * steps
    def timeless(events: list[Event]) -> list[Event]:
        clocks: dict[str, Any] = {"elapsed_s": 0.0}
        return [dataclasses.replace(e, tokens_per_s=0.0, **clocks) if isinstance(e, Finished)
                else dataclasses.replace(e, **clocks) if hasattr(e, "elapsed_s") else e for e in events]

    assert timeless(runs[True]) == timeless(runs[False])
    assert tokens(runs[True]) == hf_generate(model, byte_bpe, prompt, SamplingParams(), 24,
                                             constraint=constraint)[: len(tokens(runs[True]))]


@pytest.mark.parametrize("regex", REGEXES)
@pytest.mark.parametrize("seed", range(5))
def test_every_finished_output_under_a_regex_matches_it_in_full(byte_bpe: Any, regex: str, seed: int) -> None:
    model = model_for(byte_bpe, seed)
    events = decode(model, byte_bpe, prompt_of(byte_bpe, seed), SamplingParams(temperature=1.5, top_k=0), 40,
                    greedy=False, seed=seed, constraint=Constraint("regex", regex))
    finished = events[-1]
    assert isinstance(finished, Finished)
    if finished.finish_reason == "eos":
        assert re.fullmatch(regex, finished.text), finished.text


@pytest.mark.parametrize("seed", range(4))
def test_beam_search_under_a_grammar_keeps_every_hypothesis_valid(byte_bpe: Any, seed: int) -> None:
    model, prompt = model_for(byte_bpe, seed), prompt_of(byte_bpe, seed)
    constraint = Constraint("regex", r"(cat|dog|bird)s? (and|or) (cat|dog|bird)s?")
    grammar = Grammar(constraint, byte_bpe, frozenset({eos_of(byte_bpe)}))
    beam = BeamParams(num_beams=4, num_return_sequences=3)
    events = list(beam_search(model, transcript(byte_bpe, prompt, 16, "beam"), beam, SamplingParams(),
                              decode=byte_bpe.decode, stages=context(byte_bpe, prompt, constraint)))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.hypotheses
    for hypothesis in finished.hypotheses:
        assert grammar.allows(list(hypothesis.token_ids)) == len(hypothesis.token_ids)
    ours = tokens(events)
    assert ours == hf_generate(model, byte_bpe, prompt, SamplingParams(), 16, constraint=constraint,
                               num_beams=4)[: len(ours)]


def test_the_grammar_stage_shows_what_it_allows_and_what_it_removed(byte_bpe: Any) -> None:
    model, prompt = model_for(byte_bpe, 2), prompt_of(byte_bpe, 2)
    events = decode(model, byte_bpe, prompt, SamplingParams(), 10, constraint=Constraint("regex", r"(yes|no)"))
    steps = [e for e in events if isinstance(e, TokenSampled)]
    first = steps[0].stages
    assert [s.stage for s in first] == ["raw", "grammar"]
    grammar = first[1]
    assert grammar.possible is not None and 0 < grammar.possible < 20
    assert grammar.removed == len(byte_bpe) - grammar.possible
    assert grammar.detail is not None and "allows" in grammar.detail
    raw_best = [c.token_id for c in first[0].candidates]
    removed = [c.token_id for c in grammar.removed_candidates or ()]
    assert removed == [t for t in raw_best if t not in {c.token_id for c in grammar.candidates}]
    assert all(byte_bpe.decode([c.token_id]) for c in grammar.candidates)
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.text in ("yes", "no")


def test_a_run_that_stops_before_the_grammar_is_satisfied_says_so(byte_bpe: Any) -> None:
    lm = loaded(model_for(byte_bpe, 3), byte_bpe, eos_of(byte_bpe))
    for max_new, complete in ((3, False), (40, True)):
        config = DecodeConfig(max_new_tokens=max_new, use_chat=False,
                              constraint=Constraint("regex", r"hello (world|there)"))
        finished = list(Run(lm, "Say hi", config).events())[-1]
        assert isinstance(finished, Finished) and finished.constraint_complete is complete
        assert finished.finish_reason == ("length" if max_new == 3 else "eos")


@pytest.mark.parametrize(("regex", "ascii"), [(r"\d{3}-\d{2}", r"[0-9]{3}-[0-9]{2}"), (r"[\d,]+", r"[0-9,]+"),
                                            (r"\D\d", r"[^0-9][0-9]"), (r"\\d", r"\\d"), (r"[]\d]", r"[]0-9]"),
                                            (r"[^\d]", r"[^0-9]"), (r"\w+", r"\w+")])
def test_a_regexs_digits_are_ascii_digits(regex: str, ascii: str) -> None:
    from decode_tui.core.choosing.constraints import ascii_digits

    assert ascii_digits(regex) == ascii


def test_a_regex_digit_admits_ascii_digits_only(byte_bpe: Any) -> None:
    """llguidance's \\d is any Unicode digit: the embedded model wrote U+1FBF8 for a phone number. As a JSON
    schema's pattern does, \\d means [0-9]."""
    grammar = Grammar(Constraint("regex", r"\d\d-\D"), byte_bpe, frozenset({eos_of(byte_bpe)}))
    assert grammar.complete(byte_bpe.encode("12-x", add_special_tokens=False))
    for text in ("\U0001FBF8\U0001FBF8-x", "\u0663\u0663-x", "12-3"):
        assert not grammar.complete(byte_bpe.encode(text, add_special_tokens=False)), text


def test_a_forced_token_the_grammar_forbids_is_refused(byte_bpe: Any) -> None:
    lm = loaded(model_for(byte_bpe, 3), byte_bpe, eos_of(byte_bpe))
    config = DecodeConfig(max_new_tokens=20, use_chat=False, constraint=Constraint("regex", r"[0-9]+"))
    allowed = DecodePath(forced=tuple(byte_bpe.encode("12", add_special_tokens=False)), forced_text="12")
    assert list(Run(lm, "Count", config, path=allowed).events())[-1].text.startswith("12")  # type: ignore[attr-defined]
    forbidden = DecodePath(forced=tuple(byte_bpe.encode("1a", add_special_tokens=False)), forced_text="1a")
    with pytest.raises(UsageError, match="does not allow the forced token"):
        Run(lm, "Count", config, path=forbidden)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--regex", "a[b"), ("The regex is invalid", "unclosed character class", "1(8)")),
        (("--grammar", "GRAMMAR"), ("Lark grammar (bad.lark) is invalid", "unknown name", "2(")),
        (("--json-schema", '{"type": "object", "properties": {"a": {"type": "strin"}}}'),
         ("JSON schema is invalid at $.properties.a.type",)),
        (("--json-schema", '{"type": "object",'), ("is not JSON", "line 1, column")),
        (("--json-schema", "missing.json"), ("The JSON schema file missing.json does not exist",)),
        (("--regex", "a", "--json-schema", "{}"), ("give one of them",)),
        (("--min-p", "1.5"), ("min_p must be in [0, 1]",)),
        (("--typical-p", "0"), ("typical_p must be in (0, 1]",)),
        (("--epsilon-cutoff", "-0.1"), ("epsilon_cutoff must be in [0, 1)",)),
        (("--no-repeat-ngram-size", "-1"), ("no_repeat_ngram_size must be 0",)),
        (("--bad-words", "ok,,no"), ("holds an empty word",)),
        (("--min-new-tokens", "500", "--max-new-tokens", "10"), ("min_new_tokens (500) is more than max_new_tokens "
                                                                 "(10)",)),
    ],
)
def test_bad_constraints_and_stage_values_exit_2_with_where_the_error_is(tmp_path: Path, args: tuple[str, ...],
                                                                       fragments: tuple[str, ...]) -> None:
    bad = tmp_path / "bad.lark"
    bad.write_text('start: foo\nfoo: "a" | bar\n')
    args = tuple(str(bad) if a == "GRAMMAR" else a for a in args)
    done = cli("generate", "--model", "no-such-model-needed", "--prompt", "x", *args)
    assert_clean_failure(done, 2, *fragments)


def test_a_constrained_run_cut_short_exits_4_and_says_incomplete(tiny_model_dir: Path,
                                                                isolated_env: dict[str, str]) -> None:
    """A script must tell a valid whole from a valid start without parsing stderr: a distinct exit status, and
    ``constraint_complete: false`` in jsonl's ``finished``."""
    from decode_tui.core.errors import EXIT_INCOMPLETE

    args = ("generate", "--model", str(tiny_model_dir), "--prompt", "x", "--regex", "[a-z]{40}",
            "--max-new-tokens", "3")
    text = cli(*args, env=isolated_env)
    assert text.returncode == EXIT_INCOMPLETE == 4, text.stderr
    assert text.stdout.strip() and "incomplete" in text.stderr and "Traceback" not in text.stderr
    jsonl = cli(*args, "--format", "jsonl", env=isolated_env)
    assert jsonl.returncode == EXIT_INCOMPLETE, jsonl.stderr
    assert json.loads(jsonl.stdout.splitlines()[-1])["constraint_complete"] is False
    done = cli("generate", "--model", str(tiny_model_dir), "--prompt", "x", "--regex", "[a-z]{2}",
               "--max-new-tokens", "8", env=isolated_env)
    assert done.returncode == 0, done.stderr


def test_a_recordings_settings_keep_the_constraint_and_the_stages() -> None:
    import dataclasses

    from decode_tui.tui.settings import Settings, params_line, settings_from_dict

    settings = Settings(config=DecodeConfig(mode="sample", constraint=Constraint("regex", "a+", origin=None),
                                            sampling=SamplingParams(bad_words=("x",), min_p=0.1)))
    header = json.loads(json.dumps(dataclasses.asdict(settings)))  # as a recording's header holds them
    assert settings_from_dict(header) == settings
    line = params_line(settings)
    assert "min-p=0.1" in line and "regex" in line and "bad words=x" in line, line


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sample"])
def test_a_verifications_masks_are_computed_while_its_pass_runs(byte_bpe: Any, seed: int, sample: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each round hands the grammar the output and the drafted tokens once the verification is queued: its k + 1
    masks are computed then (on a GPU, while the pass runs), and the verification's calls read no ids back. A
    draft model's own calls in between are computed in the call, never served a mask prepared for other ids. The
    events are those of masks computed in each call."""
    model = model_for(byte_bpe, seed)
    prompt = repetitive(byte_bpe, "12 apples and 34 pears. yes no maybe. ")[: 20 + seed]
    constraint = Constraint("regex", REGEXES[seed % len(REGEXES)])
    params = SamplingParams(temperature=1.5, top_k=0) if sample else SamplingParams()
    reads: list[str] = []
    watch_reads(monkeypatch, reads)
    for name in drafters(byte_bpe, seed):
        runs = {}
        for computed_ahead in (True, False):
            reads.clear()
            stages = context(byte_bpe, prompt, constraint)
            assert isinstance(stages.grammar, GrammarMask)
            stages.grammar.ahead = computed_ahead
            runs[computed_ahead] = list(speculative(
                model, transcript(byte_bpe, prompt, 20, "pld"), drafters(byte_bpe, seed)[name], params,
                greedy=not sample, num_draft_tokens=4, generator=torch.Generator().manual_seed(seed), stages=stages))
            verified = [e for e in runs[computed_ahead] if isinstance(e, DraftVerified)]
            if computed_ahead:  # every verified position's mask ahead
                positions = sum(1 + sum(v.verdict not in ("cut", "untested") for v in e.verdicts) for e in verified)
                assert reads.count("ahead") >= positions, (name, reads)
            else:
                assert "ahead" not in reads
        # The tokens and every verdict, not the figures: the CPU pads a verification to the width it timed
        # cheapest, and another width's products round the last bits of p and the logprobs differently.
        clockless = [(tokens(run), [(e.round, e.accepted, e.extra_token_id, [(v.token_id, v.verdict)
                                                                              for v in e.verdicts])
                                    for e in run if isinstance(e, DraftVerified)]) for run in runs.values()]
        assert clockless[0] == clockless[1], name


@pytest.mark.parametrize("seed", range(3))
def test_beam_searchs_masks_are_computed_while_its_next_pass_runs(byte_bpe: Any, seed: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Beam search hands the grammar every row's output (from the step's one host transfer, dead rows too) once the
    next pass is queued: every step's masks after the first are computed ahead, for all rows at once, and the
    search is the one with masks computed in the call."""
    model, prompt = model_for(byte_bpe, seed), prompt_of(byte_bpe, seed)
    constraint = Constraint("regex", r"(cat|dog|bird)s? (and|or) (cat|dog|bird)s?")
    reads: list[str] = []
    watch_reads(monkeypatch, reads)
    runs = {}
    for computed_ahead in (True, False):
        reads.clear()
        stages = context(byte_bpe, prompt, constraint)
        assert isinstance(stages.grammar, GrammarMask)
        stages.grammar.ahead = computed_ahead
        runs[computed_ahead] = list(beam_search(model, transcript(byte_bpe, prompt, 16, "beam"),
                                                BeamParams(num_beams=4, num_return_sequences=3), SamplingParams(),
                                                decode=byte_bpe.decode, stages=stages))
        steps = sum(isinstance(e, BeamStepped) for e in runs[computed_ahead])
        if computed_ahead:  # the first step's masks in the call (nothing ran before it); every later one ahead
            assert reads[0] == "call" and reads.count("call") == 1 and reads.count("ahead") >= steps - 1, reads
        else:
            assert "ahead" not in reads
    last = [run[-1] for run in runs.values()]
    assert isinstance(last[0], Finished) and isinstance(last[1], Finished)
    assert last[0].hypotheses == last[1].hypotheses
