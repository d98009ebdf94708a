"""Events are frozen, named in the past tense, and serialise to the documented JSON."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from decode_tui.core.record.events import (
    EVENT_TYPES,
    Beam,
    BeamCandidate,
    BeamStepped,
    Candidate,
    DraftProposed,
    DraftVerified,
    EarlyStopCheck,
    Finished,
    Hypothesis,
    PositionVerdict,
    StageCandidates,
    TokenEmitted,
    TokenSampled,
    from_dict,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "events.md"


def test_names_are_past_tense_and_unique() -> None:
    names = [cls.name for cls in EVENT_TYPES]
    assert len(set(names)) == len(names)
    for cls in EVENT_TYPES:
        assert re.search(r"(ed|Finished|Started)$", cls.__name__), cls.__name__


def test_events_are_frozen() -> None:
    event = TokenEmitted(index=0, token_id=1, text="a", start=0, end=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.text = "b"  # type: ignore[misc]


EXAMPLES = [
    TokenSampled(step=0, token_id=5, text="hi", prob=0.5, greedy=False,
                 stages=(StageCandidates("raw", (Candidate(5, "hi", 0.5),)),
                         StageCandidates("top_k", (Candidate(7, "yo", 0.6),), chosen_prob=0.2, chosen_rank=3))),
    BeamStepped(step=1, beams=(Beam(0, 0, (1, 2), "ab", -1.5, -0.75),),
                candidates=(BeamCandidate(0, 2, "b", -1.5, "kept"),),
                finished=(Hypothesis((1, 9), "a", -2.0, -1.0),),
                early_stop=EarlyStopCheck("never", None, -1.0, False)),
    DraftProposed(round=0, drafter="lookup", token_ids=(4, 5), texts=("a", "b"), match_start=3, match_end=5,
                  copy_start=5, copy_end=7),
    DraftVerified(round=0, verdicts=(PositionVerdict(0, 4, 0.9, 1.0, None, "accepted"),), accepted=1,
                  extra_token_id=6, extra_kind="bonus"),
]


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: e.name)
def test_every_mode_event_round_trips_through_json(event: object) -> None:
    data = json.loads(event.to_json())  # type: ignore[attr-defined]
    assert data["event"] == event.name  # type: ignore[attr-defined]
    assert data == event.to_dict()  # type: ignore[attr-defined]


def test_a_recording_from_before_the_drawn_tokens_stage_figures_still_plays() -> None:
    old = {"event": "token_sampled", "step": 0, "token_id": 5, "text": "hi", "prob": 0.5, "greedy": False,
           "stages": [{"stage": "raw", "candidates": [{"token_id": 5, "text": "hi", "prob": 0.5}]}]}
    event = from_dict(old)
    assert isinstance(event, TokenSampled) and event.stages[0].chosen_prob is None
    assert from_dict(EXAMPLES[0].to_dict()) == EXAMPLES[0]


def test_finished_leaves_out_mode_specific_fields_it_does_not_use() -> None:
    base: dict[str, Any] = dict(mode="greedy", prompt_token_ids=(1,), token_ids=(2,), text="x", finish_reason="eos",
                                new_tokens=1, target_forwards=1, elapsed_s=0.1, tokens_per_s=10.0)
    plain = Finished(**base).to_dict()
    assert "hypotheses" not in plain and "drafted" not in plain
    spec = Finished(**{**base, "mode": "pld", "drafted": 4, "accepted": 3, "draft_forwards": 0,
                       "acceptance_rate": 0.75}).to_dict()
    assert spec["drafted"] == 4 and spec["acceptance_rate"] == 0.75


def test_every_event_and_field_is_documented() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    for cls in EVENT_TYPES:
        assert f"`{cls.name}`" in docs, cls.name
        for f in dataclasses.fields(cls):
            assert f"`{f.name}`" in docs, f"{cls.name}.{f.name}"


@pytest.mark.parametrize("event", [*EXAMPLES, Finished(
    mode="beam", prompt_token_ids=(1,), token_ids=(2,), text="x", finish_reason="eos", new_tokens=1,
    target_forwards=1, elapsed_s=0.1, tokens_per_s=10.0, hypotheses=(Hypothesis((2,), "x", -1.0, -1.0),))],
    ids=lambda e: e.name)
def test_every_event_is_rebuilt_from_its_json(event: Any) -> None:
    assert from_dict(json.loads(event.to_json())) == event


def test_a_damaged_record_is_reported_not_half_read() -> None:
    with pytest.raises(ValueError, match="unknown event"):
        from_dict({"event": "nonsense"})
    with pytest.raises(ValueError, match="token_emitted lacks token_id, text, start, end"):
        from_dict({"event": "token_emitted", "index": 0})
