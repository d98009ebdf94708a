"""Benchmark: where a fresh process's wait for its first output goes, phase by phase, as a user sees it.

Runs ``decode-tui generate --format jsonl`` in fresh processes and stamps each progress line on stderr (each
names the phase that starts: torch's import, transformers' import, the model code, the tokenizer, the
weights, CUDA's start, the warm-up) and the first line on stdout with the seconds since the process started.
A phase's time is the gap to the next line. Prints one JSON line per run.

    python benchmarks/first_token_phases.py [--runs 3] [--model smollm2] [-- extra generate options]
"""

from __future__ import annotations

import argparse
import json
import selectors
import subprocess
import sys
import time


def one_run(args: list[str]) -> dict[str, object]:
    started = time.perf_counter()
    # The command as its console script runs it, through this interpreter (a machine may lack the script).
    command = [sys.executable, "-c", "import sys; from decode_tui.cli.main import main; sys.argv[0] = 'decode-tui'; "
               "main()", "generate", "--format", "jsonl", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    assert process.stdout is not None and process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    selector.register(process.stderr, selectors.EVENT_READ)
    phases: list[tuple[float, str]] = []
    first: float | None = None
    while selector.get_map():
        for key, _ in selector.select(timeout=120):
            line = key.fileobj.readline()  # type: ignore[union-attr]
            if not line:
                selector.unregister(key.fileobj)
                continue
            now = round(time.perf_counter() - started, 3)
            if key.fileobj is process.stderr:
                phases.append((now, line.strip()))
            elif first is None:
                first = now
    process.wait()
    return {"first_output_s": first, "phases": phases, "exit": process.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("extra", nargs="*", help="more generate options, after --")
    args = parser.parse_args()
    for _ in range(args.runs):
        print(json.dumps(one_run(["--model", args.model, "-p", "Tell me a story.", "--max-new-tokens", "8",
                                  *args.extra])), flush=True)


if __name__ == "__main__":
    main()
