"""Theme data files for the TUI (``*.toml``), loaded by ``decode_tui.tui``.

:func:`names` lists them without Textual, so the command line can check a
``--theme`` (and a config file's default theme) before the app loads.
"""

from __future__ import annotations

import tomllib
from importlib.resources import files

# The order the theme key cycles through (others, if added, come after these).
ORDER = ("decode-dark", "decode-presenter", "decode-colorblind", "decode-mono")


def names() -> dict[str, str]:
    """Each shipped theme's name (``decode-dark``) and its description, read from the files, in ORDER."""
    found: dict[str, str] = {}
    for entry in sorted(files(__name__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text(encoding="utf-8"))
            found[str(data["name"])] = str(data.get("description", data["name"]))
    return {**{n: found.pop(n) for n in ORDER if n in found}, **found}
