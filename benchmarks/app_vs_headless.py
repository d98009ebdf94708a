"""Benchmark: the app's decoding throughput against headless decoding, and how fast it answers keys.

Throughput: the same prompt and settings decoded headlessly (``Run.events()``
on the main thread, what ``decode-tui generate`` does) and inside the app
(Textual, headless driver, the decoder in its thread worker, the 30 Hz drain
updating every widget), alternately, ``--repeats`` rounds of two runs each;
the figure is the core's own ``Finished.tokens_per_s`` on both sides, medians.
End of sequence is disabled so both sides decode the same number of tokens.
The app runs in a child process set up as ``decode-tui run`` sets itself up:
the main (UI) thread never touches torch, the model is loaded in the decoder
thread. (Sharing one process with the headless side would give torch two
OpenMP thread teams and slow both; see ``DecodeApp.on_mount``.) In the app,
the first run is untimed (the app is mounting meanwhile, once per session) and
the timed runs are restarts (``r``); headless, the first run is untimed too.

Key latency: while the app decodes, a key is sent every 150 ms the way the
terminal driver sends one (``b``, which toggles token boundaries and redraws the
whole text pane, the most expensive key that does not restart the run); we time
from sending the key to the end of its handler, and to the text pane's next
paint (what the user sees).

    python benchmarks/app_vs_headless.py [--repeats 3] [--new-tokens 128] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from textual import events

from decode_tui.core.embedded import pull
from decode_tui.core.events import Finished
from decode_tui.core.live import LiveParams
from decode_tui.core.loading import LoadedModel, load_model
from decode_tui.core.params import DecodeConfig
from decode_tui.core.registry import resolve
from decode_tui.core.run import Run
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.pump import EventSource
from decode_tui.tui.settings import Settings
from decode_tui.tui.widgets.text_pane import TextPane

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_vs_hf import PROMPTS, machine

SIZE = (120, 36)


def headless(lm: LoadedModel, prompt: str, config: DecodeConfig) -> Finished:
    final = None
    for event in Run(lm, prompt, config).events():
        final = event
    assert isinstance(final, Finished)
    return final


_LOADED: list[LoadedModel] = []


def _model_in_this_thread() -> LoadedModel:
    """The embedded model with EOS disabled, loaded on first use by the calling (decoder) thread."""
    if not _LOADED:
        lm = load_model(resolve("smollm2"), device="auto", dtype="auto")
        _LOADED.append(dataclasses.replace(lm, eos_token_ids=frozenset()))
    return _LOADED[0]


def in_app(prompt: str, config: DecodeConfig, runs: int = 1, press_every: float | None = None
           ) -> tuple[list[Finished], list[float], list[float]]:
    """``runs`` runs in one app, each started with the restart key's action after a first, untimed run.

    The first run starts while the app is still mounting (styles, layout, the first full paint) and
    its model may still be warming up; a user sees that once per session, so it is not timed. The
    timed runs are what ``r`` gives. Returns their results and, when pressing keys, the handler and
    round-trip latencies.
    """

    def source(settings: Settings, live: LiveParams) -> EventSource:
        return lambda: Run(_model_in_this_thread(), settings.prompt, settings.config, live=live).events()

    app = DecodeApp(Settings(prompt=prompt, config=config), source)
    handled: list[float] = []
    original = app.action_toggle_boundaries

    def timed_toggle() -> None:
        original()
        handled.append(time.perf_counter())

    app.action_toggle_boundaries = timed_toggle  # type: ignore[method-assign]
    painted: list[float] = []
    pane_line = TextPane.render_line

    def timed_line(pane: TextPane, y: int) -> Any:  # the compositor asks for the pane's lines when it paints
        painted.append(time.perf_counter())
        return pane_line(pane, y)

    TextPane.render_line = timed_line  # type: ignore[method-assign,assignment]
    handler_s: list[float] = []
    round_trip_s: list[float] = []

    async def one_run(timed: bool = True) -> Finished:
        sent: list[float] = []
        before = len(handled)
        while app.finished is None:
            # Keys are pressed once the pane shows text: before that, toggling boundaries changes nothing
            # on screen, so nothing is repainted and the "paint" timed would be the next token's.
            if timed and press_every is not None and app.query_one(TextPane).pieces:
                key = events.Key("b", "b")
                key.set_sender(app)
                sent.append(time.perf_counter())
                # What the terminal driver does with a key read from stdin. Not ``pilot.press``: it then
                # waits for every widget's queue to empty, which never happens while a run streams.
                app._driver.send_message(key)  # type: ignore[union-attr]
                await asyncio.sleep(press_every)
            else:
                await asyncio.sleep(0.05)  # not pilot.pause, for the same reason
        for at, done in zip(sent, handled[before:], strict=False):  # keys are handled in order
            handler_s.append(done - at)
            paint = next((t for t in painted if t >= done), None)
            if paint is not None:
                round_trip_s.append(paint - at)
        return app.finished

    async def drive() -> list[Finished]:
        async with app.run_test(size=SIZE):
            await one_run(timed=False)  # the app mounts meanwhile
            results = []
            for _ in range(runs):
                app.action_restart()
                results.append(await one_run())
            return results

    try:
        return asyncio.run(drive()), handler_s, round_trip_s
    finally:
        TextPane.render_line = pane_line  # type: ignore[method-assign]


def app_child(mode: str, prompt_name: str, new_tokens: int, runs: int) -> None:
    """In the child process: ``runs`` timed runs in one app; tokens/s as JSON on stdout."""
    config = DecodeConfig(mode=mode, max_new_tokens=new_tokens)  # type: ignore[arg-type]
    results, _, _ = in_app(PROMPTS[prompt_name], config, runs=runs)
    print(json.dumps([r.tokens_per_s for r in results]))


def app_rates(mode: str, prompt_name: str, new_tokens: int, runs: int) -> list[float]:
    done = subprocess.run([sys.executable, __file__, "--app-child", mode, prompt_name, str(new_tokens), str(runs)],
                          capture_output=True, text=True, check=True)
    rates: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return rates


def ratio_interval(headless: list[float], app: list[float], draws: int = 10_000) -> tuple[float, float]:
    """A bootstrap 95 % interval for median(app) / median(headless).

    Single runs on a shared machine vary by as much as the effect measured, so the ratio is given
    with the spread that resampling the runs shows, not as a bare number.
    """
    rng = random.Random(0)
    ratios = sorted(statistics.median(rng.choices(app, k=len(app))) /
                    statistics.median(rng.choices(headless, k=len(headless))) for _ in range(draws))
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def throughput(lm: LoadedModel, prompt_name: str, mode: str, new_tokens: int, repeats: int) -> dict[str, Any]:
    """Headless and in-app tokens/s on one prompt, ``repeats`` alternating rounds of two runs a side."""
    config = DecodeConfig(mode=mode, max_new_tokens=new_tokens)  # type: ignore[arg-type]
    headless(lm, PROMPTS[prompt_name], config)  # warm-up
    ours, app = [], []
    for _ in range(repeats):  # alternate, so a drift in machine speed hits both sides alike
        ours += [headless(lm, PROMPTS[prompt_name], config).tokens_per_s for _ in range(2)]
        app += app_rates(mode, prompt_name, new_tokens, 2)
    row: dict[str, Any] = {"headless_tok_s": statistics.median(ours), "app_tok_s": statistics.median(app)}
    row["ratio"] = row["app_tok_s"] / row["headless_tok_s"]
    row["ratio_95ci"] = ratio_interval(ours, app)
    row["headless_runs"], row["app_runs"] = sorted(ours), sorted(app)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--latency-only", action="store_true", help="skip the throughput comparison")
    parser.add_argument("--app-child", nargs=4, metavar=("MODE", "PROMPT", "TOKENS", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.app_child:
        mode, prompt_name, tokens, runs = args.app_child
        app_child(mode, prompt_name, int(tokens), int(runs))
        return

    pull("smollm2")
    lm = load_model(resolve("smollm2"), device="auto", dtype="auto")
    lm = dataclasses.replace(lm, eos_token_ids=frozenset())  # the same number of tokens on both sides
    results: dict[str, Any] = {"machine": machine(), "device": str(lm.device), "new_tokens": args.new_tokens,
                               "throughput": {}}
    cases = [] if args.latency_only else [(name, "greedy") for name in PROMPTS] + [("summarise", "pld")]
    for name, mode in cases:
        row = throughput(lm, name, mode, args.new_tokens, args.repeats)
        results["throughput"][f"{mode}/{name}"] = row
        low, high = row["ratio_95ci"]
        print(f"{mode:>6} {name:>10}: headless {row['headless_tok_s']:6.2f} tok/s  app {row['app_tok_s']:6.2f} tok/s"
              f"  ratio {row['ratio']:.3f} (95% interval {low:.2f}-{high:.2f})", flush=True)

    config = DecodeConfig(max_new_tokens=2 * args.new_tokens)
    _, handler_s, round_trip_s = in_app(PROMPTS["open-ended"], config, press_every=0.15)
    handler_s.sort()
    round_trip_s.sort()
    latency = {"presses": len(handler_s), "handler_median_ms": 1000 * statistics.median(handler_s),
               "handler_max_ms": 1000 * handler_s[-1], "paint_median_ms": 1000 * statistics.median(round_trip_s),
               "paint_max_ms": 1000 * round_trip_s[-1]}
    results["key_latency"] = latency
    print(f"key latency over {latency['presses']} presses while decoding: handled after median "
          f"{latency['handler_median_ms']:.1f} ms (max {latency['handler_max_ms']:.1f}); painted after median "
          f"{latency['paint_median_ms']:.1f} ms (max {latency['paint_max_ms']:.1f})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
