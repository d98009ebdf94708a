"""The user's config file: a keymap, a default theme and model; a bad file refused with its line and field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from decode_tui.cli.config import load
from decode_tui.core.errors import UsageError
from decode_tui.themes import names
from decode_tui.tui.bindings import APP_BINDINGS
from decode_tui.tui.screens.help import HelpScreen

from .fake_decoder import WORDS
from .test_tui import SIZE, in_event_loop, make, settle, text, until

BINDINGS = {b.id: b.key for b in APP_BINDINGS if b.id is not None}


def load_text(tmp_path: Path, content: str) -> Any:
    path = tmp_path / "config.toml"
    path.write_text(content, encoding="utf-8")
    return load(BINDINGS, names(), path)


def test_no_file_is_an_empty_config(tmp_path: Path) -> None:
    config = load(BINDINGS, names(), tmp_path / "absent.toml")
    assert (config.model, config.theme, dict(config.keys), config.path) == (None, None, {}, None)


def test_a_good_file_gives_its_model_theme_and_keys(tmp_path: Path) -> None:
    config = load_text(tmp_path, '# mine\nmodel = "phi3"\ntheme = "presenter"\n\n[keys]\npause = "y"\n'
                                 '"temperature.up" = "ctrl+up"\nhelp = "question_mark, f1, h"\n')
    assert config.model == "phi3" and config.theme == "decode-presenter"
    assert dict(config.keys) == {"pause": "y", "temperature.up": "ctrl+up", "help": "question_mark,f1,h"}


@pytest.mark.parametrize(("content", "line", "says"), [
    ('model = "x"\nmodle = "y"\n', 2, "modle: unknown field"),
    ('theme = "neon"\n', 1, "unknown theme 'neon'"),
    ("model = 3\n", 1, "model: must be a model spec"),
    ('keys = "p"\n', 1, "keys: must be a table"),
    ('[keys]\nfly = "x"\n', 2, "fly: no binding has this id"),
    ('[keys]\n\n"temperature.up" = 5\n', 3, "temperature.up: 5 is not a key"),
    ('[keys]\npause = "ctrl+"\n', 2, "pause: 'ctrl+' is not a key"),
    ('[keys]\npause = "n"\n', 2, "pause: the key 'n' is also bound to step"),
    ('[keys]\nstep = "y"\npause = "y"\n', 2, "step: the key 'y' is also bound to pause"),
])
def test_a_bad_file_names_its_line_and_field(tmp_path: Path, content: str, line: int, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        load_text(tmp_path, content)
    message = caught.value.message
    assert message.startswith(f"{tmp_path / 'config.toml'}, line {line}: ") and says in message, message


def test_a_file_that_is_not_toml_says_where(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"not valid TOML: .*line 2"):
        load_text(tmp_path, 'model = "x"\n[keys\n')


def test_moving_a_key_off_a_binding_frees_it_for_another(tmp_path: Path) -> None:
    config = load_text(tmp_path, '[keys]\nstep = "y"\npause = "n"\n')  # n was step's: free once step moved
    assert dict(config.keys) == {"step": "y", "pause": "n"}


@in_event_loop
async def test_the_app_follows_the_keymap_and_its_help_shows_it() -> None:
    app, _ = make(start_paused=True, keymap={"step": "y", "pause": "n"})
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("y")  # step, moved: the first token of a run started paused
        await until(pilot, lambda: text(app) == WORDS[0])
        await pilot.press("y")
        await until(pilot, lambda: text(app) == "".join(WORDS[:2]))
        await pilot.press("n")  # now pause/resume: the run goes on to the end
        await settle(pilot, app)
        assert text(app) == "".join(WORDS)
        keys = {b.id: b.key for b in app.all_bindings()}
        assert keys["step"] == "y" and keys["pause"] == "n" and keys["quit"] == "q"
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert isinstance(app.screen, HelpScreen)
        shown = {b.id: b.key for b in app.screen.bindings_shown}
        assert shown["step"] == "y"


def test_a_bad_config_file_stops_every_command_before_it_starts(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    config = Path(isolated_env["XDG_CONFIG_HOME"]) / "decode-tui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[keys]\nfly = "x"\n', encoding="utf-8")
    for args in (["generate", "-p", "hi"], ["run"]):
        done = subprocess.run([sys.executable, "-m", "decode_tui.cli", *args], capture_output=True, text=True,
                              env=isolated_env, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 2, (args, done.stderr)
        assert f"{config}, line 2: fly: no binding has this id" in done.stderr and "Traceback" not in done.stderr


def test_the_readmes_example_config_is_valid(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Config file"):]
    example = section[section.index("```toml") + len("```toml"): section.index("```", section.index("```toml") + 7)]
    config = load_text(tmp_path, example)
    assert config.model == "phi3" and config.theme == "decode-presenter" and config.keys["pause"] == "p"
