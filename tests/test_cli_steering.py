"""``generate --force`` and ``generate --resume TRACE --at N``, in every mode, and what they refuse."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from .test_cli import assert_clean_failure, cli

MODES = ["greedy", "sample", "beam", "speculative", "pld"]


def jsonl(tiny: Path, env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    done = cli("generate", "--model", str(tiny), "-p", "Hello world", "--format", "jsonl", "--max-new-tokens", "12",
               "--seed", "5", *args, env=env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def emitted(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "token_emitted"]


@pytest.mark.parametrize("mode", MODES)
def test_force_begins_the_reply_with_the_text_and_decodes_on(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                              mode: str) -> None:
    events = jsonl(tiny_model_dir, isolated_env, "--mode", mode, "--force", "Once upon")
    assert events[1]["event"] == "branched"
    assert events[1]["forced_text"] == "Once upon" and events[1]["position"] == 0
    tokens = emitted(events)
    forced = events[1]["forced_token_ids"]
    assert [t["token_id"] for t in tokens[: len(forced)]] == forced
    assert all(t["source"] == "forced" and t["logprob"] <= 0 and t["rank"] >= 1 for t in tokens[: len(forced)])
    final = events[-1]
    assert final["text"].startswith("Once upon") and "".join(t["text"] for t in tokens) == final["text"]
    assert final["new_tokens"] > len(forced)
    assert final["perplexity"] >= 1.0
    # The forced tokens were not decoded: they are counted apart, and the speed counts only the decoded ones.
    assert final["forced_tokens"] == len(forced) and "kept_tokens" not in final
    decoded = final["new_tokens"] - len(forced)
    assert final["tokens_per_s"] == pytest.approx(decoded / final["elapsed_s"])


@pytest.mark.parametrize("mode", MODES)
def test_resume_keeps_the_traces_first_tokens_then_this_runs_options_apply(
        tiny_model_dir: Path, isolated_env: dict[str, str], tmp_path: Path, mode: str) -> None:
    trace = tmp_path / "trace.jsonl"
    original = jsonl(tiny_model_dir, isolated_env, "--mode", "greedy")
    trace.write_text("\n".join(json.dumps(e) for e in original) + "\n", encoding="utf-8")
    events = jsonl(tiny_model_dir, isolated_env, "--mode", mode, "--resume", str(trace), "--at", "4",
                   "--force", "!")
    kept = [t["token_id"] for t in emitted(original)[:4]]
    tokens = emitted(events)
    assert [t["token_id"] for t in tokens[:4]] == kept
    assert [t["source"] for t in tokens[:4]] == ["target"] * 4
    assert tokens[4]["source"] == "forced"
    assert events[1]["position"] == 4 and events[1]["parent"] is None
    assert events[-1]["kept_tokens"] == 4 and events[-1]["forced_tokens"] == 1
    if mode in ("greedy", "pld", "speculative"):  # greedy from a greedy path with nothing forced is the trace again
        again = jsonl(tiny_model_dir, isolated_env, "--mode", mode, "--resume", str(trace), "--at", "4")
        assert again[-1]["token_ids"] == original[-1]["token_ids"]


def test_text_output_says_how_likely_the_forced_tokens_were(tiny_model_dir: Path,
                                                             isolated_env: dict[str, str]) -> None:
    done = cli("generate", "--model", str(tiny_model_dir), "-p", "Hello", "--max-new-tokens", "8", "--force", "Hi",
               env=isolated_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hi")
    message = " ".join(done.stderr.split())
    assert "forced" in message and "rank" in message and "perplexity" in message


def test_a_long_forced_text_is_not_counted_as_decoded(tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    """1001 forced tokens read as "1006 tokens ... (201.20 tokens/forward)": they were prefilled in one forward, not
    decoded. The stats line counts the decoded tokens, says the forced ones beside, and summarises a long list."""
    force = "ab " * 300
    done = cli("generate", "--model", str(tiny_model_dir), "-p", "Hello", "--max-new-tokens", "1000", "--force", force,
               "--mode", "greedy", env=isolated_env)
    assert done.returncode == 0, done.stderr
    stats = next(line for line in done.stderr.splitlines() if "target forward" in line)
    decoded = int(stats.split(" · ")[3].split()[0])
    forwards = int(stats.split(" · ")[4].split()[0])
    per_forward = float(re.search(r"\(([\d.]+) tokens/forward\)", stats).group(1))  # type: ignore[union-attr]
    assert "decoded (+" in stats and " forced)" in stats, stats
    assert per_forward == pytest.approx(decoded / forwards, abs=0.01) and per_forward <= 1.0, stats
    assert max(len(line) for line in done.stderr.splitlines()) < 1000, "a long forced text is summarised"


def refused_before_loading(done: Any, code: int, *fragments: str) -> None:
    """Refused as assert_clean_failure says, and before the model loaded or warmed up: a steering error is told in
    a second, not after the 11-28 s a load and a warm-up take."""
    assert_clean_failure(done, code, *fragments)
    assert "weights onto" not in done.stderr and "Warming up" not in done.stderr, done.stderr


def test_bad_steering_is_refused_with_what_to_do(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    model = ["generate", "--model", str(tiny_model_dir), "--max-new-tokens", "8"]
    assert_clean_failure(cli(*model, "--force", "", env=isolated_env), 2, "--force needs")
    assert_clean_failure(cli(*model, "--at", "3", env=isolated_env), 2, "--resume FILE")
    refused_before_loading(cli(*model, "--force", "ab " * 20, env=isolated_env), 2, "nothing would be left to decode",
                           "Raise --max-new-tokens above")
    refused_before_loading(cli(*model, "--regex", "[0-9]+", "--force", "ab", env=isolated_env), 2,
                           "does not allow the forced token", "at the start of the output")
    assert_clean_failure(cli(*model, "--resume", str(tmp_path / "none.jsonl"), "--at", "1", env=isolated_env), 2,
                         "does not exist")
    trace = tmp_path / "t.jsonl"
    done = cli(*model, "-p", "Hello", "--format", "jsonl", "--mode", "sample", "--seed", "1", env=isolated_env)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    trace.write_text("\n".join(json.dumps(e) for e in events), encoding="utf-8")
    refused_before_loading(cli(*model, "--resume", str(trace), "--at", "99", env=isolated_env), 2, "0 to 8")
    refused_before_loading(cli(*model, "--resume", str(trace), "--at", "-1", env=isolated_env), 2, "0 to 8")
    # From the trace's own count, before even the tokenizer: a model that is not on disk is not looked for first.
    refused_before_loading(cli("generate", "--model", str(tmp_path / "no-model"), "--resume", str(trace), "--at",
                               "500", env=isolated_env), 2, "--at 500 is outside", "0 to 8")
    refused_before_loading(cli(*model, "-p", "Other prompt", "--resume", str(trace), "--at", "2", env=isolated_env), 2,
                         "another prompt")
    name = events[0]["model"]
    events[0]["model"] = "someone-else"
    trace.write_text("\n".join(json.dumps(e) for e in events), encoding="utf-8")
    refused_before_loading(cli(*model, "--resume", str(trace), "--at", "2", env=isolated_env), 2, "someone-else")
    events[0]["model"] = name
    del events[0]["params"]["seed"]
    trace.write_text("\n".join(json.dumps(e) for e in events), encoding="utf-8")
    refused_before_loading(cli(*model, "--resume", str(trace), "--at", "2", env=isolated_env), 2,
                         "does not say its seed")
