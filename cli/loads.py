"""The models a command needs: fetched, checked before their weights load, loaded with each phase named.

What the tokenizers alone can tell is refused before any weights load (minutes for a big model on a CPU): the
steering (``--force``, ``--resume``), a prompt too long for the model, a draft model of another vocabulary. The
loading itself is :mod:`decode_tui.core.model.loading`'s and :mod:`decode_tui.core.drafting.drafters`'; this module
puts it on the console.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.modes import DRAFT_MODEL_MODES
from ..core.params import DecodeConfig, check_device_map
from .console import status, stderr
from .options import DecodingOptions
from .steering import Steering, build_path

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..core.drafting.draft_models import DraftModel
    from ..core.model.loading import LoadedModel
    from ..core.model.registry import ResolvedModel
    from ..core.record.path import Path


def ensure_model(spec: str, flag: str = "--model") -> ResolvedModel:
    """The files for ``spec`` (core/model/acquire.py); the embedded model's first fetch shows its progress. ``flag``:
    the option the spec came from, which an error names."""
    from ..core.model.acquire import ensure, fetching

    what = fetching(spec)
    if what is None:
        return ensure(spec, flag=flag)
    with status(what) as progress:
        return ensure(spec, progress, flag)


def check_placement(device: str, device_map: str | None) -> None:
    """A UsageError for a placement this machine cannot give, before anything loads: a device map with a device,
    and a named accelerator that is not here (``--device cuda:7`` on a machine with one GPU, or none). ``auto`` and
    ``cpu`` always exist, so only a named accelerator pays torch's import for the check."""
    check_device_map(device, device_map)
    if device_map is None and device not in ("auto", "cpu"):
        from ..core.model.loading import resolve_device

        resolve_device(device)


def refuse_before_the_app(options: DecodingOptions, prompt: str, config: DecodeConfig) -> None:
    """What ``run`` refuses before its app opens, as ``generate`` does before its weights load: a model or draft model
    that is not on disk, a prompt too long for the model, a draft model of another vocabulary, and ``--fast`` in a
    dtype the CPU does not compile exactly. The app would open on the error, and end with status 0.

    Only a prompt that could be too long is tokenized: that takes transformers' import, seconds, which a short
    prompt's first paint should not wait for; a draft model named by the user is always checked. The embedded model
    before its first fetch is fetched, and checked, in the app: here only its cache is."""
    from ..core.model.registry import EMBEDDED_ALIASES, declared_context_length, is_available, resolve, surely_fits

    def on_disk(spec: str, flag: str) -> ResolvedModel | None:
        if spec in EMBEDDED_ALIASES and not is_available(spec):
            from ..core.model.embedded import check_cache

            check_cache(spec)  # fetched in the app: its cache must take it
            return None
        return resolve(spec, flag)

    if config.fast and options.dtype.value not in ("auto", "float32") and options.device in ("auto", "cpu"):
        from ..core.model.loading import resolve_device, resolve_dtype

        resolve_dtype(options.dtype.value, resolve_device(options.device), compiled=True)  # refused on a CPU
    resolved = on_disk(options.model_name, "--model")
    draft_spec = config.draft.model_spec if config.mode in DRAFT_MODEL_MODES else None
    draft = on_disk(draft_spec, "--draft") if draft_spec is not None else None
    if resolved is None:
        return
    long = not surely_fits(prompt, declared_context_length(resolved))
    checks = [what for what, due in (("the prompt's length", long),
                                     (f"the draft model {draft_spec}'s vocabulary", draft is not None)) if due]
    if not checks:
        return
    with status(f"Checking {' and '.join(checks)} with {resolved.display_name}'s tokenizer"):
        from ..core.model.loading import load_tokenizer

        tokenizer = load_tokenizer(resolved, options.trust_remote_code)
        checked_before_the_weights(resolved, tokenizer, prompt, config, options.trust_remote_code, draft)


def checked_before_the_weights(resolved: ResolvedModel, tokenizer: PreTrainedTokenizerBase, prompt: str,
                               config: DecodeConfig, trust_remote_code: bool, draft: ResolvedModel | None,
                               ) -> PreTrainedTokenizerBase | None:
    """What the tokenizers alone refuse: ``prompt`` (read as ``config`` reads it) longer than the context of the model
    ``tokenizer`` belongs to, and a ``draft`` model of another vocabulary. Returns the draft model's tokenizer, loaded
    for the check, so that the draft's load need not load it again."""
    # Imported here: torch's start-up is the load's first named phase, not this module's import.
    from ..core.model.loading import check_prompt_fits, configured_context_length, encode_prompt, load_tokenizer

    chat = config.use_chat and bool(getattr(tokenizer, "chat_template", None))
    context = configured_context_length(resolved, trust_remote_code)
    check_prompt_fits(len(encode_prompt(tokenizer, prompt, chat)), context, resolved.display_name)
    if draft is None:
        return None
    from ..core.drafting.draft_models import check_same_vocabulary

    draft_tokenizer = load_tokenizer(draft, trust_remote_code)
    check_same_vocabulary(tokenizer, draft_tokenizer)
    return draft_tokenizer


