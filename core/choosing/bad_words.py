"""Bad words: the output's text never contains them, however the tokenizer spells them.

transformers' ``NoBadWordsLogitsProcessor`` bans token *sequences*. A word has many: ``' elder' + 'berry'`` is how the
tokenizer writes " elderberry", but ``' elder' + 'ber' + 'ry'`` spells it too, and the embedded model, asked to repeat
a list with "elderberry" banned that way, wrote the second. No library bans a string whatever its tokenization
(llguidance could, as a grammar, but a grammar is already the user's constraint and the two would have to be merged),
so this processor is written by hand, on the tokens' bytes:

    a token t is banned after output o  ⇔  the bytes of o + t contain a bad word that the bytes of o do not.

Since o does not contain the word (every earlier step banned it), a new occurrence ends inside t: either t's bytes
contain the word, or t's bytes start with the word's tail ``w[j:]`` while o ends with its head ``w[:j]``. Both sets of
tokens are found once per word by a scan of the vocabulary; a step then reads only the last few bytes of each row's
output. Words are matched as written (case and all) in the text after the prompt, anywhere, inside a longer word too:
"cat" bans "category". UTF-8 never starts a character's bytes inside another's, so bytes match where text does.

It knows token ids and their bytes, not tokenizers or models: :func:`token_bytes` makes the table from a tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from transformers.generation.logits_process import LogitsProcessor

from ..execution.transfers import to_device

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def token_bytes(tokenizer: PreTrainedTokenizerBase) -> list[bytes]:
    """Each token id's bytes as it adds them to the text (a special token, such as the end of text, adds none).
    llguidance's view of a fast tokenizer knows them exactly (byte-level BPE's and SentencePiece's alike); a slow
    tokenizer's are read one decode at a time."""
    from ..errors import UsageError
    from .grammar import ll_tokenizer

    try:
        ll = ll_tokenizer(tokenizer, frozenset())
    except UsageError:
        special = set(tokenizer.all_special_ids)
        return [b"" if i in special else str(tokenizer.decode([i])).encode("utf-8") for i in range(len(tokenizer))]
    return [b"" if ll.is_special_token(i) else ll.decode_bytes([i]) for i in range(ll.vocab_size)]


class NoBadWords(LogitsProcessor):
    """Sets to -inf the score of every token that would make the output's text contain one of ``words`` (a new
    tensor; the scores given are untouched). ``prompt_length``: the ids before it are the prompt, which may hold the
    words ("Repeat exactly: apple, elderberry")."""

    def __init__(self, words: Sequence[str], table: Sequence[bytes], prompt_length: int) -> None:
        self.prompt_length = prompt_length
        self.table = table
        self.words = [word.encode("utf-8") for word in words]
        self.longest = max(len(w) for w in self.words)
        # always[w]: tokens whose own bytes hold the word; tails[w][j]: tokens whose bytes start with w[j:], banned
        # after an output that ends with w[:j].
        self.always: list[list[int]] = []
        self.tails: list[dict[int, list[int]]] = []
        for word in self.words:
            self.always.append([t for t, b in enumerate(table) if word in b])
            self.tails.append({j: ids for j in range(1, len(word))
                               if (ids := [t for t, b in enumerate(table) if b.startswith(word[j:])])})

    def banned(self, output: Sequence[int]) -> list[int]:
        """The tokens banned after ``output`` (the ids after the prompt)."""
        end = self._end(output)
        out: list[int] = []
        for word, always, tails in zip(self.words, self.always, self.tails, strict=True):
            out += always
            out += [t for j, ids in tails.items() if end.endswith(word[:j]) for t in ids]
        return out

    def _end(self, output: Sequence[int]) -> bytes:
        """The output's last bytes, at least ``longest - 1`` of them where it has that many."""
        parts: list[bytes] = []
        size = 0
        for token in reversed(output):
            if size >= self.longest - 1:
                break
            piece = self.table[token] if 0 <= token < len(self.table) else b""
            parts.append(piece)
            size += len(piece)
        return b"".join(reversed(parts))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        # input_ids: [B, T] prompt + output; scores: [B, V]
        mask = torch.zeros(scores.shape, dtype=torch.bool)  # [B, V] True: banned
        vocab = scores.shape[-1]
        # Only the output's end is read: a token adds a byte or more (a special token, none; the slack covers a few).
        start = max(self.prompt_length, input_ids.shape[1] - self.longest - 8)
        for row, ids in enumerate(input_ids[:, start:].tolist()):
            banned = [t for t in self.banned(ids) if t < vocab]
            if banned:
                mask[row, banned] = True
        return scores.masked_fill(to_device(mask, scores.device), float("-inf"))
