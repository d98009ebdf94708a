"""SVG snapshots of each mode's screen and each theme at a fixed size.

Driven by the deterministic fake decoder, so there is no clock, timing or live
model output in them: the stats come from the fake's fixed ``Finished``.
Update after an intended change with ``pytest tests/test_snapshots.py --snapshot-update``
and look at the SVGs before committing them.
"""

from __future__ import annotations

from typing import Any

import pytest

from decode_tui.tui.app import DecodeApp
from decode_tui.tui.settings import Settings, with_mode

from .fake_decoder import FakeDecoder

SIZE = (120, 36)


async def finished(pilot: Any) -> None:
    app = pilot.app
    for _ in range(100):
        await pilot.pause(0.05)
        if app.pump is not None and app.pump.finished.is_set() and app.pump.events.empty():
            break
    await pilot.pause(0.1)


def app_for(mode: str, theme: str | None = None) -> DecodeApp:
    return DecodeApp(with_mode(Settings(), mode), FakeDecoder().source, theme=theme)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["greedy", "sample", "beam", "speculative", "pld"])
def test_mode_screen(snap_compare: Any, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert snap_compare(app_for(mode), terminal_size=SIZE, run_before=finished)


@pytest.mark.parametrize("theme", ["presenter", "colorblind", "mono"])
def test_theme(snap_compare: Any, theme: str) -> None:
    assert snap_compare(app_for("speculative", theme), terminal_size=SIZE, run_before=finished)


def test_token_selected_with_boundaries(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)

    async def select(pilot: Any) -> None:
        await finished(pilot)
        await pilot.press("b", "left", "left", "left")

    assert snap_compare(app_for("sample"), terminal_size=SIZE, run_before=select)
