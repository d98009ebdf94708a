"""Where token recycling's matrix is kept between runs: one file per model under the cache folder's ``recycled/``.

A run of ``--mode recycle`` starts from the matrix its model's last run left (or from the file ``--recycle-state``
names, or empty with ``--cold``) and writes it back when it ends. The file is written whole or not at all (a
temporary file beside it, then a rename): a run stopped by SIGTERM or ``q`` leaves the old file or a whole new one,
and where two processes recycle into one file at once, the last to end wins. A file made for another model (another
vocabulary), truncated or not a matrix at all is said in one line and the run starts cold; it is replaced when the
run ends. The format is torch's, loaded with ``weights_only`` (no code runs from it).

It knows the file; the matrix is :mod:`.recycling`'s, the cache folder :mod:`~decode_tui.core.model.registry`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..model.registry import cache_file, write_whole

FORMAT = 1


@dataclass(frozen=True)
class Loaded:
    """What a run starts from: the rows ([V, k] int32, or None for an empty matrix) and the words that say so."""

    rows: torch.Tensor | None
    said: str


def default_path(model: str) -> Path:
    """The model's own matrix file under the cache folder."""
    return cache_file("recycled", model + ".pt")


def load(path: Path, vocab_size: int, k: int, model: str) -> Loaded:
    """The matrix in ``path`` for a model of ``vocab_size`` with ``k`` guesses a row (a file of another k gives
    its first k columns, or its own padded with empty cells); None rows, with the reason, where it cannot serve."""
    if not path.exists():
        return Loaded(None, f"matrix: empty (no earlier run of {model} left one in {path})")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
        rows = data["rows"]
        if data.get("format") != FORMAT or not isinstance(rows, torch.Tensor) or rows.dim() != 2:
            raise ValueError("not a recycled matrix")
        if rows.shape[0] != vocab_size:
            return Loaded(None, f"matrix: empty ({path} was made for a vocabulary of {rows.shape[0]} tokens, "
                                f"{data.get('model', 'another model')}'s, not {model}'s {vocab_size}; it is "
                                "replaced when this run ends)")
        rows = rows.to(torch.int32)
        if rows.shape[1] >= k:
            rows = rows[:, :k].contiguous()
        else:
            rows = torch.cat([rows, torch.full((vocab_size, k - rows.shape[1]), -1, dtype=torch.int32)], dim=1)
        if int(rows.min()) < -1 or int(rows.max()) >= vocab_size:
            raise ValueError("token ids outside the vocabulary")
    except Exception as exc:
        return Loaded(None, f"matrix: empty ({path} could not be read: {type(exc).__name__}; it is replaced when "
                            "this run ends)")
    filled = int((rows[:, 0] != -1).sum())
    return Loaded(rows, f"matrix: {filled:,} rows from earlier runs ({path})")


def save(path: Path, rows: torch.Tensor, model: str) -> None:
    """Write the matrix whole: a temporary file beside ``path``, then a rename over it."""
    write_whole(path, lambda f: torch.save({"format": FORMAT, "model": model, "rows": rows.contiguous()}, f))
