"""Theme data files for the TUI (``*.toml``), loaded by ``decode_tui.tui``.

:func:`names` lists them without Textual, so the command line can check a
``--theme`` (and a config file's default theme) before the app loads.
"""

from __future__ import annotations

import tomllib
from importlib.resources import files


def names() -> dict[str, str]:
    """Each shipped theme's name (``decode-dark``) and its description, read from the files."""
    out: dict[str, str] = {}
    for entry in sorted(files(__name__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text(encoding="utf-8"))
            out[str(data["name"])] = str(data.get("description", data["name"]))
    return out
