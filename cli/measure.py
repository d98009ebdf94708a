"""The measuring commands' output: ``decode-tui bench`` (modes timed by the core's protocol) and ``decode-tui whatif``
(other drafting settings replayed on a greedy trace and priced with this machine's measured costs).

They load the model as ``generate`` does (cli/loads.py) and print tables; the measuring itself, the protocol
and the replays live in :mod:`decode_tui.core` (compare, timeline, whatif, calibrate).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..core.errors import DecodeTuiError
from ..core.execution.model_state import state_of
from ..core.modes import DRAFT_MODEL_MODES, DRAFTING_MODES
from ..tui.numbers import count
from .console import fail, status, stderr
from .flags import ModeChoice, TableFormatChoice
from .headless import _write
from .loads import check_placement, ensure_model, load, load_draft, load_models, with_draft_model
from .options import DecodingOptions

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from ..core.analysis.compare import BenchRow
    from ..core.analysis.whatif import Costs, WhatIf
    from ..core.drafting.draft_models import DraftModel
    from ..core.drafting.replay import Replayed, Trace
    from ..core.model.loading import LoadedModel
    from ..core.params import DecodeConfig


MAX_PROMPTS = 200  # a file of prompts: more would take a CPU hours to time, and is likely not a prompt file
MAX_PROMPTS_BYTES = 4 << 20


def read_prompts(path: Path, *, prompt_given: bool = False, timeline: bool = False) -> list[tuple[str, str]]:
    """``bench --prompts``: (category, prompt) pairs from JSON lines with ``prompt`` and an optional ``category``, or
    one prompt a line (category ``-``); a UsageError naming the file and line for what cannot be one, or for a
    --prompt or --timeline given with it."""
    import json

    from ..core.errors import UsageError

    if prompt_given:
        raise UsageError("bench takes its prompts from --prompts or from --prompt, not both.")
    if timeline:
        raise UsageError("--timeline shows one prompt's forwards: leave it out with --prompts.")
    try:
        if path.stat().st_size > MAX_PROMPTS_BYTES:
            raise UsageError(f"--prompts {path} is over {MAX_PROMPTS_BYTES >> 20} MB: a prompt file holds prompts, "
                             "one a line.")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--prompts {path}: no such file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--prompts {path} cannot be read as UTF-8 text: {exc}.") from None
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"--prompts {path}, line {number}: not JSON ({exc.msg}). Write one JSON object a "
                                 'line, {"prompt": "...", "category": "..."}, or one plain prompt a line.') from None
            prompt, category = item.get("prompt"), item.get("category", "-")
            if not isinstance(prompt, str) or not prompt.strip() or not isinstance(category, str):
                raise UsageError(f"--prompts {path}, line {number}: needs a non-empty \"prompt\" string (and a "
                                 "\"category\" string, if any).")
            prompts.append((category, prompt))
        else:
            prompts.append(("-", line.strip()))
    if not prompts:
        raise UsageError(f"--prompts {path} holds no prompt.")
    if len(prompts) > MAX_PROMPTS:
        raise UsageError(f"--prompts {path} holds {len(prompts)} prompts; time at most {MAX_PROMPTS} at once.")
    return prompts


def _loaded(options: DecodingOptions, modes: list[ModeChoice], text: str,
            ) -> tuple[dict[str, DecodeConfig], LoadedModel, DraftModel | None]:
    """A benchmark's settings for each mode (greedy first: every speed-up is over it) and its models, loaded as
    ``generate`` loads them, ``text`` (its longest prompt) checked against the model's context."""
    check_placement(options.device, options.device_map_name)
    if "greedy" not in modes:
        modes = [ModeChoice("greedy"), *modes]
    configs = {m.value: options.for_mode(m).config() for m in modes}
    lm, draft = load_models(options, text, configs["greedy"], with_draft_model(*configs.values()))
    return configs, lm, draft


