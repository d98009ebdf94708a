"""Headless decoding: a run streamed to stdout (text or JSON lines), its figures and progress on stderr.

``generate``'s whole job once its options are checked: fetch and load the
model (cli/loads.py; a spinner on a terminal, plain lines otherwise), warm it up,
stream the run, and on Ctrl-C close the strategy and print what was decoded
so far. Output to a closed pipe (``| head``) stops decoding and exits 0.

It turns core calls into output; the decoding, the warm-up and the
comparison protocol live in :mod:`decode_tui.core`.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

import typer

from ..core.errors import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_TERMINATED, DecodeTuiError
from ..core.params import DecodeConfig
from ..tui.numbers import count, decoded_tokens, draft_counts
from .console import fail, status, stderr
from .flags import FormatChoice
from .loads import check_placement, load_models, steer, with_draft_model
from .options import DecodingOptions
from .steering import Steering, forced_summary

if TYPE_CHECKING:

    from ..core.drafting.draft_models import DraftModel
    from ..core.model.loading import LoadedModel
    from ..core.record.events import BeamStepped, Finished, TokenEmitted
    from ..core.record.path import Path


def generate(options: DecodingOptions, *, compare: bool, compare_runs: int, output_format: FormatChoice,
             steering: Steering | None = None) -> None:
    """Decode ``options``' prompt headlessly (from ``steering``'s path, where given); a DecodeTuiError the user
    can fix ends it with its message."""
    mode = options.mode
    try:
        config = options.config(compare=compare)
        check_placement(options.device, options.device_map_name)
        text = options.prompt_text()
        if mode == "greedy" and options.warpers_given:
            stderr().print("decode-tui: note: greedy mode takes the argmax, so --temperature, --top-k, --top-p "
                           "and the other sampling cut-offs change nothing; use --mode sample to sample.")
        path, tokenizer = steer(options, steering, text, config) if steering else (None, None)
        lm, draft = load_models(options, text, config, with_draft_model(config), tokenizer)
        _warm_up(lm, text, config, draft)
        _decode(lm, text, config, output_format, draft, compare_runs if compare else 0, path)
    except DecodeTuiError as err:
        fail(err)


def ignore_signals() -> None:
    """Ignore Ctrl-C and SIGTERM from here on (the main thread only): a command exiting on one would otherwise be
    cut short by a second, in its clean-up or in the interpreter's exit handlers (a traceback from atexit, and death
    by the signal instead of the exit status)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _write(out: TextIO, text: str) -> None:
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head -3`): stop decoding and exit 0, quietly, as Unix tools do. (click would
        # exit 1.) stdout is pointed at /dev/null so that the interpreter's last flush does not fail again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        raise typer.Exit(0) from None


def _stats_line(lm: LoadedModel, result: Finished) -> str:
    dtype = str(lm.dtype).removeprefix("torch.")
    # A forced or kept token was not decoded: the figures count the decoded ones, and the others are said beside.
    decoded = decoded_tokens(*result.token_counts)
    return (f"{lm.name} · {result.mode} · {lm.device.type} {dtype} · {decoded} in "
            f"{result.elapsed_s:.2f} s ({result.tokens_per_s:.1f} tok/s) · "
            f"{count(result.target_forwards, 'target forward')} ({result.tokens_per_forward:.2f} tokens/forward) · "
            + (f"perplexity {result.perplexity:.2f} · " if result.perplexity is not None else "")
            + f"finish: {result.finish_reason}"
            + ("" if result.constraint_complete is not False else
               " · incomplete: the output stopped before it satisfied the constraint"))


def _warm_up(lm: LoadedModel, prompt: str, config: DecodeConfig, draft: DraftModel | None) -> None:
    """Run the first steps of this decode once, so the timed run is not a cold one (see core/warmup.py)."""
    from ..core.execution.forward import graph_failure
    from ..core.warmup import describe, reads_history, warm_up

    what = "; ".join(part for part in (reads_history(config), describe(lm, config)) if part)
    terminal = stderr().is_terminal  # a spinner's line says how far along; a log gets the phases only
    with status(f"Warming up {lm.name} ({what + '; ' if what else ''}{config.mode})") as progress:
        seconds = warm_up(lm, prompt, config, draft,
                          (lambda line: progress(line[0].upper() + line[1:])) if terminal else None)
    if config.compiles:
        stderr().print(f"decode-tui: compiled and warmed up in {seconds:.1f} s")
    failure = graph_failure(lm.model)
    if failure is not None:
        stderr().print(f"decode-tui: note: CUDA graphs could not be captured ({failure}); decoding eagerly on "
                        "the static cache, with the same tokens. --no-cuda-graphs takes the plain path.")


def _compare(lm: LoadedModel, prompt: str, config: DecodeConfig, result: Finished, runs: int,
             draft: DraftModel | None) -> Finished:
    """Attach plain greedy's speed on the same prompt, measured by the core's protocol (core/analysis/compare.py)."""
    from ..core.analysis.compare import with_comparison

    with status(f"Comparing with plain greedy decoding ({count(runs, 'warm run')} a side, alternated)") as progress:
        return with_comparison(lm, prompt, config, result, runs=runs, draft=draft, progress=progress)


def _beam_progress(config: DecodeConfig) -> Callable[[BeamStepped | None], None] | None:
    """Where stderr is a terminal: a live line per beam step (step, best open score, finished); None ends it."""
    console = stderr()
    if not console.is_terminal:
        return None
    status = console.status("beam search: prefill")
    status.start()

    def show(step: BeamStepped | None) -> None:
        if step is None:
            status.stop()
            return
        best = f"best open beam score {step.beams[0].score:.3f}" if step.beams else "no beam open"
        status.update(f"beam search: step {step.step + 1} of at most {config.max_new_tokens}, {best}, "
                      f"{len(step.finished)} of {config.beam.num_beams} finished")

    return show


def _unwritten(result: Finished, written: list[TokenEmitted]) -> list[TokenEmitted]:
    """Events for the tokens in ``result`` past the ``written`` ones; the rest of the text goes with the last."""
    from ..core.record.events import TokenEmitted

    done_text = "".join(e.text for e in written)
    missing = result.token_ids[len(written):]
    out = []
    start = len(done_text)
    for i, token_id in enumerate(missing):
        text = result.text[start:] if i == len(missing) - 1 else ""
        out.append(TokenEmitted(index=len(written) + i, token_id=token_id, text=text, start=start,
                                end=start + len(text)))
        start += len(text)
    return out


def _decode(lm: LoadedModel, prompt: str, config: DecodeConfig, output_format: FormatChoice,
            draft: DraftModel | None = None, compare_runs: int = 0, path: Path | None = None) -> None:
    """Stream one run (from ``path``, where given); with ``compare_runs``, then time it against plain greedy
    (not the streamed run: its speed includes writing the output)."""
    from ..core.record.events import BeamStepped, Finished, Started, TokenEmitted
    from ..core.run import Run

    run = Run(lm, prompt, config, draft, path=path)
    for note in run.notes:
        stderr().print(f"decode-tui: note: {note}")
    out = sys.stdout
    jsonl = output_format is FormatChoice.jsonl
    events = run.events()
    result: Finished | None = None
    written: list[TokenEmitted] = []  # the tokens whose output is out, for a clean cut on Ctrl-C
    last_step: BeamStepped | None = None
    ended = False  # the text's closing newline is out
    # Beam search writes its text only at the end: on a terminal, a progress line says how the search goes.
    progress = _beam_progress(config) if not jsonl and config.mode == "beam" else None
    # Ctrl-C (and SIGTERM, taken alike) is taken between events, never in the middle of writing one: the first one
    # sets a flag the loop reads once an event is out (a token away at most); a second one interrupts at once.
    interrupted: int | None = None  # the signal
    cleaning = False  # the cut below has begun: a second signal is too late to hurry it

    def on_signal(signum: int, frame: object) -> None:
        nonlocal interrupted
        if interrupted is not None:
            # A second signal that arrived before the handlers were set to ignore can still run this later,
            # from inside that very signal.signal call (which runs pending handlers) or at exit: raised there,
            # it cut the clean ending short with a traceback. Once the cut has begun, it has nothing to hurry.
            if not cleaning:
                raise KeyboardInterrupt
            return
        interrupted = signum

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = ({s: signal.signal(s, on_signal) for s in signals}
                if threading.current_thread() is threading.main_thread() else None)
    try:
        for event in events:
            if isinstance(event, Started) and event.notes and not jsonl:  # jsonl has them in the event
                for note in event.notes:
                    stderr().print(f"decode-tui: note: {note}")
            if isinstance(event, BeamStepped):
                last_step = event
                if progress is not None:
                    progress(event)
            elif progress is not None and isinstance(event, TokenEmitted | Finished):
                progress(None)
            if isinstance(event, Finished) and not jsonl:
                _write(out, "\n")  # the text ends before anything else is said (the comparison's progress)
                ended = True
            if isinstance(event, Finished) and compare_runs:
                event = _compare(lm, prompt, config, event, compare_runs, draft)
            if (not jsonl and isinstance(event, TokenEmitted) and event.index == 0 and last_step is not None
                    and config.beam.num_return_sequences > 1 and last_step.finished):
                best = last_step.finished[0]  # the hypothesis about to stream: headed like the others below
                _write(out, f"[1] score {best.score:.4f}, sum log-prob {best.sum_logprobs:.4f}\n")
            line = event.to_json() + "\n" if jsonl else event.text if isinstance(event, TokenEmitted) else ""
            if isinstance(event, TokenEmitted):
                written.append(event)  # counted just before the write: Ctrl-C mostly lands in the slow parts
            if line:
                _write(out, line)
            if isinstance(event, Finished):
                result = event
            if interrupted is not None and result is None:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        cleaning = True
        if previous is not None:  # the clean cut below is not itself cut short by a second signal
            ignore_signals()
        if progress is not None:
            progress(None)
        events.close()  # runs the strategy's finally blocks; nothing keeps decoding
        result = run.cancelled()
        # Ctrl-C can land after the core emitted a token but before its output was written (while it is being
        # turned into JSON): write those tokens first, so the output still adds up to the `finished` event.
        for event in _unwritten(result, written):
            _write(out, event.to_json() + "\n" if jsonl else event.text)
        if jsonl:
            _write(out, result.to_json() + "\n")
        else:
            _write(out, "\n")
        how = "terminated" if interrupted == signal.SIGTERM else "interrupted"
        where = "the events so far are above, ending with `finished`" if jsonl else "the text so far is above"
        stderr().print(f"decode-tui: {how} after {count(result.new_tokens, 'token')}; {where}. "
                        f"{_stats_line(lm, result)}")
        raise typer.Exit(EXIT_TERMINATED if interrupted == signal.SIGTERM else EXIT_INTERRUPTED) from None
    finally:
        # Interrupted, the command exits from here: a second Ctrl-C in the interpreter's shutdown would interrupt
        # its exit handlers, so the signals stay ignored. Otherwise the caller's handlers come back.
        if previous is not None and interrupted is None:
            for s, handler in previous.items():
                signal.signal(s, handler)
    if not jsonl:
        _summary(out, lm, result, written, ended)
    if result is not None and result.constraint_complete is False:
        # The output is a valid start of what the constraint asks for, not a whole: exit 4 so a script notices
        # (jsonl's `finished` says `constraint_complete: false` too).
        stderr().print(f"decode-tui: the output is incomplete: --max-new-tokens {config.max_new_tokens} stopped the "
                       "run before it satisfied the constraint (exit status 4). Raise --max-new-tokens.")
        raise typer.Exit(EXIT_INCOMPLETE)


def _summary(out: TextIO, lm: LoadedModel, result: Finished | None, written: list[TokenEmitted],
             ended: bool) -> None:
    """After a text run: its closing newline, the other hypotheses of a beam search, and on stderr the run's
    figures (speed, forced tokens, drafting, a comparison with greedy)."""
    if not ended:
        _write(out, "\n")
    if result is not None:
        for rank, hypothesis in enumerate((result.hypotheses or ())[1:], start=2):
            _write(out, f"\n[{rank}] score {hypothesis.score:.4f}, sum log-prob {hypothesis.sum_logprobs:.4f}\n"
                        f"{hypothesis.text}\n")
        stderr().print(_stats_line(lm, result))
        if (forced := forced_summary(written)) is not None:
            stderr().print(forced)
        if result.drafted is not None:
            by_position = ", ".join(f"{a:.0%}" for a in result.acceptance_by_position or ())
            counts = draft_counts(result.drafted, result.accepted or 0, result.draft_rounds, result.draft_depth)
            stderr().print(f"{counts} (by depth: {by_position or '-'}), "
                            f"{result.draft_forwards} draft forwards, drafting {result.draft_time_s or 0:.2f} s, "
                            f"verifying {result.verify_time_s or 0:.2f} s")
        if result.comparison is not None:
            c = result.comparison
            if c["identical"]:
                verdict = "identical"
            elif c.get("divergence_note"):
                verdict = f"different from token {c['first_divergence']}, at a near-tie: {c['divergence_note']}"
            else:
                verdict = f"DIFFERENT from token {c['first_divergence']}"
            rounds = count(c["runs"], "warm run")
            stderr().print(f"compared with plain greedy: {c['speedup']:.2f}x (range {c['speedup_low']:.2f}-"
                            f"{c['speedup_high']:.2f} over {rounds} a side, alternated; medians "
                            f"{result.mode} {c['tokens_per_s']:.1f} tok/s, greedy {c['greedy_tokens_per_s']:.1f} "
                            f"tok/s), output {verdict}")
            if c.get("unreliable"):
                stderr().print(f"decode-tui: warning: {c['speedup']:.2f}x is not a reliable figure: "
                               f"{c['unreliable']}.")
