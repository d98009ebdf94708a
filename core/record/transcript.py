"""Bookkeeping every strategy shares: the tokens emitted so far, their text, the counters, when to stop.

A strategy owns the model calls and decides *which* tokens to emit; the
transcript turns each emitted token into a :class:`TokenEmitted` (with its
text piece and span), decides whether that token ends the run (an EOS id, or
``max_new_tokens`` reached) and builds the :class:`Finished` event. Because
the caller holds the transcript, it can also build a ``cancelled`` result
after it stops consuming a strategy (Ctrl-C), and ask a running strategy to
stop at its next step boundary from another thread (the TUI's worker).

Its clock counts decoding time only: whoever consumes the strategy reports the
time it held it suspended at a yield (:meth:`held`), and no figure counts it.

It knows events and the detokeniser, not models.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, NamedTuple

from .detokenize import Detokenizer
from .events import Finished, FinishReason, Mode, TokenEmitted, TokenSource


class TokenStats(NamedTuple):
    """How likely a token was under the model's raw distribution where it stands (see ``TokenEmitted``)."""

    logprob: float
    entropy: float
    rank: int

    @classmethod
    def of(cls, token: TokenEmitted) -> TokenStats | None:
        """An emitted token's figures, None where it lacks them (a recording made before they existed)."""
        if token.logprob is None or token.entropy is None or token.rank is None:
            return None
        return cls(token.logprob, token.entropy, token.rank)


class Transcript:
    def __init__(self, mode: Mode, prompt_ids: list[int], detokenizer: Detokenizer,
                 eos_token_ids: frozenset[int], max_new_tokens: int) -> None:
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        self.mode = mode
        self.prompt_ids = tuple(prompt_ids)
        self.detokenizer = detokenizer
        self.eos_token_ids = eos_token_ids
        self.max_new_tokens = max_new_tokens
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []  # of the emitted tokens that came with their figures
        self.target_forwards = 0
        # Tokens this run did not decode: kept from a parent branch, and forced by the user. They are emitted like
        # the others but no speed figure counts them (1001 forced tokens in one prefill are not 200 tokens a forward).
        self.kept = 0
        self.forced = 0
        self.finish_reason: FinishReason | None = None
        self._cancel = threading.Event()
        self._started = time.perf_counter()
        self._held_s = 0.0  # time the consumer held the run at a yield (paused, stepping): not decoding

    def start_clock(self) -> None:
        """Start the decoding clock now (the run's first event), with nothing held yet."""
        self._started, self._held_s = time.perf_counter(), 0.0

    def held(self, seconds: float) -> None:
        """The consumer kept the strategy suspended at a yield for ``seconds``: a pause, a step, a lesson's
        pause, slow motion. That time is not decoding time, so no figure counts it."""
        self._held_s += seconds

    @property
    def elapsed_s(self) -> float:
        """Seconds spent decoding so far: the time since the clock started, less the time the run was held."""
        return time.perf_counter() - self._started - self._held_s

    @property
    def text(self) -> str:
        return self.detokenizer.text

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.token_ids)

    def request_cancel(self) -> None:
        """Ask the strategy to stop at its next step boundary (safe from any thread)."""
        self._cancel.set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    @property
    def context(self) -> list[int]:
        """The prompt and every token emitted so far: what the model reads next."""
        return [*self.prompt_ids, *self.token_ids]

    @property
    def decoded(self) -> int:
        """The tokens this run decoded itself: those emitted, less the kept and forced ones."""
        return len(self.token_ids) - self.kept - self.forced

    def emit(self, token_id: int, source: TokenSource = "target", stats: TokenStats | None = None, *,
             given: bool = False) -> TokenEmitted:
        """Record one emitted token, with its figures under the raw distribution when the strategy has them;
        sets ``finish_reason`` when it ends the run. ``given``: a token of the path (kept or forced), not
        decoded here."""
        if self.done:
            raise RuntimeError("a finished transcript takes no more tokens")
        if given:
            if source == "forced":
                self.forced += 1
            else:
                self.kept += 1
        self.token_ids.append(token_id)
        if token_id in self.eos_token_ids:
            self.finish_reason = "eos"
        elif len(self.token_ids) >= self.max_new_tokens:
            self.finish_reason = "length"
        piece = self.detokenizer.add(token_id, final=self.done)
        if stats is not None:
            self.logprobs.append(stats.logprob)
        return TokenEmitted(index=len(self.token_ids) - 1, token_id=token_id, text=piece.text,
                            start=piece.start, end=piece.end, source=source, target_forwards=self.target_forwards,
                            elapsed_s=self.elapsed_s, logprob=stats.logprob if stats else None,
                            entropy=stats.entropy if stats else None, rank=stats.rank if stats else None)

    def likelihood(self) -> dict[str, Any]:
        """The reply's sum and mean log-probability and its perplexity exp(-mean), when every token has one."""
        if not self.token_ids or len(self.logprobs) != len(self.token_ids):
            return {}
        total = math.fsum(self.logprobs)
        mean = total / len(self.logprobs)
        return {"sum_logprob": total, "mean_logprob": mean, "perplexity": math.exp(min(-mean, 700.0))}

    def finished(self, reason: FinishReason | None = None, **extras: Any) -> Finished:
        """The closing event. ``reason`` defaults to what :meth:`emit` decided."""
        final = reason or self.finish_reason or "cancelled"
        self.finish_reason = final
        elapsed = self.elapsed_s
        return Finished(
            mode=self.mode,
            prompt_token_ids=self.prompt_ids,
            token_ids=tuple(self.token_ids),
            text=self.text,
            finish_reason=final,
            new_tokens=len(self.token_ids),
            target_forwards=self.target_forwards,
            elapsed_s=elapsed,
            tokens_per_s=self.decoded / elapsed if elapsed > 0 else 0.0,
            kept_tokens=self.kept or None,
            forced_tokens=self.forced or None,
            **self.likelihood(),
            **extras,
        )
