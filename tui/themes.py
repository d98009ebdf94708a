"""Themes are data: TOML files in ``decode_tui/themes``, read into Textual themes plus status glyphs.

Each file gives Textual's base colours, the decode-tui variables the
stylesheets use (token colours by provenance, verdict colours, match and copy
highlights, token-boundary backgrounds, and text styles so a status never
depends on colour alone) and the glyphs for accepted / rejected / resampled /
bonus. A file that lacks a variable is refused with the missing names, so a
new theme cannot half-work. ``NO_COLOR`` (https://no-color.org) selects the
monochrome theme.

It knows Textual's Theme and the files; nothing about widgets.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from importlib.resources import files

from textual.theme import Theme

from ..themes import ORDER

VARIABLES = (
    "token-target", "token-draft", "token-lookup", "token-resampled", "token-bonus", "token-forced",
    "token-draft-style", "token-lookup-style", "token-resampled-style", "token-bonus-style", "token-forced-style",
    # The probability colouring: a scale from confident to surprising, each step with its own text style too.
    "prob-sure", "prob-likely", "prob-unsure", "prob-surprising",
    "prob-sure-style", "prob-likely-style", "prob-unsure-style", "prob-surprising-style",
    "verdict-accepted", "verdict-rejected", "verdict-rejected-style",
    "match-background", "copy-background", "match-style", "copy-style",
    "boundary-a", "boundary-b", "boundary-b-style", "bar", "chosen",
)
GLYPHS = ("accepted", "rejected", "untested", "cut", "resampled", "bonus", "chosen")
COLORS = ("primary", "secondary", "accent", "success", "warning", "error", "foreground", "background", "surface",
          "panel")
DEFAULT = "decode-dark"
MONOCHROME = "decode-mono"


class ThemeFileError(ValueError):
    pass


@dataclass(frozen=True)
class ThemeSpec:
    theme: Theme
    description: str
    glyphs: dict[str, str]


def parse(text: str, source: str) -> ThemeSpec:
    """One theme file's contents as a Textual theme and its glyphs; ThemeFileError says what is missing."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ThemeFileError(f"{source}: not valid TOML ({exc})") from None
    colors, variables, glyphs = data.get("colors", {}), data.get("variables", {}), data.get("glyphs", {})
    missing = [f"colors.{k}" for k in COLORS if k not in colors]
    missing += [f"variables.{k}" for k in VARIABLES if k not in variables]
    missing += [f"glyphs.{k}" for k in GLYPHS if k not in glyphs]
    if "name" not in data:
        missing.insert(0, "name")
    if missing:
        raise ThemeFileError(f"{source}: missing {', '.join(missing)}")
    theme = Theme(name=data["name"], dark=bool(data.get("dark", True)), variables=dict(variables), **colors)
    return ThemeSpec(theme, str(data.get("description", data["name"])), dict(glyphs))


def load_all() -> dict[str, ThemeSpec]:
    """Every theme shipped in ``decode_tui.themes``, in a stable order (the theme key cycles through it)."""
    specs = {}
    for entry in sorted(files("decode_tui.themes").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            spec = parse(entry.read_text(encoding="utf-8"), entry.name)
            specs[spec.theme.name] = spec
    ordered = {name: specs.pop(name) for name in ORDER if name in specs}
    return {**ordered, **specs}


def initial_theme(requested: str | None = None) -> str:
    """The theme to start with: the one asked for, else monochrome under NO_COLOR, else the default."""
    if requested:
        return requested if requested.startswith("decode-") else f"decode-{requested}"
    return MONOCHROME if os.environ.get("NO_COLOR") else DEFAULT


def next_theme(names: list[str], current: str) -> str:
    """The theme after ``current`` in ``names``, round (the first when ``current`` is not one of them)."""
    return names[(names.index(current) + 1) % len(names)] if current in names else names[0]