def bench_prompts(options: DecodingOptions, modes: list[ModeChoice], prompts: list[tuple[str, str]], *, runs: int,
                  output_format: TableFormatChoice) -> None:
    """Every mode on every prompt of a file, each prompt's modes alternated as ``bench`` times one prompt, in one
    process (the model loaded once); then per category each mode's median speed-up over greedy, its range over the
    prompts, and whether every text was greedy's, as a table and a chart (or one JSON object per prompt and mode)."""
    import json
    import statistics

    from ..core.analysis.compare import bench as run_bench

    try:
        configs, lm, draft = _loaded(options, modes, max((p for _, p in prompts), key=len))
        results: list[tuple[str, str, list[BenchRow]]] = []
        with status(f"Benchmarking {', '.join(configs)} on {count(len(prompts), 'prompt')}") as progress:
            for i, (category, prompt) in enumerate(prompts, 1):
                def said(line: str, i: int = i) -> None:
                    progress(f"prompt {i} of {len(prompts)}: {line}")

                results.append((category, prompt, run_bench(lm, prompt, configs, runs=runs, draft=draft,
                                                              progress=said)))
    except DecodeTuiError as err:
        fail(err)
    if output_format is TableFormatChoice.json:
        for category, prompt, rows in results:
            for row in rows:
                _write(sys.stdout, json.dumps({"category": category, "prompt": prompt, **row.to_dict()}) + "\n")
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    categories = list(dict.fromkeys(category for category, _, _ in results))
    table = Table(title=f"{lm.name} · {_machine(lm)} · {count(len(prompts), 'prompt')}, "
                        f"{count(runs, 'warm run')} "
                        "a mode each: median speed-up over greedy (range over the prompts), tokens a forward",
                  title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("category")
    for mode in configs:
        if mode != "greedy":
            table.add_column(mode, justify="right")
    chart: list[tuple[str, str, float]] = []
    for category in categories:
        cells = []
        for mode in configs:
            if mode == "greedy":
                continue
            rows = [r for c, _, rs in results if c == category for r in rs if r.mode == mode]
            ups = [r.speedup for r in rows]
            median = statistics.median(ups)
            chart.append((category, mode, median))
            same = "" if all(r.identical for r in rows) else " (not greedy's text)"
            cells.append(f"{median:.2f}x ({min(ups):.2f}-{max(ups):.2f}) "
                         f"{statistics.median(r.tokens_per_forward for r in rows):.2f}{same}")
        table.add_row(f"{category} ({len([1 for c, _, _ in results if c == category])})", *cells)
    console = Console(soft_wrap=True)
    console.print(table)
    console.print(_chart(chart))


def _chart(bars: list[tuple[str, str, float]], width: int = 40) -> str:
    """Each (category, mode)'s median speed-up as a bar, with a mark at 1x: where drafting pays, at a glance."""
    top = max(2.0, *(value for _, _, value in bars))
    name = max(len(f"{c} · {m}") for c, m, _ in bars)
    one = round(width / top)
    lines = []
    for category, mode, value in bars:
        filled = round(width * value / top)
        bar = "".join("█" if i < filled else ("│" if i == one else " ") for i in range(width))
        lines.append(f"{f'{category} · {mode}':<{name}}  {bar} {value:.2f}x")
    return "\n".join(lines)


def _machine(lm: LoadedModel) -> str:
    """``cpu float32, 2 threads``: what a table's figures ran on, for its title."""
    return f"{lm.device.type} {str(lm.dtype).removeprefix('torch.')}{_threads(lm)}"


def _threads(lm: LoadedModel) -> str:
    """``, 1 thread``: the count a CPU's warm-up timed and the runs decoded on (core/execution/threads.py); ""
    off the CPU."""
    choice = state_of(lm.model).threads
    return "" if choice is None else f", {count(choice.threads, 'thread')}"


def bench(options: DecodingOptions, modes: list[ModeChoice], *, runs: int, output_format: TableFormatChoice,
          timeline: bool = False) -> None:
    """Time ``modes`` on one prompt by the core's protocol (warm, alternated; core/analysis/compare.py) and print a
    table (or one JSON object per mode). Plain greedy is always measured: every speed-up is over it."""
    import json

    from ..core.analysis.compare import bench as run_bench

    try:
        text = options.prompt_text() if options.prompt or options.prompt_file else _bench_prompt(modes)
        configs, lm, draft = _loaded(options, modes, text)
        with status(f"Benchmarking {', '.join(configs)}: a warm-up each, then {runs} rounds, alternated") as progress:
            rows = run_bench(lm, text, configs, runs=runs, draft=draft, progress=progress)
    except DecodeTuiError as err:
        fail(err)
    if output_format is TableFormatChoice.json:
        for row in rows:
            _write(sys.stdout, json.dumps(row.to_dict(timeline)) + "\n")
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    # No vertical rules, and a median's range may go under it: every figure fits 80 columns (a pipe, a CI
    # log) whole rather than cut to "16.4 (16.0-16…".
    # One run a mode has no spread: its figure alone, and the title says so, instead of a range of one value.
    spread = runs > 1
    how = ", alternated: median (range)" if spread else ": no spread to show"
    table = Table(title=f"{lm.name} · {_machine(lm)} · {count(runs, 'warm run')} a mode{how}",
                  title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for column in ("mode", "tok/s", "speed-up", "forwards", "tok/fwd", "accept", "= greedy"):
        ranged = column in ("tok/s", "speed-up")
        table.add_column(column, justify="left" if column in ("mode", "= greedy") else "right", no_wrap=not ranged,
                         min_width=len("(100.0-100.0)") if ranged else None)
    for r in rows:
        same = "yes" if r.identical else f"from #{r.first_divergence}" + (" (tie)" if r.divergence_note else "")
        rate, speedup = f"{r.tokens_per_s:.1f}", f"{r.speedup:.2f}x"
        if spread:
            rate += f" ({r.tokens_per_s_low:.1f}-{r.tokens_per_s_high:.1f})"
            speedup += f" ({r.speedup_low:.2f}-{r.speedup_high:.2f})"
        table.add_row(r.mode, rate, speedup, str(r.target_forwards),
                      f"{r.tokens_per_forward:.2f}", f"{r.acceptance_rate:.0%}" if r.acceptance_rate is not None
                      else "none" if r.mode in DRAFTING_MODES else "-", same)
    console = Console(soft_wrap=True)
    console.print(table)
    if not spread:
        console.print("One run a mode has no spread: --repeats 3 or more gives each figure its range.")
    for r in rows:
        if r.unreliable is not None:
            console.print(f"decode-tui: warning: {r.mode}'s {r.tokens_per_s:.1f} tok/s is not a reliable figure: "
                          f"{r.unreliable}.", style="yellow", markup=False)
    for r in rows:
        _why(console, r, timeline)
    choice = state_of(lm.model).threads
    if choice is not None:
        console.print(f"Threads: {choice.said()}.", markup=False)


def _why(console: Console, row: BenchRow, timeline: bool) -> None:
    """Below the table: a drafting mode's acceptance by draft position, why its output parted from greedy's where
    that was a near-tie's rounding, the tokens a forward was expected to give at its acceptance rate next to what
    it gave, and (``timeline``) its forwards one by one."""
    from rich import box
    from rich.table import Table

    from ..core.record.timeline import draft_stats
    from ..tui.cost_view import cost_line
    from ..tui.forward_views import BAR_COLUMN, FORWARD_COLUMNS, acceptance_line, forward_cells

    line = acceptance_line(row.acceptance_by_position, row.timeline)
    if row.acceptance_by_position and line is not None:
        console.print(f"{row.mode}: {line}")
    if row.divergence_note is not None:
        console.print(f"{row.mode}: parted from greedy at #{row.first_divergence}: {row.divergence_note}")
    cost = cost_line(draft_stats(row.timeline), measured=row.speedup) if row.mode in DRAFT_MODEL_MODES \
        else None
    if cost is not None:
        console.print(f"{row.mode}: {cost}")
    if not timeline or not row.timeline:
        return
    table = Table(title=f"{row.mode}: one row per target forward (its last timed run)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for column in (*FORWARD_COLUMNS, "wall ms"):
        table.add_column(column, justify="right")
    table.add_column(BAR_COLUMN)
    for f in row.timeline:
        table.add_row(*forward_cells(f, wall=True))
    console.print(table)


def _bench_prompt(modes: list[ModeChoice]) -> str:
    """Without --prompt: the demo prompt of the first drafting mode asked for (it is made to show drafting), else
    greedy's."""
    from ..core.params import demo_prompt

    drafting = [m for m in modes if m in DRAFTING_MODES]
    return demo_prompt(drafting[0] if drafting else "greedy")


def whatif(path: Path, *, model: str | None, device: str, dtype: str, draft: str | None,
           draft_confidence: float | None, trust_remote_code: bool, output_format: TableFormatChoice,
           recalibrate: bool = False) -> None:
    """Replay a greedy trace under every PLD setting (and a draft model's draft lengths) and print the forwards
    each needs, at once, then its estimated speed from this machine's measured costs (core/analysis/whatif.py),
    which are measured once per model, device and context size and reused (``recalibrate``: measured again)."""
    import json

    from ..core.analysis import whatif as w
    from ..core.drafting import replay as r
    from ..core.errors import UsageError

    try:
        check_placement(device, None)
        trace = r.read_trace(path)
        try:
            resolved = ensure_model(model or trace.model)
        except DecodeTuiError as err:
            if model is not None:
                raise
            # A folder's trace is named by the folder's base name, which may not resolve from here.
            raise UsageError(f"{path} was decoded by {trace.model}, which is not a model decode-tui can find from "
                             f"here ({err}). Pass --model with that model's folder or repo id.") from None
        lm = load(resolved, device, dtype, trust_remote_code)
        if lm.name != trace.model:
            raise UsageError(f"{path} was decoded by {trace.model}, not {lm.name}: its token ids mean nothing to "
                             f"{lm.name}. Pass --model with the model that decoded it, or leave --model out.")
        draft_model = load_draft(lm, draft, trust_remote_code) if draft is not None else None
        width = max(max(r.DRAFT_LENGTHS), max(w.TREE_BUDGETS)) + 1
        with status("Replaying every setting: the target forwards each needs, exactly") as progress:
            replays = w.lookup_grid(trace, lm.eos_token_ids)
            progress("Replaying draft trees: prompt lookup's every match, and suffix drafting")
            replays += w.tree_rows(trace, lm.eos_token_ids)
            if draft_model is not None:
                threshold = r.draft_confidence(trace, draft_confidence)
                for k in r.DRAFT_LENGTHS:
                    progress(f"Replaying the draft model's drafts at draft length {k} (of {max(r.DRAFT_LENGTHS)})")
                    replays.append(r.replay_draft(trace, lm.eos_token_ids, draft_model, k, threshold,
                                                      target=lm.model))
        console = None
        if output_format is TableFormatChoice.text:  # the exact counts at once; the timed estimates follow
            from rich.console import Console

            console = Console(soft_wrap=True)
            _forward_counts(console, trace, w.table(trace, replays, None))
        runs = _counted_on_runs(lm, trace, console)
        replays += runs
        with status("Timing this machine's forward passes") as progress:
            def measure() -> Costs:
                said = f"Timing a prefill, a step and verifications of 2 to {width} tokens"
                progress(said)
                costs = w.measure_costs(lm, trace, width, draft_model,
                                        progress=lambda line: progress(f"{said}: {line}"))
                said = ("Timing real greedy and prompt-lookup runs of the text, for what a step and a verifying round "
                        "cost besides their forwards")
                progress(said)
                from ..core.analysis.calibrate import calibrated

                return calibrated(lm, trace, costs, progress=lambda line: progress(f"{said}: {line}"))

            from ..core.analysis.saved_costs import costs_for, threads_for
            from ..core.execution.threads import choose_threads, settle_on

            progress("Timing forwards on each thread count, for the count to decode on")
            choice = choose_threads(lm.model)  # as a run's warm-up does: the timings are the count's
            threads = threads_for(lm, trace, width, draft, choice, again=recalibrate)
            if choice is not None and threads != choice.threads:
                settle_on(lm.model, threads)  # a tied count whose timings are saved
            saved_costs = costs_for(lm, trace, width, draft, measure, again=recalibrate, threads=threads)
    except DecodeTuiError as err:
        fail(err)
    rows = w.table(trace, replays, saved_costs.costs)
    greedy, settings = rows[0], rows[1:]
    if console is None:
        for row in settings:
            _write(sys.stdout, json.dumps(row.to_dict()) + "\n")
        return
    console.print(f"[dim]{saved_costs.said}.[/dim]", highlight=False)
    _whatif_tables(console, trace, lm, saved_costs.costs, greedy, settings, r.draft_confidence(trace, draft_confidence))


def _counted_on_runs(lm: LoadedModel, trace: Trace, console: Console | None) -> list[Replayed]:
    """The drafting modes a trace cannot replay (core/analysis/counted.py), run on its prompt at this device's
    tree budget for their exact forwards; printed as they come where ``console`` is given."""
    from ..core.analysis.counted import counted, unreplayable
    from ..core.execution.tree_budget import tree_budget

    modes = unreplayable()
    if not modes:
        return []
    rows = []
    with status("Timing this device's tree budget") as progress:
        budget = tree_budget(lm.model)
        for mode in modes:
            progress(f"Running --mode {mode} on the trace's prompt: its drafts come from the target's outputs off "
                     "the trace's path, which a trace does not hold")
            row = counted(lm, trace, mode, budget, say=lambda line: _said(console, line))
            if row is not None:
                rows.append(row)
    if console is not None and rows:
        from rich.table import Table

        table = Table(title=f"Drafting from the target's own outputs, at this device's tree budget ({budget}): target "
                            "forwards exact, counted on a greedy run of the prompt (cold, every round drafted)",
                      title_justify="left")
        for column in ("--mode", "forwards", "tok/fwd", "accept"):
            table.add_column(column, justify="left" if column == "--mode" else "right")
        from ..core.analysis.whatif import table as whatif_rows

        for r in whatif_rows(trace, rows, None)[1:]:  # greedy's row first
            table.add_row(r.drafter, str(r.target_forwards), f"{r.tokens_per_forward:.2f}",
                          f"{r.acceptance_rate:.0%}" if r.acceptance_rate is not None else "-")
        console.print(table)
    return rows


def _said(console: Console | None, line: str) -> None:
    if console is not None:
        console.print(f"[dim]{line}[/dim]", highlight=False)
    else:
        stderr().print(f"decode-tui: {line}", highlight=False, markup=False)


def _forward_counts(console: Console, trace: Trace, rows: list[WhatIf]) -> None:
    """What a what-if knows before timing anything: every setting's target forwards, exactly."""
    from rich.table import Table

    from ..tui.forward_views import lookup_grid

    greedy, settings = rows[0], rows[1:]
    new = len(trace.token_ids)
    kind = "greedy" if trace.mode == "greedy" else f"greedy {trace.mode}"
    console.print(f"[b]What if[/b] · {trace.source} · {trace.model} · {count(new, 'new token')} of a {kind} run "
                  f"({count(trace.target_forwards, 'target forward')} recorded); greedy: {greedy.target_forwards} "
                  "forwards")
    pld = {(r.max_ngram_size, r.draft_length): r for r in settings if r.drafter == "pld"}
    console.print(lookup_grid("PLD: target forwards (exact)", pld, lambda r: str(r.target_forwards), compact=True))
    others = [r for r in settings if r.drafter != "pld"]
    if others:
        table = Table(title="Draft model and trees: target forwards (exact)", title_justify="left")
        for column in ("setting", "forwards", "tok/fwd"):
            table.add_column(column, justify="left" if column == "setting" else "right")
        for r in others:
            table.add_row(_flags(r), str(r.target_forwards), f"{r.tokens_per_forward:.2f}")
        console.print(table)


def _flags(row: WhatIf) -> str:
    """The options that pick ``row``'s setting."""
    if row.drafter == "pld":
        return f"--mode pld --max-ngram-size {row.max_ngram_size} --num-pred-tokens {row.draft_length}"
    if row.drafter == "pld tree":
        return f"--mode pld --tree-budget {row.tree_budget}"
    if row.drafter == "suffix":
        return f"--mode suffix --tree-budget {row.tree_budget}"
    if row.drafter == "draft":
        return f"--mode speculative --num-draft-tokens {row.draft_length}"
    return f"--mode {row.drafter} --tree-budget {row.tree_budget} --no-adaptive"


def _whatif_tables(console: Console, trace: Trace, lm: LoadedModel, costs: Costs, greedy: WhatIf,
                   settings: list[WhatIf], threshold: float) -> None:
    from rich.table import Table

    from ..core.analysis.counted import unreplayable
    from ..core.analysis.whatif import alike, best
    from ..tui.forward_views import lookup_grid

    console.print(f"Costs measured here ({lm.device.type}, plain path): prefill {costs.prefill_s * 1e3:.0f} ms, "
                  f"a step {costs.verify(1) * 1e3:.1f} ms, verifying 2 / 6 / 11 tokens "
                  f"{costs.verify(3) * 1e3:.1f} / {costs.verify(7) * 1e3:.1f} / {costs.verify(12) * 1e3:.1f} ms"
                  + (f", a draft step {costs.draft_step_s * 1e3:.1f} ms" if costs.draft_step_s else "")
                  + f"; the decoding loop's own work {costs.overhead_s * 1e3:.1f} ms a forward. Greedy: "
                  f"{greedy.target_forwards} forwards, est. {greedy.est_tokens_per_s:.1f} tok/s. The times varied "
                  f"by {costs.spread:.0%} between repeats: estimates closer than that are alike.")
    pld = {(r.max_ngram_size, r.draft_length): r for r in settings if r.drafter == "pld"}
    console.print(lookup_grid("PLD: estimated speed-up over greedy", pld, lambda r: f"{r.est_speedup or 0.0:.1f}",
                              compact=True))
    drafts = [r for r in settings if r.drafter == "draft"]
    if drafts:
        table = Table(title=f"Draft model, --draft-confidence {threshold:g}: target forwards exact (its drafts "
                            "replayed as a real run drafts them)", title_justify="left")
        for column in ("--num-draft-tokens", "forwards", "tok/fwd", "accept", "est. tok/s", "est. speed-up"):
            table.add_column(column, justify="right")
        for r in drafts:
            table.add_row(str(r.draft_length), str(r.target_forwards), f"{r.tokens_per_forward:.2f}",
                          f"{r.acceptance_rate:.0%}" if r.acceptance_rate is not None else "-",
                          f"{r.est_tokens_per_s:.1f}", f"{r.est_speedup:.2f}x")
        console.print(table)
    trees = [r for r in settings if r.drafter in ("pld tree", "suffix")]
    if trees:
        table = Table(title="Draft trees, one forward over every node (--num-pred-tokens 10 deep): target forwards "
                            "exact; suffix drafting from the trace's own text, no history", title_justify="left")
        for column in ("--tree-budget", "pld fwd", "pld est.", "suffix fwd", "suffix est."):
            table.add_column(column, justify="right")
        by: dict[tuple[str, int], WhatIf] = {(r.drafter, r.tree_budget): r for r in trees}
        for budget in sorted({r.tree_budget for r in trees}):
            cells = [str(budget)]
            for kind in ("pld tree", "suffix"):
                r = by[(kind, budget)]
                cells += [str(r.target_forwards), f"{r.est_speedup or 0.0:.2f}x"]
            table.add_row(*cells)
        console.print(table)
    counted = [r for r in settings if r.drafter in unreplayable()]
    if counted:
        table = Table(title="Drafting from the target's own outputs: target forwards exact (counted on a run), "
                            "speed estimated", title_justify="left")
        for column in ("--mode", "--tree-budget", "forwards", "tok/fwd", "est. tok/s", "est. speed-up"):
            table.add_column(column, justify="left" if column == "--mode" else "right")
        for r in counted:
            table.add_row(r.drafter, str(r.tree_budget), str(r.target_forwards), f"{r.tokens_per_forward:.2f}",
                          f"{r.est_tokens_per_s:.1f}", f"{r.est_speedup:.2f}x")
        console.print(table)
    for label, rows in (("PLD", list(pld.values())), ("the draft model", drafts), ("trees", trees),
                        (" or ".join(unreplayable()), counted)):
        if not rows:
            continue
        top = best([greedy, *rows])
        tied = alike([greedy, *rows], top, costs.spread)
        if top.drafter == "greedy":
            console.print(f"Best with {label}: none of its settings beats plain greedy here (est. "
                          f"{greedy.est_tokens_per_s:.1f} tok/s).")
            continue
        if greedy in tied:
            console.print(f"Best with {label}: none is faster than plain greedy by more than the measurements vary "
                          f"({costs.spread:.0%}); the best estimate, {_flags(top)}, is {top.est_speedup:.2f}x.")
            continue
        if len(tied) > 1:
            console.print(f"Best with {label}: {len(tied)} settings are within {costs.spread:.0%} of each other, "
                          f"which these measurements cannot tell apart: "
                          + ", ".join(f"{_flags(r)} ({r.est_speedup:.2f}x)" for r in tied[:4])
                          + (" and more" if len(tied) > 4 else "")
                          + ". Time them with `decode-tui bench` before choosing.")
            continue
        console.print(f"Best with {label}: [b]{_flags(top)}[/b]: {top.target_forwards} forwards, est. "
                      f"{top.est_tokens_per_s:.1f} tok/s, {top.est_speedup:.2f}x greedy.")
    params = trace.params
    if trace.mode == "pld" and (params.get("max_ngram_size"), params.get("num_pred_tokens")) in pld:
        own = pld[(params["max_ngram_size"], params["num_pred_tokens"])]
        console.print(f"This run's own setting ({own.max_ngram_size}, {own.draft_length}): {own.target_forwards} "
                      f"forwards predicted, {trace.target_forwards} recorded.")
