"""A what-if's timings of this machine, kept per model, device and context size, so they are measured once.

Timing the forwards and real runs that price a what-if takes minutes on a CPU, while the forward counts it prices
are exact and cheap. The timings depend on the model, the device and dtype, the draft model, the widest
verification timed and the context length the forwards run at; so they are saved under the cache folder
(``whatif/``), keyed by all of these with the context lengths rounded up to a power of two, and reused by the
next what-if of such a trace, which says so. A prefill's cost is scaled to the trace's own prompt length (it is
close to linear in it). The file is written whole or not at all (a temporary file, then a rename); one that
cannot be read is measured again. It knows the file and its key; what is timed is
:mod:`~decode_tui.core.analysis.whatif`'s and :mod:`~decode_tui.core.analysis.calibrate`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.registry import cache_root, file_name, write_whole
from .whatif import Costs

if TYPE_CHECKING:
    from ..drafting.replay import Trace
    from ..execution.threads import ThreadChoice
    from ..model.loading import LoadedModel


@dataclass(frozen=True)
class Saved:
    """Timings for a what-if, and where they came from in words for the user."""

    costs: Costs
    said: str


def _bucket(n: int) -> int:
    """``n`` rounded up to a power of two (at least 16): traces of about one size share their timings."""
    return max(16, 1 << max(0, n - 1).bit_length())


def key(lm: LoadedModel, trace: Trace, width: int, draft: str | None, threads: int = 0) -> str:
    """The file name the timings for ``trace`` on ``lm`` are saved under; ``threads``: the CPU's thread count the
    forwards ran on (core/execution/threads.py; 0 off the CPU), a busy machine's being another than a quiet one's."""
    middle = len(trace.prompt_ids) + len(trace.token_ids) // 2
    parts = [lm.name, lm.device.type, str(lm.dtype).removeprefix("torch."), f"draft-{draft or 'none'}",
             f"w{width}", f"prompt{_bucket(len(trace.prompt_ids))}", f"ctx{_bucket(middle)}",
             *([f"threads{threads}"] if threads else [])]
    return file_name("-".join(parts) + ".json")


def folder() -> Path:
    return cache_root() / "whatif"


def threads_for(lm: LoadedModel, trace: Trace, width: int, draft: str | None, choice: ThreadChoice | None,
                again: bool = False) -> int:
    """The thread count to key the timings by (0 off the CPU): the count ``choice`` chose, or, on a near tie (a
    quiet machine's one and two threads), a count tied with it whose timings are saved, which spares timing them
    again where a tie decided by noise would ask for it every other time; the chosen count where ``again``."""
    if choice is None:
        return 0
    if again:
        return choice.threads
    return next((n for n in choice.tied() if _read(folder() / key(lm, trace, width, draft, n)) is not None),
                choice.threads)


def costs_for(lm: LoadedModel, trace: Trace, width: int, draft: str | None, measure: Callable[[], Costs], *,
              again: bool = False, threads: int = 0) -> Saved:
    """The timings for ``trace``: the saved ones where there are (unless ``again``), else ``measure()``'s, saved."""
    path = folder() / key(lm, trace, width, draft, threads)
    saved = None if again else _read(path)
    if saved is not None:
        costs, prompt_length, when = saved
        scaled = dataclasses.replace(costs, prefill_s=costs.prefill_s * len(trace.prompt_ids) / max(1, prompt_length))
        return Saved(scaled, f"timings measured on {when} for {lm.name} on {lm.device.type} and reused from {path} "
                             "(--recalibrate measures them again)")
    costs = measure()
    _write(path, costs, len(trace.prompt_ids))
    return Saved(costs, f"timings measured now on {lm.device.type}, saved for the next what-if in {path}")


def _read(path: Path) -> tuple[Costs, int, str] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fields = {f.name for f in dataclasses.fields(Costs)}
        values: dict[str, Any] = {name: data["costs"][name] for name in fields}
        values["verify_s"] = tuple(float(v) for v in values["verify_s"])
        costs = Costs(**values)
        if len(costs.verify_s) < 2 or not all(isinstance(v, float) and v >= 0 for v in costs.verify_s):
            return None
        return costs, int(data["prompt_length"]), str(data["measured"])
    except (OSError, ValueError, KeyError, TypeError):  # missing, torn by hand, or of an older layout
        return None


def _write(path: Path, costs: Costs, prompt_length: int) -> None:
    data = {"costs": dataclasses.asdict(costs), "prompt_length": prompt_length,
            "measured": time.strftime("%Y-%m-%d %H:%M")}
    # A cache that cannot be written costs the next what-if a measurement, nothing more.
    with contextlib.suppress(OSError):
        write_whole(path, lambda f: f.write(json.dumps(data).encode("utf-8")))
