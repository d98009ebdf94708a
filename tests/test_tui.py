"""Pilot tests of the app, driven by a deterministic fake decoder that yields the real event types."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from decode_tui.core.errors import UsageError
from decode_tui.core.events import Candidate, Event, Finished, StageCandidates, Started, TokenEmitted, TokenSampled
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.widgets.candidates import CandidatesPanel
from decode_tui.tui.widgets.stats_bar import StatsBar
from decode_tui.tui.widgets.text_pane import TextPane

WORDS = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."]


def fake_run(words: list[str] = WORDS, delay: float = 0.0) -> Iterator[Event]:
    """The events of a greedy run that emits ``words``, one token each."""
    yield Started(mode="greedy", model="fake", prompt_token_ids=(1, 2), prompt_text="hi", params={})
    position = 0
    for i, word in enumerate(words):
        if delay:
            time.sleep(delay)
        stage = StageCandidates("raw", (Candidate(i, word, 0.6), Candidate(99, " cat", 0.3)))
        yield TokenSampled(step=i, token_id=i, text=word, prob=0.6, greedy=True, stages=(stage,))
        yield TokenEmitted(index=i, token_id=i, text=word, start=position, end=position + len(word))
        position += len(word)
    yield Finished(mode="greedy", prompt_token_ids=(1, 2), token_ids=tuple(range(len(words))), text="".join(words),
                   finish_reason="length", new_tokens=len(words), target_forwards=len(words), elapsed_s=0.1,
                   tokens_per_s=100.0)


def in_event_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test with asyncio (no pytest plugin needed)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


async def settle(pilot: object, app: DecodeApp, until: float = 5.0) -> None:
    """Let the worker and the drain timer catch up."""
    deadline = time.monotonic() + until
    while time.monotonic() < deadline:
        await pilot.pause(0.05)  # type: ignore[attr-defined]
        if app.pump is not None and app.pump.finished.is_set() and app.pump.events.empty():
            await pilot.pause(0.05)  # type: ignore[attr-defined]
            return


@in_event_loop
async def test_a_run_streams_to_the_end() -> None:
    app = DecodeApp(lambda: fake_run())
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, app)
        assert app.query_one(TextPane).plain == "".join(WORDS)
        stats = app.query_one(StatsBar)
        assert stats.state == "finished" and stats.tokens == len(WORDS)
        assert app.query_one(CandidatesPanel).last is not None
        assert app.query_one(CandidatesPanel).last.token_id == len(WORDS) - 1  # type: ignore[union-attr]


@in_event_loop
async def test_paused_run_advances_one_step_per_key() -> None:
    app = DecodeApp(lambda: fake_run(), start_paused=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.3)
        first = app.query_one(TextPane).plain
        assert first == WORDS[0]  # a paused run stops at the end of its first step
        await pilot.press("n")
        await pilot.pause(0.3)
        assert app.query_one(TextPane).plain == "".join(WORDS[:2])
        await pilot.press("n", "n")
        await pilot.pause(0.3)
        assert app.query_one(TextPane).plain == "".join(WORDS[:4])
        await pilot.press("space")  # resume
        await settle(pilot, app)
        assert app.query_one(TextPane).plain == "".join(WORDS)


@in_event_loop
async def test_restart_runs_again_from_the_start() -> None:
    app = DecodeApp(lambda: fake_run())
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, app)
        await pilot.press("r")
        await settle(pilot, app)
        assert app.query_one(TextPane).plain == "".join(WORDS)
        assert app.query_one(StatsBar).tokens == len(WORDS)


@in_event_loop
async def test_quit_mid_run_leaves_no_thread_running() -> None:
    app = DecodeApp(lambda: fake_run(WORDS * 50, delay=0.01))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.2)
        pump = app.pump
        await pilot.press("q")
    assert pump is not None and pump.finished.wait(5), "the decoder thread stopped"
    assert app.return_code == 0


@in_event_loop
async def test_a_failing_run_shows_its_message_and_the_app_stays_usable() -> None:
    def failing() -> Iterator[Event]:
        yield from fake_run(WORDS[:2])
        raise UsageError("The prompt is 9000 tokens long, but fake reads at most 8192 tokens. Shorten the prompt.")

    app = DecodeApp(failing)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, app)
        assert app.error is not None and "Shorten the prompt" in app.error
        assert app.query_one(StatsBar).state == "error"
        await pilot.press("space")  # still answers keys
        assert app.is_running


@pytest.mark.parametrize("binding", DecodeApp.BINDINGS)
def test_every_binding_has_an_id_and_a_description(binding: object) -> None:
    assert getattr(binding, "id", None) and getattr(binding, "description", None)


@pytest.mark.real_model
def test_the_app_runs_the_embedded_model_end_to_end(smollm2: Any) -> None:
    from decode_tui.core.params import DecodeConfig
    from decode_tui.core.run import Run

    def source() -> Iterator[Event]:
        return Run(smollm2, "What is the capital of France?", DecodeConfig(max_new_tokens=16)).events()

    @in_event_loop
    async def drive() -> None:
        app = DecodeApp(source)
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot, app, until=60)
            stats = app.query_one(StatsBar)
            assert stats.state == "finished" and stats.result is not None
            assert app.query_one(TextPane).plain == stats.result.text and "Paris" in stats.result.text

    drive()
