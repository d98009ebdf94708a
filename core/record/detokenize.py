"""Incremental detokenisation: one text piece per token, never half a character.

A byte-level BPE token (SmolLM2, GPT-2, Qwen) or a SentencePiece byte-fallback
token (``<0xE6>`` in Llama, Phi-3) can end in the middle of a UTF-8 sequence;
decoding it alone gives U+FFFD. :class:`Detokenizer` gives each token the text
it completes: ``""`` while a character is unfinished, the whole character with
the token that completes it. The pieces concatenate exactly to
``tokenizer.decode(ids, skip_special_tokens=..., clean_up_tokenization_spaces=False)``
(the clean-up is a WordPiece-era post-process that decoder-only models do not use).

For byte-level BPE the work is done by ``tokenizers``' own ``DecodeStream``.
Two cases need a hand-written path, which diffs successive decodes of the
whole sequence (quadratic in the output length, but exact):

- slow (Python) tokenizers, which have no stream;
- SentencePiece byte fallback. Its ``ByteFallback`` decoder turns a *run* of
  ``<0xNN>`` tokens into text as a whole, or into one U+FFFD per byte when
  the run is not valid UTF-8, so a later byte token can rewrite text that an
  earlier one completed (``<0x01>`` alone is "\x01", ``<0x01><0x81>`` is
  "\ufffd\ufffd"). ``DecodeStream`` emits such text early and then no
  longer matches ``decode``; we hold back a trailing run of byte tokens
  until the run is closed by another token or the end.

This module knows tokenizers, not models or strategies.
"""

from __future__ import annotations

import codecs
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class Piece:
    """A token's share of the output text and its character span in it."""

    text: str
    start: int
    end: int


class Detokenizer:
    """Turns token ids, one at a time, into text pieces (see the module docstring)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, skip_special_tokens: bool = True,
                 use_stream: bool | None = None) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.text = ""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        byte_fallback = bool(getattr(getattr(backend, "model", None), "byte_fallback", False))
        if use_stream and (backend is None or byte_fallback):
            raise ValueError("use_stream=True needs a fast tokenizer without byte fallback")
        if use_stream is None:
            use_stream = backend is not None and not byte_fallback
        self._backend: Any = backend
        self._byte_ids = _byte_token_ids(tokenizer) if byte_fallback else frozenset()
        # Special tokens that decode() skips vanish before the ByteFallback
        # decoder runs, so they do not close a run of byte tokens.
        self._transparent = self._byte_ids | (_special_ids(tokenizer) if skip_special_tokens else frozenset())
        self._stream = None
        if use_stream:
            from tokenizers.decoders import DecodeStream

            self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)

    def decode(self, ids: list[int]) -> str:
        """The reference text for ``ids``, which the pieces add up to."""
        if self._backend is not None:
            # What a fast tokenizer's decode does without its clean-up, less its walk over every id in Python to
            # convert it (a third of a beam step's decoding of its beams and hypotheses, a few each step)
            return str(self._backend.decode(ids, skip_special_tokens=self.skip_special_tokens))
        return str(self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens,
                                         clean_up_tokenization_spaces=False))

    def add(self, token_id: int, final: bool = False) -> Piece:
        """The piece for the next token. ``final=True`` also flushes any unfinished character."""
        self.ids.append(token_id)
        piece = (self._stream.step(self._backend, token_id) or "") if self._stream is not None else self._diff()
        if final:
            piece += self._remainder(len(self.text) + len(piece))
        start = len(self.text)
        self.text += piece
        return Piece(piece, start, len(self.text))

    def _diff(self) -> str:
        stable = len(self.ids)
        if self._byte_ids:
            while stable > 0 and self.ids[stable - 1] in self._transparent:
                stable -= 1  # an open run of byte tokens may still turn into U+FFFDs
        full = self.decode(self.ids[:stable])
        if full.endswith(REPLACEMENT) or not full.startswith(self.text):
            return ""  # wait until the character is complete
        return full[len(self.text):]

    def _remainder(self, emitted: int) -> str:
        """What the reference decode has beyond what was emitted, less an unfinished last character: a run cut
        by its length limit inside a character's bytes ends before that character, not with the U+FFFD the
        reference decode writes for it (its token ids are still in the run's token_ids)."""
        full = self.decode(self.ids)
        return full[emitted:].rstrip(REPLACEMENT) if len(full) > emitted else ""


def _byte_token_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """The ids of SentencePiece's ``<0x00>``..``<0xFF>`` byte-fallback tokens."""
    vocab = tokenizer.get_vocab()
    return frozenset(i for b in range(256) if (i := vocab.get(f"<0x{b:02X}>")) is not None)


def _special_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return frozenset(int(i) for i, tok in decoder.items() if getattr(tok, "special", False)) | frozenset(
        tokenizer.all_special_ids)


def token_label(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    """A readable label for a single token, for candidate lists.

    Decoding a lone token that is part of a multi-byte character gives
    U+FFFD; then the label shows its bytes: the whole characters as text and
    the part of a character as hex (``' ⟨F0 9F⟩'`` for byte-level BPE's
    ``ĠðŁ``, the start of an emoji), or the raw vocabulary entry where its
    bytes cannot be read off it.
    """
    text = str(tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False))
    if REPLACEMENT in text or text == "":
        raw = tokenizer.convert_ids_to_tokens(token_id)
        if raw is None:
            return text
        data = _token_bytes(str(raw))
        return _bytes_label(data) if data is not None else str(raw)
    return text


def _token_bytes(raw: str) -> bytes | None:
    """The bytes a vocabulary entry stands for: SentencePiece's byte fallback (``<0xE6>``) or byte-level BPE's
    printable stand-ins (GPT-2's table, as transformers' converter has it); None for anything else."""
    if len(raw) == 6 and raw.startswith("<0x") and raw.endswith(">"):
        try:
            return bytes([int(raw[3:5], 16)])
        except ValueError:
            return None
    table = _printable_bytes()
    if all(c in table for c in raw):
        return bytes(table[c] for c in raw)
    return None


@functools.cache
def _printable_bytes() -> dict[str, int]:
    """Byte-level BPE's printable stand-in for each byte, read backwards (built once)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}


def _bytes_label(data: bytes) -> str:
    """Whole UTF-8 characters as text, the bytes of an unfinished one as hex: ``' ⟨F0 9F⟩'``."""
    return data.decode("utf-8", errors=_HEX_BYTES)


def _hex_bytes(err: UnicodeError) -> tuple[str, int]:
    """A codec error handler: the bytes that do not decode, as ``⟨E6 97⟩``."""
    assert isinstance(err, UnicodeDecodeError)
    return "⟨" + " ".join(f"{b:02X}" for b in err.object[err.start : err.end]) + "⟩", err.end


_HEX_BYTES = "decode-tui-hex-bytes"
codecs.register_error(_HEX_BYTES, _hex_bytes)


class TokenLabels:
    """:func:`token_label` with a cache: candidate lists ask for the same few hundred tokens over and over."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        label = self._cache.get(token_id)
        if label is None:
            label = self._cache[token_id] = token_label(self.tokenizer, token_id)
        return label
