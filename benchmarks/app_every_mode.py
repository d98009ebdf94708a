"""The app itself, in a pseudo-terminal, in every mode: started, run to its end, quit with q.

A check more than a benchmark (issue 65: suffix mode's app crashed half a second into its run, and speculative mode's
app had not been started on a GPU since the H100 refused it): for each mode, `decode-tui run --mode MODE` on a
prompt long enough that a step takes over the busy threshold, in a pty of 150x42; it waits for the stats bar's
``finish:``, sends q and reads the exit status. Prints a line a mode (exit status, seconds to the end, whether the
busy label showed, whether a traceback did) and, with ``--out``, the same as JSON. Exits 1 if any mode failed.

    python benchmarks/app_every_mode.py [--modes greedy,suffix] [--max-new-tokens 24] [--timeout 180] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import struct
import sys
import time
from pathlib import Path

from decode_tui.core.modes import MODES

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(Path(sys.executable).parent / "decode-tui")
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[>=]")


def spawn_app(args: list[str], size: tuple[int, int] = (150, 42)) -> tuple[int, int]:
    """`decode-tui ARGS` in a new pseudo-terminal of ``size`` (columns, rows), as a user starts it: its pid and
    the terminal's file descriptor."""
    import fcntl
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.environ["TERM"] = "xterm-256color"
        os.execv(SCRIPT, [SCRIPT, *args])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    return pid, fd


def run_mode(mode: str, prompt_file: Path, max_new_tokens: int, timeout: float) -> dict[str, object]:
    pid, fd = spawn_app(["run", "--mode", mode, "--prompt-file", str(prompt_file), "--max-new-tokens",
                         str(max_new_tokens)])
    started, seen, finished_at, quit_sent = time.monotonic(), b"", None, False
    status = None
    while time.monotonic() - started < timeout + 30:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            seen += ANSI.sub(b"", chunk)
        if finished_at is None and b"finish:" in seen:
            finished_at = time.monotonic() - started
        if not quit_sent and (finished_at is not None or time.monotonic() - started > timeout):
            time.sleep(0.5)
            os.write(fd, b"q")
            quit_sent = True
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(code)
            break
    if status is None:
        os.kill(pid, 9)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    text = seen.decode("utf-8", errors="replace")
    return {"mode": mode, "exit": status, "finished_after_s": finished_at, "busy_shown": "busy " in text,
            "traceback": "Traceback" in text}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    prompt = Path(os.environ.get("TMPDIR", "/tmp")) / "decode-tui-app-every-mode.txt"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")[:6000]
    prompt.write_text("Summarise this text in a few sentences.\n\n" + readme, encoding="utf-8")
    rows = []
    for mode in args.modes.split(","):
        row = run_mode(mode, prompt, args.max_new_tokens, args.timeout)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    failed = [r for r in rows if r["exit"] != 0 or r["traceback"] or r["finished_after_s"] is None]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
