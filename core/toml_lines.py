"""Where a field of a TOML file is set, for error messages: Python's tomllib parses without line numbers.

Shared by the user config (cli/config.py) and lesson files (decode_tui.lessons), whose messages name the
file, the line and the field. It knows TOML's surface syntax; nothing about what the fields mean.
"""

from __future__ import annotations

import re


def line_of(text: str, name: str) -> int:
    """The line where ``name`` is set (``name = ...``, the key bare or quoted), else where its table starts
    (``[name]`` or ``[[name]]``); 1 if neither is found."""
    key = rf"(\"{re.escape(name)}\"|'{re.escape(name)}'|{re.escape(name)})"
    match = (re.search(rf"^[ \t]*{key}[ \t]*=", text, re.MULTILINE)
             or re.search(rf"^[ \t]*\[\[?[ \t]*{key}[ \t]*\]", text, re.MULTILINE))
    return text.count("\n", 0, match.start()) + 1 if match else 1
