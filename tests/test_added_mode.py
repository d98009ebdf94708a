"""A drafting mode added as a contributor adds one: one registry entry and one module, no other file touched.

The mode ``echo`` (its drafter proposes the last token again, k times) lives in a throwaway package written by the
test, which adds its ModeSpec through the ``decode_tui.modes`` entry points (core/modes.py). With that package on the
path, the app (live on a model, then its recording replayed), ``generate`` (headless, and ``--compare``) and
``bench`` all run it, and greedy ``echo`` gives greedy's text; an entry whose builder does not import fails naming
the mode and what its entry says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .serving import SCRIPT

PLUGIN = '''
"""echo: a toy drafting mode that drafts the last token again (a contributor's mode, added from outside)."""

from decode_tui.core.modes import DrafterSpec, ModeSpec, drafting_options

# Imported when decode-tui starts (the registry reads its entry points then): only the registry at the top; the
# drafter's own needs (torch, the Draft type) are imported when a run builds it.


class Echo:
    kind = "echo"
    source = "draft"
    tree_budget = 0
    free_to_ask = True
    stops_itself = False
    ranked = False
    learns = False

    def __init__(self, prompt_length):
        from decode_tui.core.drafting.drafters import Draft

        self.draft_type, self.prompt_length = Draft, prompt_length

    def propose(self, context, k, processors, greedy, generator):
        assert len(context) > self.prompt_length  # the prompt's end is known: the context holds the pending token
        return self.draft_type([context[-1]] * k)

    def rollback(self, confirmed):
        pass

    def observed(self, tokens, logits):
        pass

    def prefilled(self, context, cache):
        pass

    def draft_length(self, params):
        return params.length("num_draft_tokens")

    def tune(self, params):
        pass

    def replay(self, transcript):
        return None

    def time_step(self, context, processors):
        return 0.0

    def close(self):
        pass


def build(ctx):
    return Echo(ctx.prompt_length)


ECHO = DrafterSpec("echo", "echo_mode:build", copies=False, length="num_draft_tokens")
SPEC = ModeSpec("echo", "echoing the last token, then verifying it in one target forward", "draft",
                "Say ab ab ab ab.", ECHO, True, drafting_options(ECHO), frozenset({"first rejection", "bonus"}))
BROKEN_DRAFTER = DrafterSpec("echo", "echo_mode:nowhere", copies=False, length="num_draft_tokens")
BROKEN = ModeSpec("broken-echo", "nothing", "draft", "Hi.", BROKEN_DRAFTER, True, drafting_options(BROKEN_DRAFTER),
                  frozenset())
'''

APP = '''
import asyncio
import sys
from pathlib import Path

from textual.widgets import ContentSwitcher

from decode_tui.core.params import DecodeConfig
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.recording import read_recording, replay
from decode_tui.tui.settings import Settings, settings_from_dict
from decode_tui.tui.sources import ModelRunner
from decode_tui.tui.widgets.draft_panel import DraftPanel
from decode_tui.tui.widgets.mode_panels import panel_for


async def to_the_end(app):
    async with app.run_test(size=(150, 42)) as pilot:
        for _ in range(1200):
            await pilot.pause(0.05)
            if app.view.finished is not None or app.error is not None:
                break
            if app.pump is not None and app.pump.paused:
                await pilot.press("space")
        await pilot.pause(0.3)
        assert app.error is None, app.error
        assert app.view.finished is not None and app.view.finished.mode == "echo"
        assert app.query_one(ContentSwitcher).current == panel_for("echo") == "panel-draft"
        assert app.query_one("#panel-draft", DraftPanel).rounds, "the panel shows the rounds"
        await pilot.press("q")
    return app.view.finished.text


async def main(model, record):
    settings = Settings(model=model, device="cpu", prompt="ab ab ab ab ab ab",
                        config=DecodeConfig(mode="echo", max_new_tokens=16, seed=1, use_chat=False))
    live = await to_the_end(DecodeApp(settings, ModelRunner().source, record=Path(record)))
    header, events = read_recording(Path(record))
    replayed = await to_the_end(DecodeApp(settings_from_dict(header["settings"]),
                                          lambda _s, _l: replay(events, 0, None), replaying="echo.jsonl",
                                          branches=header["branches"]))
    assert replayed == live, (replayed, live)
    print("APP", live)


asyncio.run(main(*sys.argv[1:]))
'''


@pytest.fixture
def with_echo(tmp_path: Path, isolated_env: dict[str, str]) -> dict[str, str]:
    """An environment whose Python path holds the throwaway package and its entry points."""
    site = tmp_path / "site"
    (site / "echo_mode-0.1.dist-info").mkdir(parents=True)
    (site / "echo_mode.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    (site / "echo_mode-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-mode\n"
                                                              "Version: 0.1\n", encoding="utf-8")
    (site / "echo_mode-0.1.dist-info" / "entry_points.txt").write_text(
        "[decode_tui.modes]\necho = echo_mode:SPEC\nbroken = echo_mode:BROKEN\n", encoding="utf-8")
    return {**isolated_env, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_an_added_drafting_mode_runs_on_every_surface_with_no_other_file_touched(
        with_echo: dict[str, str], tiny_model_dir: Path, tmp_path: Path) -> None:
    model = ["--model", str(tiny_model_dir), "--device", "cpu", "--max-new-tokens", "16", "--no-chat"]
    prompt = ["-p", "ab ab ab ab ab ab"]
    listed = cli(with_echo, "run", "--help")
    assert listed.returncode == 0 and "echo" in listed.stdout, listed.stdout

    greedy = cli(with_echo, "generate", *model, *prompt, "--format", "jsonl")
    assert greedy.returncode == 0, greedy.stderr
    greedy_text = [json.loads(line) for line in greedy.stdout.splitlines()][-1]["text"]

    headless = cli(with_echo, "generate", *model, *prompt, "--mode", "echo", "--no-adaptive", "--format", "jsonl")
    assert headless.returncode == 0, headless.stderr
    events = [json.loads(line) for line in headless.stdout.splitlines()]
    assert {e["drafter"] for e in events if e["event"] == "draft_proposed"} == {"echo"}
    finished = events[-1]
    assert finished["event"] == "finished" and finished["mode"] == "echo" and finished["text"] == greedy_text
    assert finished["drafted"] > 0

    compared = cli(with_echo, "generate", *model, *prompt, "--mode", "echo", "--compare", "--compare-runs", "1")
    assert compared.returncode == 0 and "identical" in compared.stderr, compared.stderr

    bench = cli(with_echo, "bench", *model, *prompt, "--modes", "echo", "--repeats", "1", "--format", "json")
    assert bench.returncode == 0, bench.stderr
    rows = {row["mode"]: row for row in map(json.loads, bench.stdout.splitlines())}
    assert set(rows) == {"greedy", "echo"} and rows["echo"]["identical"] is True, rows

    record = tmp_path / "echo.jsonl"
    app = subprocess.run([sys.executable, "-c", APP, str(tiny_model_dir), str(record)], capture_output=True,
                         text=True, env=with_echo, timeout=300)
    assert app.returncode == 0 and f"APP {greedy_text}" in app.stdout, app.stderr[-3000:]
    cast = tmp_path / "echo.cast"
    replayed = cli(with_echo, "replay", str(record), "--cast", str(cast))
    assert replayed.returncode == 0 and cast.stat().st_size > 0, replayed.stderr


def test_an_added_mode_whose_builder_does_not_import_is_refused_naming_it(with_echo: dict[str, str],
                                                                         tiny_model_dir: Path) -> None:
    done = cli(with_echo, "generate", "--model", str(tiny_model_dir), "--device", "cpu", "-p", "hi",
               "--mode", "broken-echo", "--max-new-tokens", "4")
    message = " ".join(done.stderr.split())
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--mode broken-echo" in message and "echo_mode:nowhere" in message, message
