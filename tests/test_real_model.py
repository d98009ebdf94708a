"""The embedded SmolLM2-135M-Instruct, through the whole pipeline, against transformers' generate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from decode_tui.core.params import DecodeConfig, DraftParams, SamplingParams
from decode_tui.core.record.events import DraftProposed, Finished, Mode, TokenEmitted
from decode_tui.core.run import Run

pytestmark = pytest.mark.real_model

PROMPTS = [
    "What is the capital of France?",
    "Summarise in one sentence: The Eiffel Tower was built for the 1889 World's Fair in Paris and was at first "
    "criticised by artists, but it became the most recognisable symbol of the city.",
    "Rename the variable x to count in this code:\nx = 0\nfor item in items:\n    x += 1\nprint(x)",
    "Write a haiku about autumn leaves, then explain it. 日本語で一言も。",
]


def hf_new_tokens(lm: Any, prompt_ids: list[int], max_new: int, **kwargs: Any) -> list[int]:
    ids = torch.tensor([prompt_ids])
    out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                            eos_token_id=sorted(lm.eos_token_ids), pad_token_id=lm.tokenizer.pad_token_id, **kwargs)
    return [int(t) for t in out[0, len(prompt_ids):]]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_equals_generate_on_the_real_model(smollm2: Any, prompt: str) -> None:
    run = Run(smollm2, prompt, DecodeConfig(max_new_tokens=48))
    events = list(run.events())
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert list(finished.token_ids) == hf_new_tokens(smollm2, run.prompt_ids, 48, do_sample=False)
    assert finished.text == smollm2.tokenizer.decode(list(finished.token_ids), skip_special_tokens=True)
    assert "".join(e.text for e in events if isinstance(e, TokenEmitted)) == finished.text


def test_sampling_with_a_seed_equals_generate_on_the_real_model(smollm2: Any) -> None:
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, repetition_penalty=1.1)
    run = Run(smollm2, PROMPTS[3], DecodeConfig(mode="sample", max_new_tokens=40, sampling=params, seed=17))
    finished = list(run.events())[-1]
    assert isinstance(finished, Finished)
    torch.manual_seed(17)
    expected = hf_new_tokens(smollm2, run.prompt_ids, 40, do_sample=True, temperature=0.8, top_k=40, top_p=0.95,
                             repetition_penalty=1.1)
    assert list(finished.token_ids) == expected


def test_a_chat_answer_stops_at_the_turn_end(smollm2: Any) -> None:
    finished = list(Run(smollm2, PROMPTS[0], DecodeConfig(max_new_tokens=64)).events())[-1]
    assert isinstance(finished, Finished)
    assert finished.finish_reason == "eos"
    assert smollm2.tokenizer.convert_ids_to_tokens(finished.token_ids[-1]) == "<|im_end|>"
    assert "Paris" in finished.text and "<|im_end|>" not in finished.text


def test_the_default_command_runs_the_embedded_model(smollm2: Any) -> None:
    """``generate`` with no options gives ``generate``'s greedy tokens on the model as ``--dtype auto`` loads it
    here (bfloat16, prepared, on a CPU with AMX or AVX512-BF16; else the float32 of the fixture)."""
    from decode_tui.core.model.loading import load_model, resolve_dtype
    from decode_tui.core.model.registry import resolve

    script = str(Path(sys.executable).parent / "decode-tui")
    done = subprocess.run([script, "generate", "--prompt", PROMPTS[0], "--format", "jsonl", "--max-new-tokens",
                           "24"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout.splitlines()[-1])
    auto = resolve_dtype("auto", torch.device("cpu"))
    lm = smollm2 if auto == smollm2.dtype else load_model(resolve("smollm2"), device="cpu")
    run = Run(lm, PROMPTS[0], DecodeConfig(max_new_tokens=24))
    assert final["token_ids"] == hf_new_tokens(lm, run.prompt_ids, 24, do_sample=False)


@pytest.mark.parametrize("mode", ["pld", "speculative"])
def test_drafting_modes_equal_plain_greedy_on_the_real_model(smollm2: Any, mode: Mode) -> None:
    prompt = PROMPTS[1]  # input-grounded: the summary copies from the passage, so lookups match
    greedy = list(Run(smollm2, prompt, DecodeConfig(max_new_tokens=48)).events())[-1]
    drafted = list(Run(smollm2, prompt, DecodeConfig(mode=mode, max_new_tokens=48)).events())[-1]
    assert isinstance(greedy, Finished) and isinstance(drafted, Finished)
    assert drafted.token_ids == greedy.token_ids
    assert drafted.drafted and drafted.accepted  # the drafts were used, not just made
    assert drafted.target_forwards < greedy.target_forwards


def test_recycling_copies_a_code_edit_as_prompt_lookup_does_on_the_real_model(smollm2: Any) -> None:
    """Cold, recycling's matrix holds no long copy; its retrieval rounds copy the code from the prompt (several
    tokens a round, as prompt lookup's do), and the text is greedy's."""
    prompt = PROMPTS[2]
    greedy = list(Run(smollm2, prompt, DecodeConfig(max_new_tokens=48)).events())[-1]
    draft = DraftParams(cold=True, recycle_keep=False)
    events = list(Run(smollm2, prompt, DecodeConfig(mode="recycle", max_new_tokens=48, draft=draft)).events())
    drafted = events[-1]
    assert isinstance(greedy, Finished) and isinstance(drafted, Finished)
    assert drafted.token_ids == greedy.token_ids
    copied = [e for e in events if isinstance(e, DraftProposed) and e.match_start is not None]
    assert copied and max(len(e.token_ids) for e in copied) >= 8
    assert drafted.target_forwards < greedy.target_forwards / 2


@pytest.mark.parametrize("mode", ["greedy", "pld", "beam"])
def test_a_bad_word_never_reaches_the_text_however_the_model_spells_it(smollm2: Any, mode: Mode) -> None:
    """Banned as token runs (generate's bad_words_ids: ' elder' + 'berry'), the model wrote ' elder' 'ber' 'ry'.
    Without the ban it writes the word (the control), with it the text never holds it, in every mode."""
    prompt = "Repeat exactly: apple, banana, elderberry, fig."
    plain = list(Run(smollm2, prompt, DecodeConfig(mode=mode, max_new_tokens=24)).events())[-1]
    assert isinstance(plain, Finished)
    assert "elderberry" in plain.text, plain.text
    banned = DecodeConfig(mode=mode, max_new_tokens=24, sampling=SamplingParams(bad_words=("elderberry",)))
    finished = list(Run(smollm2, prompt, banned).events())[-1]
    assert isinstance(finished, Finished)
    assert "elderberry" not in finished.text, finished.text
    if mode != "beam":  # (beam search finds another answer altogether)
        assert "banana" in finished.text  # still repeating the list, around the word
    token_runs = [[smollm2.tokenizer.encode(w, add_special_tokens=False)] for w in ("elderberry", " elderberry")]
    if mode == "greedy":  # the ban generate's processor makes is spelt around
        hf = hf_new_tokens(smollm2, Run(smollm2, prompt, banned).prompt_ids, 24, do_sample=False,
                           bad_words_ids=[run for runs in token_runs for run in runs])
        assert "elderberry" in smollm2.tokenizer.decode(hf), smollm2.tokenizer.decode(hf)
