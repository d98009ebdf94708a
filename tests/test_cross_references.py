"""Every fully qualified cross-reference in the code's docstrings and comments (``:func:`~decode_tui.core.x.f```
and the like) names something that exists: two pointed at ``core.token_tree.tree_forward``, which lives in
``core/execution/tree_attention.py``."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = re.compile(r":(?:func|class|mod|meth|attr|data):`(?:[^`<]*<)?~?(decode_tui(?:\.\w+)+)>?`")


def references() -> list[tuple[str, str]]:
    found = []
    for folder in ("core", "tui", "cli", "lessons"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in REFERENCE.findall(path.read_text(encoding="utf-8")):
                found.append((str(path.relative_to(ROOT)), name))
    return found


def resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_there_are_references_to_check() -> None:
    assert len(references()) > 20


@pytest.mark.parametrize(("where", "name"), references(), ids=lambda x: str(x))
def test_each_reference_names_something_that_exists(where: str, name: str) -> None:
    assert resolves(name), f"{where} refers to {name}, which does not exist"
