"""Token recycling's rows keyed otherwise, simulated on greedy's own text: tokens a forward on the open prompts.

Greedy's text for each prompt of ../cpu-2026-12-06-graft/warm-first.jsonl (128 tokens) and open.jsonl (96), and the
target's top-8 after every position of it (one teacher-forced forward). Then, for each open prompt, rounds as
recycling runs them: a template tree of ``budget`` nodes (recycling.template) grown from the rows, the longest
path that greedy's text follows kept, and the rows of the kept path's tokens written (a real round writes every
node's, kept or not: this simulation keeps only the kept path's, so its figures are lower than a real run's, and
are for comparing the variants with one another). Cold: the rows start empty (the prompt's are written first);
warm: the warm-first texts' rows are written before.

Variants: rows keyed by one token (the paper's), or by the last two where that pair was read (else by one); a row
overwritten by the last read (the paper's), or merged with what it held (interleaved; the old first guess kept
second).

Then, where the round's last token has no row (so recycling takes a plain step), how often the next token is a
stand-in row's guess: the context's most frequent tokens (the output so far), or the row of the token whose input
embedding is nearest (cosine) among those with a row.

    python benchmarks/results/cpu-2026-12-06-keys/keys.py     # from the repository root, the venv active
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from decode_tui.core.drafting.recycling import template
from decode_tui.core.model.loading import encode_prompt

MODEL = Path.home() / ".cache/decode-tui/models/smollm2"
GRAFT = Path(__file__).resolve().parent.parent / "cpu-2026-12-06-graft"
Text = tuple[list[int], int, list[list[int]]]  # tokens (prompt and output), the prompt's length, top-8 after each


def texts(tokenizer: object, model: object, file: Path, new: int) -> list[Text]:
    out = []
    for line in file.read_text().splitlines():
        ids = encode_prompt(tokenizer, json.loads(line)["prompt"], True)  # type: ignore[arg-type]
        with torch.inference_mode():
            tokens = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False)[0].tolist()  # type: ignore[attr-defined]
            top = model(torch.tensor([tokens])).logits[0].float().topk(8, -1).indices.tolist()  # type: ignore[operator]
        out.append((tokens, len(ids), top))
    return out


def merged(old: list[int] | None, new: list[int], how: str) -> list[int]:
    if old is None or how == "overwrite":
        return new
    if how == "interleaved":
        row: list[int] = []
        for pair in zip(new, old, strict=True):
            for t in pair:
                if t not in row:
                    row.append(t)
        return row[:8]
    return ([new[0]] + [old[0]] * (old[0] != new[0]) + [t for t in new[1:] if t != old[0]])[:8]  # old first, second


def simulate(warm: list[Text], open_: list[Text], budget: int, keys: int, how: str) -> list[float]:
    one: dict[int, list[int]] = {}
    two: dict[tuple[int, int], list[int]] = {}

    def write(tokens: list[int], top: list[list[int]], i: int) -> None:
        one[tokens[i]] = merged(one.get(tokens[i]), top[i], how)
        if i > 0:
            two[(tokens[i - 1], tokens[i])] = merged(two.get((tokens[i - 1], tokens[i])), top[i], how)

    def row(before: int, token: int) -> list[int] | None:
        return two[(before, token)] if keys == 2 and (before, token) in two else one.get(token)

    for tokens, _, top in warm:
        for i in range(len(tokens)):
            write(tokens, top, i)
    shape = template(budget, 6, 8)
    result = []
    for tokens, prompt, top in open_:
        for i in range(prompt):
            write(tokens, top, i)
        at, forwards = prompt - 1, 0
        while at < len(tokens) - 1:
            node, before, token, kept = -1, tokens[at - 1], tokens[at], 0
            while at + 1 + kept < len(tokens):
                guesses = row(before, token)
                if guesses is None:
                    break
                want = tokens[at + 1 + kept]
                child = next((i for i, (parent, rank) in enumerate(shape)
                              if parent == node and rank < len(guesses) and guesses[rank] == want), None)
                if child is None:
                    break
                node, before, token, kept = child, token, want, kept + 1
            for i in range(at, at + kept + 1):
                write(tokens, top, i)
            at, forwards = at + kept + 1, forwards + 1
        result.append((len(tokens) - prompt) / forwards)
    return result


def stand_ins(warm: list[Text], open_: list[Text], embeddings: torch.Tensor) -> list[tuple[int, ...]]:
    """Per open prompt: positions with no row, and how often the next token was the context's most frequent token,
    among its 3 most frequent, the nearest row's first guess, among its first 3 (rows of the kept path only)."""
    unit = embeddings / embeddings.norm(dim=-1, keepdim=True)  # [V, d]
    counts: list[tuple[int, ...]] = []
    for tokens, prompt, top in open_:
        rows = {t: r for text, _, tops in warm for t, r in zip(text, tops, strict=True)}
        rows |= {tokens[i]: top[i] for i in range(prompt)}
        none = frequent = frequent3 = nearest = nearest3 = 0
        for at in range(prompt - 1, len(tokens) - 1):
            token, want = tokens[at], tokens[at + 1]
            if token not in rows:
                none += 1
                common = [t for t, _ in Counter(tokens[prompt : at + 1]).most_common(3)]
                frequent += bool(common) and common[0] == want
                frequent3 += want in common
                keys = torch.tensor(list(rows))
                guesses = rows[int(keys[(unit[keys] @ unit[token]).argmax()])]
                nearest += guesses[0] == want
                nearest3 += want in guesses[:3]
            rows[token] = top[at]
        counts.append((len(tokens) - prompt, none, frequent, frequent3, nearest, nearest3))
    return counts


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16).eval()
    warm = texts(tokenizer, model, GRAFT / "warm-first.jsonl", 128)
    open_ = texts(tokenizer, model, GRAFT / "open.jsonl", 96)
    print("tokens a forward: story, how-to, explanation")
    for start, first in (("cold", []), ("warm", warm)):
        for budget in (5, 7, 15):
            cells = [" ".join(f"{x:.2f}" for x in simulate(first, open_, budget, keys, how))
                     for keys, how in ((1, "overwrite"), (2, "overwrite"), (1, "interleaved"), (1, "kept second"))]
            print(f"{start} {budget:2d} nodes | one token: {cells[0]} | two tokens: {cells[1]} | interleaved: "
                  f"{cells[2]} | old first kept second: {cells[3]}", flush=True)
    print("after a token with no row: positions, no row, next = most frequent / in 3 most frequent / nearest row's "
          "first guess / in its first 3")
    embeddings = model.get_input_embeddings().weight.detach().float()
    for start, first in (("cold", []), ("warm", warm)):
        for name, counts in zip(("story", "how-to", "explanation"), stand_ins(first, open_, embeddings), strict=True):
            print(f"{start} {name:>11}: " + " ".join(str(c) for c in counts), flush=True)


if __name__ == "__main__":
    main()
