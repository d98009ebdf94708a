"""Constrained decoding: a JSON schema, a regex or a Lark grammar, compiled by llguidance, as a logits processor.

llguidance (the matcher vLLM, SGLang and llama.cpp use) compiles a constraint against the tokenizer once, then
at each step gives the set of tokens the grammar allows after the output so far, as a bitmask (tens of
microseconds for the embedded model's 49k tokens). :class:`GrammarMask` applies it as a transformers
``LogitsProcessor``: ``generate`` takes it as ``logits_processor``, and the strategies put it where
``generate`` does (after its own processors, before the warpers), so constrained greedy here equals
``generate`` with the same processor, token for token.

The processor follows the ids it is given rather than being told each token: it compares each row with what
its matcher has consumed, rolls the matcher back to where they part and consumes the rest (llguidance's
matchers roll back, which drafting needs). That lets one object serve a plain loop; a verification that
processes each drafted prefix in turn and then drops the rejected tokens; and beam search, whose rows are
reordered every step (a row's matcher is a copy of the one of the row it grew from). A loop that knows its
next output on the host before the logits are back (the autoregressive one, whose next pass a GPU runs while
the host goes on) hands it to :meth:`GrammarMask.prepare`, so the mask is computed during the pass.

:class:`~decode_tui.core.params.Constraint` says what to compile, :mod:`decode_tui.core.choosing.constraints` checks it
(without torch, so a front end refuses a bad one at once); this module compiles it for a tokenizer and applies it.
It knows tokens and grammars, not models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llguidance
import llguidance.hf
import numpy as np
import torch
from transformers.generation.logits_process import LogitsProcessor

from ..errors import UsageError
from ..params import Constraint
from ..record.path import common_prefix
from .constraints import grammar_text

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_TOKENIZERS: dict[int, llguidance.LLTokenizer] = {}


def ll_tokenizer(tokenizer: PreTrainedTokenizerBase, eos_token_ids: frozenset[int]) -> llguidance.LLTokenizer:
    """llguidance's view of a Hugging Face fast tokenizer, built once per tokenizer (it takes about 0.3 s)."""
    key = id(tokenizer)
    if key not in _TOKENIZERS:
        eos = sorted(eos_token_ids) or None
        try:
            _TOKENIZERS[key] = llguidance.hf.from_tokenizer(tokenizer, eos_token=eos)  # type: ignore[arg-type]
        except ValueError as err:
            raise UsageError(f"Constrained decoding needs a fast tokenizer: {err}.") from None
    return _TOKENIZERS[key]


@dataclass(frozen=True)
class _Ready:
    """Masks computed ahead: for ids of ``length`` (then length + 1 ... one row each, or all rows at once when
    ``batch``), as ``words`` on the device ([n, W]), with ``allowed`` and ``detail`` for each (row 0's when
    ``batch``)."""

    length: int
    words: torch.Tensor
    rows: list[tuple[int, str | None]]
    batch: bool


@dataclass
class _Row:
    matcher: llguidance.LLMatcher
    consumed: list[int] = field(default_factory=list)


class Grammar:
    """A constraint compiled for one tokenizer: makes matchers, checks token sequences."""

    def __init__(self, constraint: Constraint, tokenizer: PreTrainedTokenizerBase,
                 eos_token_ids: frozenset[int]) -> None:
        self.constraint = constraint
        self.text = grammar_text(constraint)
        self.tokenizer = ll_tokenizer(tokenizer, eos_token_ids)
        self.vocab_size = self.tokenizer.vocab_size
        self.eos_token_ids = eos_token_ids
        matcher = self.matcher()
        if matcher.is_error():
            raise UsageError(f"The {constraint.describe()} is invalid: {matcher.get_error().strip()}")

    def matcher(self) -> llguidance.LLMatcher:
        return llguidance.LLMatcher(self.tokenizer, self.text, log_level=0)

    def complete(self, token_ids: list[int]) -> bool:
        """Whether ``token_ids`` (an output, with its EOS if it has one) satisfy the constraint in full."""
        matcher = self.matcher()
        body = token_ids[:-1] if token_ids and token_ids[-1] in self.eos_token_ids else token_ids
        return bool(matcher.consume_tokens(body) and matcher.is_accepting())

    def allows(self, token_ids: list[int]) -> int:
        """How many of ``token_ids``, from the start of the output, the grammar accepts."""
        return self.matcher().validate_tokens(token_ids)


