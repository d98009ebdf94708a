"""Recordings (tui/recording.py): a run that fails is closed with a ``finished`` event that says so; one the user
stops ends where it stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decode_tui.core.errors import UsageError
from decode_tui.core.live import LiveParams
from decode_tui.tui.recording import read_recording, recorded
from decode_tui.tui.settings import Settings, with_mode

from .fake_decoder import FakeDecoder


def live(settings: Settings) -> LiveParams:
    return LiveParams(settings.config.sampling, settings.config.draft)


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("mode", ["greedy", "suffix"])
def test_a_run_that_raises_is_closed_with_an_error_finished_event(tmp_path: Path, mode: str) -> None:
    settings = with_mode(Settings(), mode)
    fake = FakeDecoder(fail_with=RuntimeError("the device went away"))
    source = recorded(fake.source(settings, live(settings)), tmp_path / "run.jsonl", settings)
    with pytest.raises(RuntimeError):
        for _ in source():
            pass
    final = lines(tmp_path / "run.jsonl")[-1]
    assert final["event"] == "finished" and final["finish_reason"] == "error"
    assert final["error"] == "the device went away" and final["mode"] == mode
    emitted = [x["token_id"] for x in lines(tmp_path / "run.jsonl") if x["event"] == "token_emitted"]
    assert final["token_ids"] == emitted and final["new_tokens"] == len(emitted) > 0
    _, events = read_recording(tmp_path / "run.jsonl")  # it replays: the closing event is a valid one
    assert type(events[-1][1]).__name__ == "Finished"


def test_a_run_stopped_by_its_consumer_ends_where_it_stopped_unless_the_consumer_failed(tmp_path: Path) -> None:
    settings = Settings()
    for failure, last in ((None, "token_emitted"), ("the app failed", "finished")):
        path = tmp_path / f"{last}.jsonl"
        source = recorded(FakeDecoder().source(settings, live(settings)), path, settings,
                          failure=lambda failure=failure: failure)  # type: ignore[misc]
        events = source()
        for event in events:
            if type(event).__name__ == "TokenEmitted":
                break
        events.close()  # type: ignore[attr-defined]
        assert lines(path)[-1]["event"] == last
    assert lines(tmp_path / "finished.jsonl")[-1]["error"] == "the app failed"


def test_a_usage_error_before_the_run_starts_is_recorded_as_its_error(tmp_path: Path) -> None:
    settings = Settings()

    def refused():  # type: ignore[no-untyped-def]
        raise UsageError("The prompt is too long.")
        yield

    with pytest.raises(UsageError):
        for _ in recorded(refused, tmp_path / "r.jsonl", settings)():
            pass
    final = lines(tmp_path / "r.jsonl")[-1]
    assert final["finish_reason"] == "error" and final["error"] == "The prompt is too long."
    assert final["new_tokens"] == 0
