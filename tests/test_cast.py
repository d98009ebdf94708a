"""Slides: a run as an asciinema cast, from the CLI; the app's SVG key is in test_tui."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path

from decode_tui.core.record.events import Event, Finished, Started, TokenEmitted
from decode_tui.tui.cast import cast_lines
from decode_tui.tui.recording import write_trace
from decode_tui.tui.settings import Settings

from .serving import SCRIPT

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def trace() -> list[tuple[float, Event]]:
    pieces = [("Hello", "target"), (",\n", "lookup"), (" world", "bonus")]
    events: list[tuple[float, Event]] = [(10.0, Started(mode="pld", model="tiny", prompt_token_ids=(1,),
                                                       prompt_text="x", params={}))]
    start = 0
    for i, (text, source) in enumerate(pieces):
        events.append((10.5 + i, TokenEmitted(index=i, token_id=i, text=text, start=start, end=start + len(text),
                                              source=source)))  # type: ignore[arg-type]
        start += len(text)
    events.append((13.0, Finished(mode="pld", prompt_token_ids=(1,), token_ids=(0, 1, 2), text="Hello,\n world",
                                  finish_reason="length", new_tokens=3, target_forwards=2, elapsed_s=3.0,
                                  tokens_per_s=1.0)))
    return events


def test_a_cast_streams_the_text_at_the_recorded_pace_in_provenance_colours() -> None:
    lines = cast_lines(trace())
    header = json.loads(lines[0])
    assert header["version"] == 2 and header["title"] == "decode-tui · tiny · pld"
    writes = [json.loads(line) for line in lines[1:]]
    times = [w[0] for w in writes]
    assert times == sorted(times) and times[0] == 0.0 and times[1] == 0.5  # seconds since the run started
    assert all(w[1] == "o" for w in writes)
    text = "".join(ANSI.sub("", w[2]) for w in writes)
    assert "Hello,\r\n world" in text, "the output, with the carriage returns a terminal needs"
    assert "3 tokens in 2 target forwards" in text
    assert writes[2][2].startswith("\x1b[36m"), "a lookup copy has its own colour"


def test_replay_writes_a_cast_and_refuses_an_unwritable_path(tmp_path: Path) -> None:
    recording = tmp_path / "run.jsonl"
    write_trace(recording, Settings(), trace())
    out = tmp_path / "run.cast"
    done = subprocess.run([SCRIPT, "replay", str(recording), "--cast", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text(encoding="utf-8").splitlines()[0])["version"] == 2
    bad = subprocess.run([SCRIPT, "replay", str(recording), "--cast", str(tmp_path / "no" / "such" / "x.cast")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Cannot write the cast" in bad.stderr and "Traceback" not in bad.stderr


def test_a_race_cast_redraws_the_lanes_side_by_side_at_their_pace() -> None:
    from decode_tui.core.analysis.race import speedup
    from decode_tui.tui.cast import FRAME_HZ, race_cast_lines

    from .test_race import fake_lane

    lanes = [fake_lane("greedy", 0.1), fake_lane("pld", 0.03)]
    lines = race_cast_lines(lanes, "a race")
    frames = [json.loads(line) for line in lines[1:]]
    times = [f[0] for f in frames]
    assert times == sorted(times) and all(b - a >= 1 / FRAME_HZ - 1e-9 for a, b in itertools.pairwise(times[:-1]))
    assert all(f[2].startswith("\x1b[H\x1b[2J") for f in frames), "each frame redraws the whole screen"
    pld_done = lanes[1].events[-1][0]
    early = next(ANSI.sub("", f[2]) for f in frames if f[0] >= pld_done)
    gain = speedup(lanes[1], lanes[0])
    assert gain is not None and f"{gain.median:.2f}x greedy" in early and "x greedy" not in early.split("pld")[0]
    last = ANSI.sub("", frames[-1][2])
    assert last.count("tokens,") == 2, "both lanes' figures at the end"
    assert any("\x1b[36m" in f[2] for f in frames), "lookup copies in their colour"
