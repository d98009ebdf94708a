"""The user's config file: a default model, a default theme, and a keymap that moves the app's keys.

``~/.config/decode-tui/config.toml`` (under ``$XDG_CONFIG_HOME`` when set;
``DECODE_TUI_CONFIG`` names another file)::

    model = "phi3"            # used when --model is not given
    theme = "presenter"       # used when --theme is not given

    [keys]                    # binding id = key(s), as posting's keymap
    pause = "p"
    "temperature.up" = "ctrl+up"
    help = "question_mark,f1,h"

Binding ids are listed in the app's help (``?``) and in the README. Options
on the command line win over the file. A file that is not valid TOML, has an
unknown field, names an unknown binding or theme, or leaves two bindings on
one key is refused with its path, the line and the field, and the command
exits 2: a keymap that silently half-applied would leave a teacher in front
of a class with keys that do nothing.

It reads the file and checks it against the binding ids and theme names it
is given; it knows nothing about the app itself.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import UsageError
from ..core.toml_lines import line_of

FIELDS = ("model", "theme", "keys")
# A Textual key name (ctrl+t, question_mark, f1, space, P) or one printable character; several joined with commas.
KEY = re.compile(r"^([A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*|[!-~])$")


@dataclass(frozen=True)
class UserConfig:
    model: str | None = None
    theme: str | None = None
    keys: Mapping[str, str] = field(default_factory=dict)  # binding id -> key(s)
    path: Path | None = None  # the file it came from, None when there is none


def config_path() -> Path:
    named = os.environ.get("DECODE_TUI_CONFIG")
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "decode-tui" / "config.toml"


def load(bindings: Mapping[str, str], themes: Mapping[str, str], path: Path | None = None) -> UserConfig:
    """The config at ``path`` (default :func:`config_path`), checked; an empty one when there is no file.

    ``bindings``: every binding id and its default key(s); ``themes``: the theme names. A bad file raises
    UsageError naming the file, the line and the field.
    """
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if os.environ.get("DECODE_TUI_CONFIG") and path == config_path():
            # Named on purpose: a typo in the name must not leave a class with the default keys, unsaid.
            raise UsageError(f"DECODE_TUI_CONFIG names the config file {path}, which does not exist. Create it, "
                             "or unset DECODE_TUI_CONFIG to use ~/.config/decode-tui/config.toml.") from None
        return UserConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read the config file {path}: {exc}. Fix or remove it.") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"The config file {path} is not valid TOML: {exc}. Fix or remove it.") from None

    def bad(name: str, problem: str) -> UsageError:
        return UsageError(f"{path}, line {line_of(text, name)}: {name}: {problem}")

    for name in data:
        if name not in FIELDS:
            raise bad(name, f"unknown field. The file takes {', '.join(FIELDS)} (see the README's 'Config file').")
    model, theme, keys = data.get("model"), data.get("theme"), data.get("keys", {})
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise bad("model", "must be a model spec in quotes, e.g. model = \"smollm2\".")
    if theme is not None:
        if not isinstance(theme, str):
            raise bad("theme", "must be a theme name in quotes, e.g. theme = \"presenter\".")
        full = theme if theme.startswith("decode-") else f"decode-{theme}"
        if full not in themes:
            raise bad("theme", f"unknown theme {theme!r}. Use one of: "
                               f"{', '.join(n.removeprefix('decode-') for n in themes)}.")
        theme = full
    if not isinstance(keys, dict):
        raise bad("keys", "must be a table: a [keys] line, then binding-id = \"key\" lines.")
    for binding_id, key in keys.items():
        if binding_id not in bindings:
            raise bad(binding_id, f"no binding has this id. The ids are: {', '.join(sorted(bindings))}.")
        parts = key.split(",") if isinstance(key, str) else []
        if not parts or not all(KEY.match(part.strip()) for part in parts):
            raise bad(binding_id, f"{key!r} is not a key. Write a key name in quotes: \"p\", \"ctrl+t\", "
                                  "\"question_mark\", \"f1\"; several separated by commas.")
    _check_clashes(path, text, bindings, keys)
    return UserConfig(model=model, theme=theme, keys={k: ",".join(p.strip() for p in v.split(","))
                                                       for k, v in keys.items()}, path=path)


def _check_clashes(path: Path, text: str, bindings: Mapping[str, str], keys: Mapping[str, str]) -> None:
    """Refuse a keymap that leaves two bindings on one key (one of them would never fire)."""
    owner: dict[str, str] = {}
    for binding_id, default in bindings.items():
        for key in (keys.get(binding_id) or default).split(","):
            key = key.strip()
            other = owner.setdefault(key, binding_id)
            if other != binding_id:
                moved = binding_id if binding_id in keys else other
                raise UsageError(f"{path}, line {line_of(text, moved)}: {moved}: the key {key!r} is also bound to "
                                 f"{other if moved == binding_id else binding_id}. Move one of them to another key.")