class GrammarMask(LogitsProcessor):
    """Sets the score of every token the grammar forbids after each row's output to -inf (a new tensor).

    ``prompt_length``: the ids before it are the prompt, which the grammar does not read. After each call,
    ``allowed`` holds how many tokens the grammar allowed for row 0 and ``detail`` says where it stands.
    """

    def __init__(self, grammar: Grammar, prompt_length: int) -> None:
        self.grammar = grammar
        self.prompt_length = prompt_length
        self.rows: list[_Row] = [_Row(grammar.matcher())]
        self.allowed = grammar.vocab_size
        self.detail: str | None = None
        # prepare() computes masks ahead; False makes it a no-op (a benchmark compares the two).
        self.ahead = True
        # What prepare() or prepare_rows() computed, for the calls that follow.
        self._ready: _Ready | None = None
        self._words = (grammar.vocab_size + 31) // 32  # W: 32-bit words of the bitmask, bit i of word w token 32w+i
        self._bits: dict[torch.device, torch.Tensor] = {}  # [32] per device, for unpacking words there
        # Page-locked staging for the words' copy to a GPU, two in turn: a copy still queued from one is never
        # overwritten by the next prepare() (the step in between read its token back, which waits for it). Each
        # holds the most rows asked so far (a verification's vary round by round): page-locking is slow, done
        # only when it grows.
        self._staging: list[torch.Tensor] = []

    def prepare(self, output: list[int], device: torch.device, drafted: Sequence[int] = ()) -> None:
        """Compute the masks for the step after ``output`` (one row: the ids after the prompt), and after each
        prefix of ``drafted`` (a verification's k + 1 positions), before the calls that apply them; start
        copying them to ``device``.

        The masks need the output on the host, and reading a device's ids back waits for every pass queued
        before the read. A loop that has its tokens on the host and queues the forward pass before it reads the
        logits (the autoregressive loop's next step on a GPU, a verification) calls this in between: the host
        computes the masks while the device runs the pass. What goes to the device is the bitmask itself (49k
        tokens in 6 KB), unpacked there. The calls that follow, for ids of these lengths, apply them without
        reading the ids back."""
        if not self.ahead:
            return
        outputs = [[*output, *drafted[:i]] for i in range(len(drafted) + 1)]
        rows = []
        words = torch.empty((len(outputs), self._words), dtype=torch.int32)
        for i, row in enumerate(outputs):  # one at a time: each prefix's matcher follows on from the last
            words[i : i + 1] = self._host_words([row])
            rows.append((self.allowed, self.detail))
        self._ready = _Ready(self.prompt_length + len(output), self._to_device(words, device), rows, batch=False)

    def prepare_rows(self, outputs: list[list[int]], device: torch.device) -> None:
        """:meth:`prepare` for one call over several rows of the same length (beam search's next step, one row a
        beam, in the order the call's ids will have)."""
        if not self.ahead or not outputs:
            return
        words = self._host_words(outputs)
        self._ready = _Ready(self.prompt_length + len(outputs[0]), self._to_device(words, device),
                             [(self.allowed, self.detail)], batch=True)

    def _to_device(self, words: torch.Tensor, device: torch.device) -> torch.Tensor:
        if device.type != "cuda":
            return words.to(device)
        if not self._staging or self._staging[0].shape[0] < words.shape[0]:
            rows = max(words.shape[0], 2 * self._staging[0].shape[0] if self._staging else 1)
            self._staging = [torch.empty((rows, self._words), dtype=torch.int32).pin_memory() for _ in range(2)]
        self._staging.reverse()
        staged = self._staging[0][: words.shape[0]]
        staged.copy_(words)
        return staged.to(device, non_blocking=True)  # queued, not waited for

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        # Prepared rows serve the calls that follow in order (lengths L, L + 1 ... one row each, or one call of
        # all rows), each once; any other call drops them, so a mask is never applied to ids it was not computed
        # for (a draft model's calls between two verifications have lengths of their own).
        ready, self._ready = self._ready, None
        rows, length = input_ids.shape
        words = None
        if ready is not None and length == ready.length:
            if ready.batch and rows == ready.words.shape[0]:
                words = ready.words
                self.allowed, self.detail = ready.rows[0]
            elif not ready.batch and rows == 1:
                words = ready.words[:1]
                self.allowed, self.detail = ready.rows[0]
                if ready.words.shape[0] > 1:
                    self._ready = _Ready(length + 1, ready.words[1:], ready.rows[1:], batch=False)
        if words is None:
            words = self._host_words(input_ids[:, self.prompt_length :].tolist()).to(scores.device)  # read back
        return scores.masked_fill(~self._unpacked(words, scores.shape[-1]), float("-inf"))

    def _unpacked(self, words: torch.Tensor, vocab: int) -> torch.Tensor:
        """[B, W] words -> [B, vocab] allowed, on the words' device (a few small kernels there)."""
        bits = self._bits.get(words.device)
        if bits is None:
            bits = self._bits[words.device] = torch.arange(32, dtype=torch.int32, device=words.device)
        allowed = ((words.unsqueeze(-1) >> bits) & 1).flatten(1).bool()  # [B, 32 W]
        if allowed.shape[1] < vocab:  # logits rows past the tokenizer's vocabulary are padding: never allowed
            allowed = torch.cat([allowed, allowed.new_zeros(allowed.shape[0], vocab - allowed.shape[1])], 1)
        return allowed[:, :vocab]

    def _host_words(self, outputs: list[list[int]]) -> torch.Tensor:
        """[B, W] the bitmask of the tokens the grammar allows after each output, on the host; ``allowed`` and
        ``detail`` say it for row 0."""
        self._ready = None  # the matchers move on: what was prepared is for other outputs
        # Past an end-of-text token the output is over (a verification's row after a drafted EOS is never
        # used): the grammar reads up to it and, like a finished run, allows nothing but the end again.
        ended = [self._ends(output) for output in outputs]
        self.rows = self._follow([output[:end] for output, end in zip(outputs, ended, strict=True)])
        bitmask = torch.zeros((len(self.rows), self._words), dtype=torch.int32)
        for b, row in enumerate(self.rows):
            if row.matcher.is_error():  # a row that left the grammar (a beam fed a forbidden token): no way on
                continue
            # What llguidance.torch.fill_next_token_bitmask does, without importing its compiled kernel.
            words = bitmask[b]
            row.matcher.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * words.element_size())
        as_unsigned = bitmask.numpy().view(np.uint32)  # the same memory: bit 31 without int32's sign in the way
        for b, (output, end) in enumerate(zip(outputs, ended, strict=True)):
            if end < len(output):
                as_unsigned[b] = 0
                for eos in self.grammar.eos_token_ids:
                    as_unsigned[b, eos // 32] |= np.uint32(1 << (eos % 32))
        self.allowed = _popcount(as_unsigned[0])
        self.detail = self._where(self.rows[0].matcher)
        return bitmask

    def _ends(self, output: list[int]) -> int:
        """Where ``output``'s first end-of-text token is, else its length."""
        return next((i for i, token in enumerate(output) if token in self.grammar.eos_token_ids), len(output))

    def _follow(self, outputs: list[list[int]]) -> list[_Row]:
        """A matcher per row that has consumed exactly that row's output: the old row that shares the longest
        start with it, rolled back to where they part (copied first where two new rows grow from it)."""
        taken: set[int] = set()
        rows = []
        for output in outputs:
            best = max(range(len(self.rows)),
                       key=lambda r: (common_prefix(self.rows[r].consumed, output), r not in taken))
            row = self.rows[best]
            if best in taken:
                row = _Row(row.matcher.deep_copy(), list(row.consumed))
            taken.add(best)
            rows.append(row)
        for row, output in zip(rows, outputs, strict=True):
            common = common_prefix(row.consumed, output)
            if common < len(row.consumed):
                row.matcher.rollback(len(row.consumed) - common)
                del row.consumed[common:]
            if len(output) > common:
                row.matcher.consume_tokens(output[common:])
                row.consumed.extend(output[common:])
        return rows

    def _where(self, matcher: llguidance.LLMatcher) -> str:
        """Where the output stands in the grammar, in a line: what it must write next, or whether it may end."""
        if matcher.is_error():
            return "left the grammar"
        forced = matcher.compute_ff_bytes().decode("utf-8", errors="replace")
        allows = f"allows {self.allowed:,} of {self.grammar.vocab_size:,} tokens"
        if matcher.is_stopped():
            return f"{allows}: complete, only the end of text"
        if forced:
            return f"{allows}: must write {forced!r} next"
        if matcher.is_accepting():
            return f"{allows}: complete here, or may go on"
        return allows

    def allowed_prefix(self, output: list[int], token_ids: list[int]) -> int:
        """How many of ``token_ids``, written after ``output``, the grammar takes before it refuses one."""
        self.rows = self._follow([output])
        return int(self.rows[0].matcher.validate_tokens(token_ids))


def _popcount(words: np.ndarray) -> int:
    """How many bits are set in ``words`` (uint32): numpy's own popcount where it has one (2.0 on)."""
    count = getattr(np, "bitwise_count", None)
    if count is not None:
        return int(count(words).sum())
    return int(np.unpackbits(words.view(np.uint8)).sum())


def check_path(grammar: Grammar, tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], kept: int) -> None:
    """A UsageError where ``grammar`` refuses one of a path's tokens (its first ``kept`` from a trace, the rest
    forced): such a token could never be decoded under it. Needs the tokenizer only, so a front end checks it
    before the model loads."""
    allowed = grammar.allows(list(ids))
    if allowed < len(ids):
        piece = tokenizer.decode(list(ids[allowed : allowed + 1]))
        where = "forced" if allowed >= kept else "kept"
        before = tokenizer.decode(list(ids[:allowed]))
        at = f"after {before!r}" if before else "at the start of the output"
        raise UsageError(f"The {grammar.constraint.describe()} does not allow the {where} token {piece!r} {at}. "
                         "Force a token it allows, or decode without the constraint.")