def steer(options: DecodingOptions, steering: Steering, prompt: str, config: DecodeConfig,
          ) -> tuple[Path, PreTrainedTokenizerBase]:
    """The path ``steering`` asks for, built with the model's tokenizer alone, so that a trace of another model or
    prompt, an --at out of range or a --force too long is refused in a second, before the model loads and warms
    up; the tokenizer goes on to the load."""
    from ..core.model.loading import configured_context_length, encode_prompt, load_tokenizer

    resolved = ensure_model(options.model_name)
    with status(f"Checking the steering with {resolved.display_name}'s tokenizer"):
        tokenizer = load_tokenizer(resolved, options.trust_remote_code)
        chat = config.use_chat and bool(getattr(tokenizer, "chat_template", None))
        prompt_ids = encode_prompt(tokenizer, prompt, chat)
        context = configured_context_length(resolved, options.trust_remote_code)
        path = build_path(steering, resolved.display_name, tokenizer, prompt_ids, config.max_new_tokens, context)
        if config.constraint is not None:  # a forced token the constraint forbids could never be decoded
            from ..core.choosing.grammar import Grammar, check_path

            eos = frozenset({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else ())
            check_path(Grammar(config.constraint, tokenizer, eos), tokenizer, path.ids, len(path.kept))
        return path, tokenizer


def with_draft_model(*configs: DecodeConfig) -> DecodeConfig | None:
    """The first of ``configs`` whose mode drafts with a draft model (its DrafterSpec.draft_model), which then must be
    loaded; None if none does."""
    return next((c for c in configs if c.mode in DRAFT_MODEL_MODES), None)


def load_models(options: DecodingOptions, prompt: str, config: DecodeConfig, speculative: DecodeConfig | None,
                tokenizer: PreTrainedTokenizerBase | None = None) -> tuple[LoadedModel, DraftModel | None]:
    """The target model (with ``tokenizer``, where it was loaded already), and the draft model ``speculative``'s
    settings name (those of a run whose mode drafts with one, :func:`with_draft_model`). Between the target's
    tokenizer and its weights the load checks ``prompt`` (read as ``config`` reads it) against the model's context and
    a draft model's vocabulary against the target's, so neither waits for the weights."""
    draft_spec = speculative.draft.model_spec if speculative is not None else None
    # A draft model that is missing is refused before any load.
    draft_files = ensure_model(draft_spec, "--draft") if draft_spec is not None else None
    resolved = ensure_model(options.model_name)
    draft_tokenizer: list[PreTrainedTokenizerBase] = []  # the draft model's, checked here and loaded with it

    def check(target: PreTrainedTokenizerBase) -> None:
        checked = checked_before_the_weights(resolved, target, prompt, config, options.trust_remote_code, draft_files)
        if checked is not None:
            draft_tokenizer.append(checked)

    lm = load(resolved, options.device, options.dtype.value, options.trust_remote_code, options.device_map_name,
              tokenizer, check, compiled=options.fast)
    draft = load_draft(lm, speculative.draft.draft, options.trust_remote_code, speculative.draft.named,
                       next(iter(draft_tokenizer), None)) if speculative is not None else None
    return lm, draft


def load(resolved: ResolvedModel, device: str, dtype: str, trust_remote_code: bool,
         device_map: str | None = None, tokenizer: PreTrainedTokenizerBase | None = None,
         check: Callable[[PreTrainedTokenizerBase], None] | None = None, compiled: bool = False) -> LoadedModel:
    """The model, each phase named on the console (torch's start-up too); ``check`` and ``compiled`` (its steps
    compiled: ``--fast``) as in core/model/loading.py."""
    with status(f"Loading {resolved.display_name}") as progress:
        from ..core.model.acquire import drive
        from ..core.startup import importing_torch

        # torch's own start-up, named on the progress line
        torch_s = drive(importing_torch(), lambda line: progress(f"Loading {resolved.display_name}: {line}"))
        from ..core.model.loading import load_model

        lm = load_model(resolved, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                        tokenizer=tokenizer, device_map=device_map, progress=progress, check=check,
                        compiled=compiled)
    if torch_s:
        lm.timings["torch"] = round(torch_s, 3)
    return lm


def load_draft(lm: LoadedModel, spec: str, trust_remote_code: bool, named: bool = True,
               tokenizer: PreTrainedTokenizerBase | None = None) -> DraftModel:
    """The draft model for ``spec`` (``tokenizer``: a draft model's, where it was loaded already), and its note."""
    from ..core.drafting import draft_models as drafters

    with status(drafters.preparing(spec)) as progress:
        draft = drafters.load_draft(lm, spec, trust_remote_code, progress, named=named, tokenizer=tokenizer)
    if draft.note is not None:
        stderr().print(f"decode-tui: note: {draft.note}")
    return draft
