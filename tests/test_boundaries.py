"""Architecture rules checked in fresh interpreters: the core is headless, the CLI starts without torch."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import decode_tui.core

UI_PACKAGES = ("textual", "rich", "typer")
HEAVY_PACKAGES = ("torch", "transformers")


def modules_loaded_by(code: str, cwd: Path | None = None) -> set[str]:
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=cwd,
                          timeout=120)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_every_core_module_imports_without_any_ui_package() -> None:
    names = [m.name for m in pkgutil.walk_packages(decode_tui.core.__path__, "decode_tui.core.")]
    assert "decode_tui.core.strategies.autoregressive" in names and len(names) > 10
    loaded = modules_loaded_by("\n".join(f"import {n}" for n in names))
    assert set(names) <= loaded
    assert not top_level(loaded) & set(UI_PACKAGES)


def run_cli_in_process(*args: str) -> str:
    return (
        "import sys\n"
        f"sys.argv = ['decode-tui', *{list(args)!r}]\n"
        "from decode_tui.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
    )


def test_help_imports_neither_torch_nor_transformers() -> None:
    for args in (["--help"], ["generate", "--help"], ["models", "--help"], ["generate", "--top-p", "7"]):
        loaded = top_level(modules_loaded_by(run_cli_in_process(*args)))
        assert not loaded & set(HEAVY_PACKAGES), args


def test_the_app_draws_before_torch_is_imported() -> None:
    """The app's modules load without torch (the decoder thread imports it with the model), so its first frame
    is drawn at once: importing torch first kept the terminal blank for about 1.5 s."""
    for module in ("decode_tui.tui.app", "decode_tui.tui.race_app"):
        loaded = top_level(modules_loaded_by(f"import {module}"))
        assert not loaded & set(HEAVY_PACKAGES), module


def test_the_package_installs_under_one_name(tmp_path: Path) -> None:
    """No generic top-level `core` or `tui` package leaks into site-packages."""
    code = ("import importlib.util, json\n"
            "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in "
            "['core', 'tui', 'themes', 'cli', 'lessons', 'decode_tui.core', 'decode_tui.tui', 'decode_tui.themes', "
            "'decode_tui.lessons']}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    found = json.loads(done.stdout)
    assert found == {"core": False, "tui": False, "themes": False, "cli": False, "lessons": False,
                     "decode_tui.core": True, "decode_tui.tui": True, "decode_tui.themes": True,
                     "decode_tui.lessons": True}


def _imports_within(package: Path, name: str) -> dict[str, set[str]]:
    """Each module of ``package`` (named ``name``) and the modules of the same package it imports, from its AST."""
    import ast

    graph: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        module = ".".join((name, *path.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
        is_package = path.name == "__init__.py"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:  # relative: resolve it against this module
                base = module.split(".")[: len(module.split(".")) - node.level + is_package]
                target = ".".join(base + ([node.module] if node.module else []))
                found.add(target)
                # `from . import forward` imports the module `forward`, not only the package: each name may be one
                # (a name that is not a module is left out below, as it is in no graph)
                found |= {f"{target}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
        graph[module] = {t for t in found if t.startswith(name + ".") or t == name}
    return graph


def test_the_ui_and_cli_modules_import_each_other_in_one_direction() -> None:
    """No import cycles among decode_tui's modules (an app and its palette once imported each other), counting the
    imports inside functions too (core/execution/forward.py and core/execution/background_compile.py imported
    each other, one side inside functions, and `from . import x` hid it)."""
    root = Path(decode_tui.core.__file__).resolve().parent.parent
    graph: dict[str, set[str]] = {}
    for folder in ("core", "tui", "cli", "lessons"):
        graph |= _imports_within(root / folder, f"decode_tui.{folder}")
    merged = {m: {t for t in targets if t in graph} for m, targets in graph.items()}
    for m in graph:
        for t in graph[m]:  # `from ..core.events import X` resolves to the module; `from . import x` to a package
            if t not in graph and f"{t}.__init__" not in graph:
                merged[m].discard(t)
    assert "decode_tui.tui.commands" in merged["decode_tui.tui.app"], "the graph sees the app's own imports"

    def cycle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in merged.get(node, ()):
                if nxt == start:
                    return [*path, nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = [c for m in merged if (c := cycle_from(m)) is not None]
    assert not cycles, f"import cycles: {cycles[:3]}"


# core's groups and loose modules, lowest first: each may import only what stands at its own level or below
# (docs/ARCHITECTURE.md, "Layers"). Modules of one level may import each other within their group.
CORE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "toml_lines", "startup", "token_tree"),  # foundations: no decoding knowledge
    ("record",),  # what a run says: events, transcript, traces, paths
    ("modes", "params", "live"),  # what a run is asked to do
    ("model",),  # finding and loading weights
    ("execution",),  # how a forward runs
    ("choosing",),  # turning logits into a token: stages, grammar, bad words
    ("drafting",),  # who proposes drafts, and replays of them
    ("strategies",),  # the algorithms
    ("run",),  # a run, built from its config
    ("warmup",),  # the first runs after loading
    ("analysis",),  # what-if, compare, race, calibrate
)
LOOSE_AT_MOST = 12


def _unit(module: str) -> str:
    """The group (core's subpackage) or loose module a module of decode_tui.core belongs to."""
    return module.removeprefix("decode_tui.core.").split(".")[0]


def _out_of_layer(graph: dict[str, set[str]], groups: set[str]) -> list[str]:
    """The imports of ``graph`` (core's modules) that go up a level, or across to another group of the same level."""
    level = {unit: i for i, units in enumerate(CORE_LAYERS) for unit in units}
    found = []
    for m, targets in graph.items():
        for t in targets:
            if "decode_tui.core" in (m, t):
                continue
            a, b = _unit(m), _unit(t)
            if level[b] > level[a] or (a != b and level[a] == level[b] and a in groups):
                found.append(f"{m} -> {t}")
    return sorted(found)


def test_core_groups_form_layers() -> None:
    """Every import in core, those inside functions and under TYPE_CHECKING too, goes to its own level or one below:
    no group imports one that imports it back, and a reader can learn the core bottom up."""
    core = Path(decode_tui.core.__file__).resolve().parent
    graph = _imports_within(core, "decode_tui.core")
    level = {unit: i for i, units in enumerate(CORE_LAYERS) for unit in units}
    units = {_unit(m) for m in graph if m != "decode_tui.core"}
    assert units == set(level), f"every group and loose module has a level: {sorted(units ^ set(level))}"
    groups = {p.name for p in core.iterdir() if (p / "__init__.py").exists()}
    assert not _out_of_layer(graph, groups), _out_of_layer(graph, groups)
    loose = [p.stem for p in core.glob("*.py") if p.stem != "__init__"]
    assert len(loose) <= LOOSE_AT_MOST, f"{len(loose)} modules loose in core/: {sorted(loose)}"


def test_an_import_up_a_level_or_across_a_level_is_caught() -> None:
    """The negative control: record importing execution (up), and two groups of one level importing each other."""
    graph = {"decode_tui.core.record.events": {"decode_tui.core.execution.forward", "decode_tui.core.errors"},
             "decode_tui.core.drafting.drafters": {"decode_tui.core.choosing.sampling"}}
    assert _out_of_layer(graph, {"record", "drafting"}) == ["decode_tui.core.record.events -> "
                                                            "decode_tui.core.execution.forward"]
    saved = CORE_LAYERS
    try:
        globals()["CORE_LAYERS"] = (*saved[:5], ("choosing", "drafting"), *saved[7:])
        across = "decode_tui.core.drafting.drafters -> decode_tui.core.choosing.sampling"
        assert across in _out_of_layer(graph, {"choosing", "drafting"})
    finally:
        globals()["CORE_LAYERS"] = saved
