"""A big ``--history``: how long `generate --mode suffix --history BIG` takes to its end and its peak memory, how
fast SIGTERM ends it in each phase, and how fast a history over the cap is refused.

The history is made here, deterministically: lines drawn (seeded) from the project's README and BENCHMARKS.md until
it reaches ``--mb`` megabytes. Each run is a fresh process, as a user's is; peak memory is the child's maximum
resident set (``getrusage``). Issue 65's targets: a 20 MB history ready within 4 minutes at no more than 3 GB
peak, or refused within 30 s before the model loads; SIGTERM ends the process within 2 s in every phase, the
app's too (`decode-tui run` in a pseudo-terminal).

Usage: python benchmarks/big_history.py [--mb 20] [--runs 2] [--sigterm-at 4,10,16] [--app-sigterm-at 6,12,20]
                                        [--out FILE.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the sibling scripts, as drafting_default.py reads decode_vs_hf

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(Path(sys.executable).parent / "decode-tui")
COMMAND = ["generate", "--mode", "suffix", "-p", "Hi", "--max-new-tokens", "16"]


def make_history(path: Path, megabytes: float) -> None:
    lines = ((ROOT / "README.md").read_text() + (ROOT / "BENCHMARKS.md").read_text()).splitlines()
    rng = random.Random(0)
    out, size = [], 0
    while size < megabytes * 2**20:
        line = rng.choice(lines)
        out.append(line)
        size += len(line.encode()) + 1
    path.write_text("\n".join(out), encoding="utf-8")


def whole_run(history: Path) -> dict[str, float | int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run([SCRIPT, *COMMAND, "--history", str(history)], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= before:
        print("note: this child's peak is not above an earlier child's; the figure is the larger one",
              file=sys.stderr)
    return {"exit": done.returncode, "seconds": round(seconds, 2), "peak_mb": round(peak / 1024)}


def sigterm_at(history: Path, delay: float) -> dict[str, float | int | str]:
    proc = subprocess.Popen([SCRIPT, *COMMAND, "--history", str(history)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return {"at_s": delay, "exit": proc.returncode, "ended_after_s": round(time.perf_counter() - sent, 2),
            "said": err.strip().splitlines()[-1] if err.strip() else ""}


def app_sigterm_at(history: Path, delay: float) -> dict[str, float | int | str]:
    """`decode-tui run --mode suffix --history BIG` in a pseudo-terminal, sent SIGTERM ``delay`` seconds in: its
    status, how long it took to end, and the last phase it showed."""
    import os
    import re
    import select

    from app_every_mode import spawn_app

    pid, fd = spawn_app(["run", "--mode", "suffix", "--history", str(history), "-p", "Hi"])
    seen, started = b"", time.perf_counter()
    while time.perf_counter() - started < delay:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
    os.kill(pid, signal.SIGTERM)
    sent = time.perf_counter()
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if select.select([fd], [], [], 0.1)[0]:
            with contextlib.suppress(OSError):
                seen += os.read(fd, 65536)
        if time.perf_counter() - sent > 30:
            os.kill(pid, signal.SIGKILL)
            done = os.waitpid(pid, 0)
            break
    phases = re.findall(r"(reading [^…]*|sorting [^…]*|warming up [^…]*|loading [^…]*)…", seen.decode(errors="replace"))
    return {"at_s": delay, "exit": os.waitstatus_to_exitcode(done[1]),
            "ended_after_s": round(time.perf_counter() - sent, 2), "phase": phases[-1] if phases else ""}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--sigterm-at", default="4,10,16")
    parser.add_argument("--app-sigterm-at", default="6,12,20")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        history = Path(folder) / "big.txt"
        make_history(history, args.mb)
        result: dict[str, object] = {"mb": args.mb, "command": " ".join(["decode-tui", *COMMAND])}
        result["runs"] = [whole_run(history) for _ in range(args.runs)]
        result["sigterm"] = [sigterm_at(history, float(t)) for t in args.sigterm_at.split(",")]
        result["app_sigterm"] = [app_sigterm_at(history, float(t)) for t in args.app_sigterm_at.split(",")]
        over = Path(folder) / "over.txt"
        with over.open("wb") as f:
            f.truncate(65 * 2**20)
        started = time.perf_counter()
        refused = subprocess.run([SCRIPT, *COMMAND, "--history", str(over)], capture_output=True, text=True)
        result["over_cap"] = {"exit": refused.returncode, "seconds": round(time.perf_counter() - started, 2),
                              "said": refused.stderr.strip()}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
