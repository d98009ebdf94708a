"""Themes are data files that define every variable; stylesheets use theme variables only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from decode_tui.themes import ORDER
from decode_tui.tui.themes import GLYPHS, VARIABLES, ThemeFileError, initial_theme, load_all, parse

ROOT = Path(__file__).resolve().parents[1]


def test_the_four_themes_load_in_order_with_every_variable_and_glyph() -> None:
    specs = load_all()
    assert list(specs)[:4] == list(ORDER)
    for spec in specs.values():
        assert set(VARIABLES) <= set(spec.theme.variables)
        assert all(spec.glyphs[g] for g in GLYPHS)


@pytest.mark.parametrize("name", ["decode-colorblind", "decode-mono"])
def test_statuses_do_not_depend_on_colour_alone(name: str) -> None:
    variables = load_all()[name].theme.variables
    styles = [variables[f"token-{kind}-style"] for kind in ("draft", "lookup", "resampled", "bonus")]
    assert "none" not in styles and len(set(styles)) == len(styles)  # each provenance its own text style
    assert "strike" in variables["verdict-rejected-style"]


def test_the_colourblind_theme_uses_the_okabe_ito_palette() -> None:
    okabe_ito = {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
    variables = load_all()["decode-colorblind"].theme.variables
    for kind in ("draft", "lookup", "resampled", "bonus"):
        assert variables[f"token-{kind}"] in okabe_ito
    assert {variables["verdict-accepted"], variables["verdict-rejected"]} <= okabe_ito


def test_a_theme_file_missing_a_variable_is_refused_with_its_name() -> None:
    text = (ROOT / "themes" / "dark.toml").read_text(encoding="utf-8").replace('token-bonus = "#d7a9ff"\n', "")
    with pytest.raises(ThemeFileError, match=r"variables\.token-bonus"):
        parse(text, "broken.toml")


def test_no_color_selects_monochrome(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert initial_theme() == "decode-dark"
    monkeypatch.setenv("NO_COLOR", "1")
    assert initial_theme() == "decode-mono"
    assert initial_theme("presenter") == "decode-presenter"


@pytest.mark.parametrize("path", sorted((ROOT / "tui").rglob("*.tcss")), ids=lambda p: p.name)
def test_stylesheets_use_theme_variables_only(path: Path) -> None:
    css = re.sub(r"/\*.*?\*/", "", path.read_text(encoding="utf-8"), flags=re.S)
    assert not re.search(r"#[0-9a-fA-F]{3,8}\b|\brgb\(|\bhsl\(", css), "a literal colour"
    for prop, value in re.findall(r"\b(color|background|border[a-z-]*)\s*:\s*([^;]+);", css):
        assert "$" in value or value.strip() in ("none", "transparent"), f"{prop}: {value}"
