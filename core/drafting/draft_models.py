"""Draft models: loading one for a target (another model, or a draft made from the target's own weights) and
checking that the two speak one vocabulary.

It knows models, tokenizers and the drafts made from the target (:mod:`.target_drafts`); drafting itself is
:class:`~decode_tui.core.drafting.model_drafter.ModelDrafter`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from ..errors import UsageError
from ..model.acquire import Progress, ensure, quiet
from ..params import TargetDraft, target_draft
from . import draft_layers, target_drafts
from .model_drafter import ModelDrafter

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from ..model.loading import LoadedModel


@dataclass(frozen=True)
class DraftModel:
    """A draft model ready to draft: the model, the vocabulary it shares with the target, and what it is."""

    model: PreTrainedModel
    vocab_size: int  # the logits both models speak: rows past it are never drafted nor verified
    spec: str  # ``self``, ``int4``, ``layers:N`` ... or the draft model's spec, for messages
    # A draft made from the target takes the target's keys and values of the prompt, kept in this dtype (its own
    # compute dtype); None for another model, whose layers differ.
    target_kv: torch.dtype | None = None
    # Said once to the user: the default draft could not run on this device and this one replaced it, or this one
    # runs here but costs more than a target step.
    note: str | None = None
    # Queue each draft step's pass before the last drafted token is read back (ModelDrafter.propose): off by
    # default, where it measured slower on a GPU; a benchmark's control.
    run_ahead: bool = False

    def drafter(self, confidence_threshold: float, eos_token_ids: frozenset[int], tree_budget: int = 0,
                ) -> ModelDrafter:
        """A drafter over this model for one run."""
        return ModelDrafter(self.model, self.vocab_size, confidence_threshold, eos_token_ids, self.target_kv,
                            tree_budget, self.run_ahead)


def preparing(spec: str) -> str:
    """What :func:`load_draft` does for ``spec``, in the words it reports first."""
    made = target_draft(spec)
    if made is not None:
        return f"Preparing the draft model ({made.describe()})"
    return f"Preparing the draft model ({spec})"


def load_draft(target: LoadedModel, spec: str, trust_remote_code: bool = False,
               progress: Progress = quiet, named: bool = True,
               tokenizer: PreTrainedTokenizerBase | None = None) -> DraftModel:
    """The draft model for ``spec``, sharing the target's vocabulary.

    ``self``: the target's own weights (greedy acceptance is then 100 %);
    ``int4``, ``int8``, ``layers:N`` and their combinations: built from the target, sharing what is not
    quantised (:mod:`~decode_tui.core.drafting.target_drafts`); anything else: a model spec, fetched like the target
    (:func:`~decode_tui.core.model.acquire.ensure`) and loaded on the target's device and dtype, whose tokenizer must
    have the target's vocabulary.

    ``named``: the user asked for this draft. A quantised draft whose kernel the device lacks is then refused
    (a UsageError); when it was only the default, the target itself drafts instead, and the returned draft's
    ``note`` says so in one line: speculative decoding runs on every device by default. ``tokenizer``: a draft
    model's own, where the caller loaded it already (to check it before the target's weights load).
    """
    width = target.model.get_output_embeddings().weight.shape[0]
    if spec == "self":
        return DraftModel(target.model, min(width, len(target.tokenizer)), spec, target.model.dtype)
    made = target_draft(spec)
    if made is not None:
        why = None if named else target_drafts.unavailable(made, target.model)
        if why is not None:
            note = (f"the default draft ({spec}) cannot run here: {why}; the target drafts for itself "
                    "(--draft self). --draft names another.")
            return replace(load_draft(target, "self"), note=note)
        target_drafts.check(made, target.model, spec)
        progress(preparing(spec))
        model = target_drafts.build(target.model, made)
        notes = [_dear_on(made, target.device), _unfused_on(spec, made, model, target.device)]
        return DraftModel(model, min(width, len(target.tokenizer)), spec, target_drafts.kv_dtype(target.model, made),
                          note=" ".join(note for note in notes if note) or None)
    from ..model.loading import load_model, load_tokenizer

    resolved = ensure(spec, progress, flag="--draft")
    if tokenizer is None:
        tokenizer = load_tokenizer(resolved, trust_remote_code)
    check_same_vocabulary(target.tokenizer, tokenizer)  # from the tokenizers alone, before the weights load
    progress(f"Loading the draft model {resolved.display_name}")
    draft = load_model(resolved, device=str(target.device), dtype=str(target.dtype).removeprefix("torch."),
                       trust_remote_code=trust_remote_code, tokenizer=tokenizer)
    draft_width = draft.model.get_output_embeddings().weight.shape[0]
    return DraftModel(draft.model, shared_vocab_size(target.tokenizer, draft.tokenizer, width, draft_width), spec)


def _dear_on(made: TargetDraft, device: torch.device) -> str | None:
    """A note where a draft runs but costs more than it could save on this device: torch's int8 weight-only
    kernel on CUDA takes many times a bf16 product's time (BENCHMARKS.md), so an int8 draft there costs several
    target steps a token."""
    if made.bits == 8 and device.type == "cuda":
        return ("the int8 draft runs on torch's int8 weight-only CUDA kernel, which is many times slower than "
                "a bf16 product: each draft step costs more than a target step. --draft int4 is the "
                "cheap draft on a GPU.")
    return None


def _unfused_on(spec: str, made: TargetDraft, model: PreTrainedModel, device: torch.device) -> str | None:
    """A note where a draft made from the target kept some of transformers' modules that a fused form would
    replace (a check at its build found the fused form computing otherwise, or could not run it): on a GPU each
    such module launches several kernels more a step, and a small model's step costs about its kernels, so its
    c rises there. Said on CUDA only: on a CPU the arithmetic, not the launches, is the step's cost."""
    if device.type != "cuda":
        return None
    kept = draft_layers.kept(model, join_products=made.bits is not None)
    if not kept:
        return None
    what = ", ".join(f"{k} of its {n} {kind}" for kind, (k, n) in kept.items())
    return (f"the {spec} draft keeps transformers' forward for {what}, where a check at its build found the fused "
            "form computing otherwise: each launches more kernels a step, which a GPU pays for in the draft's "
            "cost (benchmarks/fused_check.py shows each check).")


def shared_vocab_size(target: PreTrainedTokenizerBase, draft: PreTrainedTokenizerBase, target_logits: int,
                      draft_logits: int) -> int:
    """The vocabulary both models speak, or a UsageError if their tokenizers differ.

    Compares the tokenizers' vocabularies, not ``config.vocab_size``: embeddings
    are often padded (Qwen2.5 0.5B and 7B have different widths but one vocabulary).
    """
    check_same_vocabulary(target, draft)
    return min(len(target.get_vocab()), target_logits, draft_logits)


def check_same_vocabulary(target: PreTrainedTokenizerBase, draft: PreTrainedTokenizerBase) -> None:
    """A UsageError, with a few of the differing entries, where the draft's tokenizer has another vocabulary."""
    a, b = target.get_vocab(), draft.get_vocab()
    if a != b:
        differing = sorted(set(a.items()) ^ set(b.items()), key=lambda kv: kv[1])[:3]
        raise UsageError(
            f"The draft model's tokenizer differs from the target's ({len(b)} vs {len(a)} tokens; e.g. "
            f"{', '.join(f'{t!r}->{i}' for t, i in differing)}). Speculative decoding needs the same vocabulary: "
            "pick a draft from the same model family, or use --mode pld."
        )
