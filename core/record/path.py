"""A run that starts from a path it did not choose itself: the tokens decided before it decodes.

A run may begin with tokens already decided (:class:`Path`: kept from a parent branch, then forced by the user);
:func:`~decode_tui.core.execution.prefill.prefill` feeds them with the prompt. Here too: the checks that a path
leaves something to decode and that forced text has tokens, and where two token lists part.

It knows token ids and tokenizers' text; it does not know logits, caches, which strategy runs or why a path was
chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .events import TokenSource
from .transcript import TokenStats


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids ``a`` and ``b`` share: where a run, a cache or a matcher parts from another."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def forced_tokens(tokenizer: Any, model: str, text: str) -> tuple[int, ...]:
    """``text``'s tokens, to be forced as the next part of the reply; refused when empty or when the tokenizer
    cannot give the text back (an unknown character would silently become another one)."""
    if not text:
        raise UsageError("Nothing to force: give the text the reply should go on with.")
    ids = tuple(int(t) for t in tokenizer.encode(text, add_special_tokens=False))
    if not ids:
        raise UsageError(f"{text!r} gives no tokens with {model}'s tokenizer. Force some visible text.")
    back = tokenizer.decode(list(ids))
    if back != text:
        raise UsageError(f"{model}'s tokenizer cannot represent {text!r} exactly (its tokens read back as "
                         f"{back!r}). Force text made of characters it knows.")
    return ids


@dataclass(frozen=True)
class Path:
    """Tokens decided before a run decodes: ``kept`` from a parent (with the sources they had there and, where
    known, their figures), then ``forced`` by the user. ``branch``/``parent`` name the branch in its tree."""

    kept: tuple[int, ...] = ()
    kept_sources: tuple[TokenSource, ...] = ()
    kept_stats: tuple[TokenStats | None, ...] = ()
    forced: tuple[int, ...] = ()
    forced_text: str = ""
    # The forced tokens' figures where the caller knows them (a candidate picked from the parent's own
    # distribution at that position): then the branch need not recompute the position before them.
    forced_stats: tuple[TokenStats | None, ...] = ()
    branch: int = 0
    parent: int | None = None

    def __post_init__(self) -> None:
        if len(self.kept_sources) not in (0, len(self.kept)):
            raise ValueError("kept_sources needs one source per kept token")
        if len(self.kept_stats) not in (0, len(self.kept)):
            raise ValueError("kept_stats needs one entry per kept token")
        if len(self.forced_stats) > len(self.forced):
            raise ValueError("forced_stats holds more entries than there are forced tokens")

    @property
    def sources(self) -> tuple[TokenSource, ...]:
        """Each path token's source: the kept tokens' (``target`` where not given), then ``forced``."""
        target: TokenSource = "target"
        forced: TokenSource = "forced"
        return (self.kept_sources or (target,) * len(self.kept)) + (forced,) * len(self.forced)

    @property
    def ids(self) -> tuple[int, ...]:
        return self.kept + self.forced

    def known(self, j: int) -> TokenStats | None:
        """The figures of the path's ``j``-th token when they were given (computed by the parent)."""
        if j < len(self.kept):
            return self.kept_stats[j] if j < len(self.kept_stats) else None
        f = j - len(self.kept)
        return self.forced_stats[f] if f < len(self.forced_stats) else None


def check_room(path: Path, prompt_length: int, max_new_tokens: int, context: int | None, model: str) -> None:
    """A UsageError where ``path`` leaves nothing to decode: it fills ``max_new_tokens``, or with the prompt the
    model's ``context``."""
    decided = len(path.ids)
    if decided >= max_new_tokens:
        raise UsageError(f"The path is {decided} tokens long, but max_new_tokens is {max_new_tokens}: nothing "
                         f"would be left to decode. Raise --max-new-tokens above {decided}.")
    if context is not None and decided and prompt_length + decided >= context:
        raise UsageError(f"The prompt ({prompt_length} tokens) and the branch's {decided} decided tokens make "
                         f"{prompt_length + decided}, but {model} reads at most {context} tokens: nothing would be "
                         "left to decode. Branch earlier, or shorten the prompt.")
