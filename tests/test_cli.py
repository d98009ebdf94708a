"""The real ``decode-tui`` console script: the JSON contract, and a clear message and exit code for each bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from decode_tui.core.errors import EXIT_INTERRUPTED, EXIT_MODEL_UNAVAILABLE, EXIT_USAGE, UsageError
from decode_tui.core.model.registry import ALIASES

from .serving import SCRIPT

ROOT = Path(__file__).resolve().parents[1]


def auto_cpu_dtype() -> str:
    """What ``--dtype auto`` loads on this machine's CPU: bfloat16 where its cores multiply it in hardware, else
    float32."""
    from decode_tui.core.model.loading import resolve_dtype

    return str(resolve_dtype("auto", torch.device("cpu"))).removeprefix("torch.")


def cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, input=stdin, timeout=120)


def assert_clean_failure(done: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    message = " ".join(done.stderr.split())  # rich wraps long lines
    for fragment in fragments:
        assert fragment in message, message


def test_version() -> None:
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.startswith("decode-tui ")


def test_jsonl_contract(tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    done = cli("generate", "--model", str(tiny_model_dir), "--prompt", "Hello world", "--format", "jsonl",
               "--max-new-tokens", "12", "--mode", "sample", "--seed", "3", env=isolated_env)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert all("event" in e for e in events)
    assert events[0]["event"] == "started"
    emitted = [e for e in events if e["event"] == "token_emitted"]
    final = events[-1]
    assert final["event"] == "finished"
    for key in ("mode", "prompt_token_ids", "token_ids", "text", "finish_reason", "new_tokens", "target_forwards",
                "elapsed_s", "tokens_per_s"):
        assert key in final
    assert final["mode"] == "sample" and final["finish_reason"] in {"eos", "length"}
    assert [e["token_id"] for e in emitted] == final["token_ids"] and final["new_tokens"] == len(emitted)
    assert "".join(e["text"] for e in emitted) == final["text"]
    again = cli("generate", "--model", str(tiny_model_dir), "--prompt", "Hello world", "--format", "jsonl",
                "--max-new-tokens", "12", "--mode", "sample", "--seed", "3", env=isolated_env)
    assert json.loads(again.stdout.splitlines()[-1])["token_ids"] == final["token_ids"]


def test_beam_jsonl_adds_hypotheses_best_first(tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    done = cli("generate", "--model", str(tiny_model_dir), "-p", "Hello", "--format", "jsonl", "--mode", "beam",
               "--num-beams", "3", "--num-return-sequences", "3", "--max-new-tokens", "6", env=isolated_env)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(e["event"] == "beam_stepped" for e in events)
    final = events[-1]
    hypotheses = final["hypotheses"]
    assert len(hypotheses) == 3
    for h in hypotheses:
        assert set(h) == {"token_ids", "text", "sum_logprobs", "score"}
    assert [h["score"] for h in hypotheses] == sorted((h["score"] for h in hypotheses), reverse=True)
    assert final["token_ids"] == hypotheses[0]["token_ids"] and final["text"] == hypotheses[0]["text"]
    emitted = [e for e in events if e["event"] == "token_emitted"]
    assert "".join(e["text"] for e in emitted) == final["text"]


@pytest.mark.parametrize("args", [["--mode", "pld"], ["--mode", "speculative", "--draft", "self", "--no-adaptive"],
                                  ["--mode", "speculative", "--draft", "int4", "--adaptive"],
                                  ["--mode", "pld", "--tree-budget", "8", "--no-adaptive"], ["--mode", "suffix"],
                                  ["--mode", "suffix", "--adaptive", "--tree-budget", "4"],
                                  ["--mode", "speculative", "--draft", "self"]])  # adaptive: drafts where it pays
def test_drafting_modes_report_their_counters_and_compare_with_greedy(tiny_model_dir: Path,
                                                                      isolated_env: dict[str, str],
                                                                      args: list[str]) -> None:
    done = cli("generate", "--model", str(tiny_model_dir), "-p", "one two three one two three one two", "--no-chat",
               "--format", "jsonl", "--max-new-tokens", "24", "--compare", *args, env=isolated_env)
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout.splitlines()[-1])
    for key in ("drafted", "accepted", "draft_forwards"):
        assert key in final
    assert final["comparison"]["identical"] is True and final["comparison"]["first_divergence"] is None
    assert final["comparison"]["speedup"] > 0
    if "self" in args and "--no-adaptive" in args:  # drafting for itself at full length: every token kept
        assert final["accepted"] == final["drafted"] > 0
    # with nothing drafted the rate is undefined: left out, not 0.0 (the adaptive policy may rightly draft nothing)
    assert final.get("acceptance_rate") == (final["accepted"] / final["drafted"] if final["drafted"] else None)
    if final["drafted"]:  # one definition: nodes drafted, tokens kept, the rounds that drafted
        assert final["draft_rounds"] > 0 and final["draft_depth"] <= final["drafted"]


def test_text_format_streams_text_and_puts_stats_on_stderr(tiny_model_dir: Path,
                                                           isolated_env: dict[str, str]) -> None:
    jsonl = cli("generate", "--model", str(tiny_model_dir), "-p", "Hi", "--format", "jsonl", "--max-new-tokens",
                "8", env=isolated_env)
    text = cli("generate", "--model", str(tiny_model_dir), "-p", "Hi", "--max-new-tokens", "8", env=isolated_env)
    assert text.returncode == 0, text.stderr
    assert text.stdout == json.loads(jsonl.stdout.splitlines()[-1])["text"] + "\n"
    assert "tok/s" in text.stderr and "target forwards" in text.stderr


def test_the_prompt_may_be_the_commands_argument(tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    """`decode-tui generate "Hi"` decodes what `-p "Hi"` does: the first thing a new user types."""
    args = ["--model", str(tiny_model_dir), "--max-new-tokens", "6", "--format", "jsonl"]
    positional = cli("generate", "Hello 東京", *args, env=isolated_env)
    option = cli("generate", *args, "-p", "Hello 東京", env=isolated_env)
    assert positional.returncode == 0, positional.stderr
    assert json.loads(positional.stdout.splitlines()[0])["prompt_text"] == "Hello 東京"
    assert positional.stdout.splitlines()[-1].split('"elapsed_s"')[0] == \
        option.stdout.splitlines()[-1].split('"elapsed_s"')[0]


def test_prompt_file_and_stdin(tiny_model_dir: Path, isolated_env: dict[str, str], tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Hello 東京 👋", encoding="utf-8")
    by_file = cli("generate", "--model", str(tiny_model_dir), "--prompt-file", str(prompt), "--format", "jsonl",
                  "--max-new-tokens", "3", env=isolated_env)
    by_stdin = cli("generate", "--model", str(tiny_model_dir), "--prompt-file", "-", "--format", "jsonl",
                   "--max-new-tokens", "3", env=isolated_env, stdin="Hello 東京 👋")
    first = json.loads(by_file.stdout.splitlines()[0])
    assert first["prompt_text"] == "Hello 東京 👋"
    assert by_file.stdout.splitlines()[-1].split('"elapsed_s"')[0] == \
        by_stdin.stdout.splitlines()[-1].split('"elapsed_s"')[0]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--prompt", ""], ["prompt", "empty"]),
        (["--prompt", "   \n"], ["prompt", "empty"]),
        (["--top-p", "0"], ["top-p", "(0, 1]"]),
        (["--top-p", "1.5"], ["top-p", "(0, 1]"]),
        (["--temperature", "-0.5"], ["temperature"]),
        (["--max-new-tokens", "0"], ["max-new-tokens"]),
        (["--mode", "telepathy"], ["mode", "telepathy"]),
        (["--device", "tpu"], ["unknown device", "tpu"]),
        (["--repetition-penalty", "0"], ["repetition-penalty", "not positive"]),
        (["--mode", "beam", "--num-beams", "0"], ["--num-beams"]),
        (["--mode", "beam", "--num-beams", "2", "--num-return-sequences", "3"], ["num_return_sequences (3)",
                                                                                 "num_beams (2)"]),
        (["--mode", "beam", "--length-penalty", "long"], ["--length-penalty", "number"]),
        (["--mode", "beam", "--early-stopping", "sometimes"], ["--early-stopping"]),
        (["--mode", "speculative", "--num-beams", "4"], ["beam search only", "--mode speculative"]),
        (["--mode", "greedy", "--draft", "self"], ["--draft applies to --mode speculative"]),
        (["--mode", "speculative", "--max-ngram-size", "2"], ["--max-ngram-size applies to --mode pld"]),
        (["--mode", "beam", "--compare"], ["--compare applies to"]),
        (["--mode", "pld", "--num-pred-tokens", "0"], ["--num-pred-tokens"]),
        (["--mode", "pld", "--num-draft-tokens", "4"], ["draft length is --num-pred-tokens"]),
        (["--mode", "speculative", "--draft", "no-such-draft"], ["Unknown draft", "no-such-draft",
                                                                 "made from the target (self, int4"]),
        (["--mode", "pld", "--num-beams", "4"], ["beam search only", "--mode pld"]),
        (["--prompt", "a", "--prompt-file", "x.txt"], ["either --prompt or --prompt-file"]),
        (["a", "--prompt", "b"], ["given twice", "with --prompt"]),
        (["a", "--prompt-file", "x.txt"], ["given twice", "with --prompt-file"]),
        (["  "], ["prompt", "empty"]),
        (["a", "b"], ["unexpected extra argument"]),
        (["--format", "xml"], ["format"]),
        (["--mode", "pld", "--tree-budget", "0"], ["--tree-budget takes 1 to 512", "not 0"]),
        (["--mode", "suffix", "--tree-budget", "100000"], ["--tree-budget takes 1 to 512"]),
        (["--mode", "greedy", "--tree-budget", "8"],
         ["--tree-budget applies to --mode lookahead or --mode pld or --mode recycle or --mode speculative or "
          "--mode suffix"]),
        (["--mode", "recycle", "--recycle-k", "0"], ["--recycle-k", "greater than or equal to 1"]),
        (["--mode", "recycle", "--recycle-k", "-1"], ["--recycle-k", "greater than or equal to 1"]),
        (["--mode", "recycle", "--recycle-k", "65"], ["--recycle-k", "less than or equal to 64"]),
        (["--mode", "recycle", "--recycle-k", "abc"], ["--recycle-k", "integer"]),
        (["--mode", "pld", "--recycle-k", "4"], ["--recycle-k applies to --mode recycle"]),
        (["--mode", "greedy", "--cold"], ["--cold applies to --mode recycle"]),
        (["--mode", "suffix", "--recycle-state", "m.pt"], ["--recycle-state applies to --mode recycle"]),
        (["--mode", "recycle", "--recycle-state", "."], ["--recycle-state . is a folder"]),
        (["--mode", "recycle", "--num-beams", "4"], ["beam search only", "--mode recycle"]),
        (["--mode", "recycle", "--max-ngram-size", "2"], ["--max-ngram-size applies to --mode pld"]),
        (["--mode", "lookahead", "--lookahead-window", "0"], ["--lookahead-window", "greater than or equal to 1"]),
        (["--mode", "lookahead", "--lookahead-ngram", "1"], ["--lookahead-ngram", "greater than or equal to 2"]),
        (["--mode", "lookahead", "--lookahead-ngram", "9"], ["--lookahead-ngram", "less than or equal to 8"]),
        (["--mode", "lookahead", "--lookahead-guesses", "-1"], ["--lookahead-guesses", "greater than or equal to 0"]),
        (["--mode", "lookahead", "--lookahead-window", "abc"], ["--lookahead-window", "integer"]),
        (["--mode", "recycle", "--lookahead-window", "4"], ["--lookahead-window applies to --mode lookahead"]),
        (["--mode", "pld", "--lookahead-guesses", "2"], ["--lookahead-guesses applies to --mode lookahead"]),
        (["--mode", "lookahead", "--recycle-k", "4"], ["--recycle-k applies to --mode recycle"]),
        (["--mode", "lookahead", "--num-beams", "4"], ["beam search only", "--mode lookahead"]),
        (["--mode", "pld", "--history", "x.jsonl"], ["--history applies to --mode suffix"]),
        (["--mode", "suffix", "--history", "no-such.jsonl"], ["--history no-such.jsonl: no such file"]),
        (["--mode", "suffix", "--max-ngram-size", "2"], ["--max-ngram-size applies to --mode pld"]),
        (["--mode", "suffix", "--num-draft-tokens", "4"], ["In --mode suffix the draft length is --num-pred-tokens"]),
        (["--mode", "suffix", "--draft", "self"], ["--draft applies to --mode speculative"]),
    ],
)
def test_bad_options_are_usage_errors(tiny_model_dir: Path, isolated_env: dict[str, str], args: list[str],
                                      fragments: list[str]) -> None:
    done = cli("generate", "--model", str(tiny_model_dir), *args, env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, *fragments)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["-p", "caf\udce9"], "'--prompt' / '-p'"),  # é typed in a Latin-1 terminal: one byte, 0xE9
        (["caf\udce9"], "'PROMPT'"),
        (["-p", "hi", "--force", "caf\udce9"], "'--force'"),
        (["-p", "hi", "--bad-words", "caf\udce9"], "'--bad-words'"),
        (["-p", "hi", "--regex", "caf\udce9"], "'--regex'"),
        (["-p", "hi", "--json-schema", '{"enum": ["caf\udce9"]}'], "'--json-schema'"),
    ],
)
def test_text_that_is_not_utf8_is_refused_naming_its_option(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                           args: list[str], option: str) -> None:
    """Each of these reached the tokenizer or the grammar compiler and ended in an internal error."""
    done = cli("generate", "--model", str(tiny_model_dir), *args, env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, f"Invalid value for {option}", "byte 0xE9 at character", "not UTF-8",
                         "Set the terminal to UTF-8")


def test_a_prompt_on_stdin_that_is_not_utf8_is_refused_and_a_file_name_in_any_encoding_is_read(
        tiny_model_dir: Path, isolated_env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run([SCRIPT, "generate", "--model", str(tiny_model_dir), "--prompt-file", "-"],
                          capture_output=True, env=isolated_env, input=b"caf\xe9", timeout=120)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert b"standard input is not UTF-8 text (bad byte at offset 3)" in done.stderr and b"Traceback" not in done.stderr
    # The control: a file whose *name* is not UTF-8 is a file like any other (only text must be text).
    named = os.fsencode(tmp_path) + b"/caf\xe9.txt"
    with open(named, "wb") as f:
        f.write(b"hello")
    read = cli("generate", "--model", str(tiny_model_dir), "--prompt-file", os.fsdecode(named), "--max-new-tokens",
               "2", env=isolated_env)
    assert read.returncode == 0, read.stderr


def test_a_second_suffix_run_drafts_from_the_first_and_a_bad_history_is_refused(
        tiny_model_dir: Path, isolated_env: dict[str, str], tmp_path: Path) -> None:
    first = cli("generate", "--model", str(tiny_model_dir), "-p", "tell me a story", "--format", "jsonl",
                "--max-new-tokens", "24", env=isolated_env)
    assert first.returncode == 0, first.stderr
    trace = tmp_path / "first.jsonl"
    trace.write_text(first.stdout, encoding="utf-8")
    again = cli("generate", "--model", str(tiny_model_dir), "-p", "tell me a story", "--format", "jsonl",
                "--max-new-tokens", "24", "--mode", "suffix", "--history", str(trace),
                # Fixed: the adaptive length and the CPU's tree budget follow timings, which a busy machine moves.
                "--no-adaptive", "--tree-budget", "16", env=isolated_env)
    assert again.returncode == 0, again.stderr
    events = [json.loads(line) for line in again.stdout.splitlines()]
    final = events[-1]
    assert final["token_ids"] == json.loads(first.stdout.splitlines()[-1])["token_ids"], "lossless"
    assert final["target_forwards"] < final["new_tokens"] // 2, "most tokens copied from the first run"
    assert events[0]["params"]["history"] == [str(trace)]
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    done = cli("generate", "--model", str(tiny_model_dir), "-p", "x", "--mode", "suffix", "--history", str(empty),
               env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "nothing to draft from")
    broken = tmp_path / "broken.jsonl"
    lines = first.stdout.splitlines()
    broken.write_text("\n".join([lines[0], '{"event": "draft_proposed", "round": 0, "drafter": "lookup", '
                                            '"token_ids": [1, 2], "texts": ["a", "b"], "parents": [1, -1]}']),
                      encoding="utf-8")
    done = cli("generate", "--model", str(tiny_model_dir), "-p", "x", "--mode", "suffix", "--history", str(broken),
               env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "line 2", "parents[0] is 1")


def test_a_bad_history_is_refused_before_the_model_is_even_looked_for(isolated_env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    """Binary, empty and cut-off histories were refused only after the weights loaded and warmed up (11-12 s), a
    folder was "no such file" and a file given three times was taken silently. A model that is not on disk
    (exit 3 once looked for) shows the history is checked first."""
    text = tmp_path / "ok.txt"
    text.write_text("hello\n", encoding="utf-8")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    for given, says in (([binary], "not UTF-8 text"), ([empty], "is empty"), ([tmp_path], "is a folder"),
                        ([text, text, text], "is given 3 times")):
        history = [arg for path in given for arg in ("--history", str(path))]
        for command in ("generate", "run"):
            done = cli(command, "--model", str(tmp_path / "no-model-here"), "-p", "x", "--mode", "suffix", *history,
                       env=isolated_env)
            assert_clean_failure(done, EXIT_USAGE, says)


def test_missing_prompt_file(tiny_model_dir: Path, isolated_env: dict[str, str], tmp_path: Path) -> None:
    done = cli("generate", "--model", str(tiny_model_dir), "--prompt-file", str(tmp_path / "nope.txt"),
               env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "nope.txt", "does not exist")


def test_non_utf8_prompt_file(tiny_model_dir: Path, isolated_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café crème".encode("latin-1"))
    done = cli("generate", "--model", str(tiny_model_dir), "--prompt-file", str(bad), env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "latin1.txt", "not UTF-8")


@pytest.mark.parametrize("command", ["generate", "bench", "run"])
def test_prompt_longer_than_the_context_is_refused_before_the_weights_load(
        tiny_model_dir: Path, isolated_env: dict[str, str], tmp_path: Path, command: str) -> None:
    """Checked with the tokenizer and the config alone: a big model's weights would take minutes to load on a CPU
    before the same message; the app (``run``) would open on the error and end with status 0. The control: a prompt
    that fits loads the weights (the progress line says so)."""
    long = tmp_path / "long.txt"
    long.write_text("lorem ipsum dolor " * 3000, encoding="utf-8")
    done = cli(command, "--model", str(tiny_model_dir), "--prompt-file", str(long), env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "reads at most 4096 tokens", "Shorten the prompt")
    assert "weights" not in done.stderr, done.stderr
    if command == "generate":
        fits = cli(command, "--model", str(tiny_model_dir), "-p", "lorem ipsum", "--max-new-tokens", "2",
                   env=isolated_env)
        assert fits.returncode == 0 and "weights" in fits.stderr, fits.stderr


@pytest.mark.parametrize("command", ["generate", "bench", "run"])
def test_fast_in_a_narrow_dtype_on_the_cpu_is_refused_before_the_weights_load(
        tiny_model_dir: Path, isolated_env: dict[str, str], command: str) -> None:
    """Compiled bfloat16 steps on a CPU round differently from pass to pass (Inductor fuses what the eager model
    rounds between ops), so drafting would not give greedy's text: ``--fast`` loads float32 there, and refuses a
    narrower dtype asked for (``run``: before its app opens). The control: float32 asked for is taken."""
    done = cli(command, "--model", str(tiny_model_dir), "--device", "cpu", "--fast", "--dtype", "bfloat16", "-p",
               "hi", "--max-new-tokens", "2", env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "--fast with --dtype bfloat16 on the CPU", "loads float32 on a CPU")
    assert "weights" not in done.stderr, done.stderr
    if command == "generate":
        fits = cli(command, "--model", str(tiny_model_dir), "--device", "cpu", "--fast", "--dtype", "float32", "-p",
                   "hi", "--max-new-tokens", "2", env=isolated_env)
        assert fits.returncode == 0 and "weights onto cpu in float32" in fits.stderr, fits.stderr


@pytest.mark.parametrize("command", ["generate", "run"])
def test_a_draft_of_another_vocabulary_is_refused_before_any_weights_load(
        tiny_model_dir: Path, isolated_env: dict[str, str], tmp_path: Path, sp_bpe: Any, command: str) -> None:
    """A draft model whose tokenizer is not the target's is refused from the two tokenizers alone (``run``: before
    its app opens, which showed the error and ended with status 0)."""
    from .conftest import tiny_model

    other = tmp_path / "other-family"
    tiny_model("llama", vocab_size=len(sp_bpe), seed=5).save_pretrained(other)
    sp_bpe.save_pretrained(other)
    done = cli(command, "--model", str(tiny_model_dir), "--mode", "speculative", "--draft", str(other), "-p",
               "hi", env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "tokenizer differs from the target's", "same vocabulary")
    assert "weights" not in done.stderr, done.stderr


def test_unknown_model(isolated_env: dict[str, str]) -> None:
    done = cli("generate", "--model", "no-such-model", "-p", "hi", env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "Unknown model", "no-such-model", "decode-tui models")


@pytest.mark.parametrize(("spec", "repo"), [("phi3", "microsoft/Phi-3-mini-4k-instruct"),
                                            ("someone/not-here", "someone/not-here")])
def test_a_model_not_on_disk_is_reported_with_where_we_looked(isolated_env: dict[str, str], spec: str,
                                                               repo: str) -> None:
    done = cli("generate", "--model", spec, "-p", "hi", env=isolated_env)
    assert_clean_failure(done, EXIT_MODEL_UNAVAILABLE, spec, repo, "not on this machine", "Looked in",
                         isolated_env["HF_HOME"])


@pytest.mark.parametrize("command", ["generate", "run"])
def test_a_draft_model_not_on_disk_is_reported_as_the_draft_with_its_way_out(
        tiny_model_dir: Path, isolated_env: dict[str, str], command: str) -> None:
    # The message named --model, and the embedded model as the way out, for a draft the user gave with --draft.
    done = cli(command, "--model", str(tiny_model_dir), "-p", "hi", "--mode", "speculative", "--draft",
               "someone/not-here", env=isolated_env)
    assert_clean_failure(done, EXIT_MODEL_UNAVAILABLE, "The draft model someone/not-here is not on this machine",
                         "Looked in", "pass --draft with a local folder", "The default draft, int4, is made from "
                         "the target and needs no download")
    assert "--model" not in done.stderr, done.stderr


def test_cuda_where_there_is_none(tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    done = cli("generate", "--model", str(tiny_model_dir), "-p", "hi", "--device", "cuda", "--max-new-tokens", "2",
               env=isolated_env)
    if torch.cuda.is_available():  # on a GPU machine the same call must simply work
        assert done.returncode == 0, done.stderr
    else:
        assert_clean_failure(done, EXIT_USAGE, "no CUDA device", "--device cpu")


def signalled_jsonl_run(model_dir: Path, env: dict[str, str], signum: int) -> tuple[int, list[dict[str, Any]], str]:
    """``generate --format jsonl`` sent ``signum`` once its sixth token is out: its exit status, every line it
    wrote, and its stderr."""
    # A prompt the tiny model answers at length (its end of text comes after 1,629 tokens, 13 s here): with a short
    # answer the run could end by itself before the signal lands on a loaded machine (it did, after 48 tokens).
    proc = subprocess.Popen([SCRIPT, "generate", "--model", str(model_dir), "-p",
                             "the quick brown fox the quick brown fox", "--format", "jsonl", "--max-new-tokens",
                             "4000", "--no-chat"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    lines = []
    for line in proc.stdout:
        lines.append(json.loads(line))
        if lines[-1]["event"] == "token_emitted" and lines[-1]["index"] == 5:
            proc.send_signal(signum)
            break
    # The rest through the same buffered reader: iterating read ahead, and communicate() would read the pipe
    # beneath it, losing the lines already in its buffer.
    rest, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=60)
    return proc.returncode, lines + [json.loads(x) for x in rest.splitlines()], err


def test_ctrl_c_prints_what_was_generated_and_exits_130(tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    code, lines, err = signalled_jsonl_run(tiny_model_dir, isolated_env, signal.SIGINT)
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "interrupted after" in err
    final: dict[str, Any] = lines[-1]
    assert final["event"] == "finished" and final["finish_reason"] == "cancelled"
    emitted = [x for x in lines if x["event"] == "token_emitted"]
    assert final["token_ids"] == [x["token_id"] for x in emitted] and 6 <= final["new_tokens"] < 4000


def test_models_lists_every_alias_with_availability(isolated_env: dict[str, str]) -> None:
    done = cli("models", env=isolated_env)
    assert done.returncode == 0, done.stderr
    for alias in ("smollm2", "smollm2-360m", "smollm2-1.7b", "phi3", "phi3.5", "qwen2.5-0.5b", "qwen2.5-1.5b",
                  "gpt2", "tinyllama"):
        assert alias in done.stdout
    assert "yes" not in done.stdout  # empty caches: nothing is here


@pytest.mark.parametrize("columns", [80, 160])
def test_models_never_folds_a_repo_id_or_a_path(isolated_env: dict[str, str], columns: int) -> None:
    # Each is copied from here: in 80 columns the four-column table folded "SmolLM2-1" / "35M-Instruct".
    # A short cache folder (pytest's tmp_path alone is over 80 characters, and such a path must fold).
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="dt") as cache:
        model = Path(cache) / "models" / "smollm2"  # a checkpoint's files, to be listed
        model.mkdir(parents=True)
        (model / "config.json").write_text("{}")
        (model / "model.safetensors").write_bytes(b"")
        done = cli("models", env={**isolated_env, "COLUMNS": str(columns), "DECODE_TUI_CACHE": cache})
    assert done.returncode == 0, done.stderr
    assert max(len(line.rstrip()) for line in done.stdout.splitlines()) <= columns
    for repo in ALIASES.values():
        assert repo in done.stdout, done.stdout
    assert str(model) in done.stdout and "decode-tui models pull" not in done.stdout


def test_pulling_a_hub_model_without_the_hub(isolated_env: dict[str, str]) -> None:
    done = cli("models", "pull", "phi3", env=isolated_env)
    assert_clean_failure(done, EXIT_MODEL_UNAVAILABLE, "phi3", "hub does not answer")
    # A name that is no model at all is the user's mistake (exit 2, as --model's), not a model missing here (3).
    unknown = cli("models", "pull", "no-such", env=isolated_env)
    assert_clean_failure(unknown, EXIT_USAGE, "Unknown model 'no-such'", "decode-tui models")


@pytest.mark.parametrize(("args", "code", "fragments"), [
    (["run", "--model", "no-such-model-here"], 2, ["no-such-model-here", "Known aliases"]),
    (["run", "--model", "phi3", "--mode", "pld"], 3, ["phi3"]),
    (["run", "--theme", "neon"], 2, ["Unknown theme", "presenter"]),
    (["run", "--prompt", "  "], 2, ["empty"]),
    (["run", "  "], 2, ["empty"]),
    (["run", "Hi", "-p", "Hello"], 2, ["given twice"]),
    (["run", "--mode", "greedy", "--num-beams", "3"], 2, ["--mode beam"]),
    (["run", "--record", "/no/such/folder/x.jsonl"], 2, ["does not exist"]),
    (["replay", "/no/such/recording.jsonl"], 2, ["does not exist"]),
    (["run", "--device", "cuda:7"], 2, ["--device cuda:7"]),  # no GPU, or fewer than eight: refused, not a toast
    (["run", "--slow-motion", "inf"], 2, ["--slow-motion", "not a finite number"]),
])
def test_bad_app_input_fails_before_the_app_opens(args: list[str], code: int, fragments: list[str],
                                                  isolated_env: dict[str, str]) -> None:
    assert_clean_failure(cli(*args, env=isolated_env), code, *fragments)


def test_a_file_another_process_is_recording_to_is_refused_before_the_app_opens(tmp_path: Path,
                                                                                isolated_env: dict[str, str]) -> None:
    """Two `run --record same.jsonl` at once each rewrote the file and exited 0, and one run was gone: the file is
    claimed (locked) by the first, and the second is refused at once with a name it could use."""
    import fcntl

    from decode_tui.cli.outputs import check_output

    same = tmp_path / "same.jsonl"
    check_output(same, "record")  # this process is the first recorder, as a running app would be
    check_output(same, "record")  # and may check its own file again
    done = cli("run", "--record", str(same), env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "another process", "is writing to it now", "same-2.jsonl")
    other = tmp_path / "other.jsonl"
    with other.open("a") as held:  # any writer holding the lock, not only decode-tui
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        refused = cli("replay", "x.jsonl", "--cast", str(other), env=isolated_env)
        assert_clean_failure(refused, EXIT_USAGE, "another process")
    # A file made only for the check, never written, is gone when the process exits.
    fresh = tmp_path / "fresh.jsonl"
    code = ("from pathlib import Path; from decode_tui.cli.outputs import check_output; "
            f"check_output(Path({str(fresh)!r}), 'r')")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert not fresh.exists()


def test_a_damaged_recording_is_refused(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    path = tmp_path / "damaged.jsonl"
    path.write_text('{"event": "recording", "version": 1, "settings": {}}\n{"t": 0, "event": "token_emitted"}\n',
                    encoding="utf-8")
    assert_clean_failure(cli("replay", str(path), env=isolated_env), 2, "line 2", "damaged")


@pytest.mark.parametrize(("line", "says"), [
    ('{"t": 0.1, "event": "token_emitted", "index": "zero", "token_id": 5, "text": "a", "start": 0, "end": 1}',
     "token_emitted.index should be an integer"),
    ('{"t": 0.1, "event": "token_sampled", "step": 0, "token_id": 5, "text": "a", "prob": 1.7, "greedy": true, '
     '"stages": []}', "token_sampled.prob is 1.7, not a probability"),
    ('{"t": 0.1, "event": "token_emitted", "index": 0, "token_id": 5, "text": "a", "start": 0, "end": 1, '
     '"source": "oracle"}', "token_emitted.source is 'oracle'"),
    ('{"t": -3, "event": "token_emitted", "index": 0, "token_id": 5, "text": "a", "start": 0, "end": 1}',
     "not a time"),
])
def test_a_recording_with_a_field_of_the_wrong_type_or_range_is_refused_with_its_line_and_field(
        tmp_path: Path, isolated_env: dict[str, str], line: str, says: str) -> None:
    """It crashed the app with a traceback and exit 0, and `replay --cast` said "written"."""
    path = tmp_path / "wrong.jsonl"
    started = ('{"t": 0, "event": "started", "mode": "greedy", "model": "m", "prompt_token_ids": [1], '
               '"prompt_text": "x", "params": {}}')
    path.write_text(f'{{"event": "recording", "version": 1, "settings": {{}}}}\n{started}\n{line}\n',
                    encoding="utf-8")
    for args in (["replay", str(path)], ["replay", str(path), "--cast", str(tmp_path / "out.cast")]):
        assert_clean_failure(cli(*args, env=isolated_env), 2, f"{path}, line 3:", says)
    assert not (tmp_path / "out.cast").exists()


def test_a_recording_cut_mid_line_plays_up_to_the_cut_and_says_so(tmp_path: Path) -> None:
    from decode_tui.tui.pump import Notice
    from decode_tui.tui.recording import read_recording, replay

    whole = (Path(__file__).parent.parent / "lessons" / "01-greedy-vs-sampling.jsonl").read_text(encoding="utf-8")
    lines = whole.splitlines(keepends=True)
    path = tmp_path / "cut.jsonl"
    path.write_text("".join(lines[:10]) + lines[10][: len(lines[10]) // 2], encoding="utf-8")  # killed mid-write
    header, events = read_recording(path)
    assert len(events) == 9 and header["cut_at_line"] == 11
    played = list(replay(events, 0.0, header["cut_at_line"])())
    assert isinstance(played[-1], Notice) and "cut off in line 11" in played[-1].message
    path.write_text("".join(lines[:10]) + lines[10][: len(lines[10]) // 2] + "\n" + "".join(lines[11:]),
                    encoding="utf-8")  # a broken line in the middle is damage, not a cut
    with pytest.raises(UsageError, match="line 11: not JSON"):
        read_recording(path)


def test_run_and_generate_take_the_same_decoding_options() -> None:
    import dataclasses
    import inspect

    from decode_tui.cli.commands import generate, run_app
    from decode_tui.cli.options import DecodingOptions

    decoding = [f.name for f in dataclasses.fields(DecodingOptions)]
    assert len(decoding) > 20
    for command, own in ((generate, ["prompt_arg", "compare", "compare_runs", "output_format", "force", "resume",
                                     "at"]),
                         (run_app, ["prompt_arg", "start_paused", "auto_pause", "slow_motion", "record",
                                    "background_compile", "theme"])):
        assert list(inspect.signature(command).parameters) == decoding + own, command.__name__


def test_build_config_takes_the_options_object() -> None:
    """One options object carries every decoding option down: build_config reads its fields, and the same object
    gives the same config through DecodingOptions.config."""
    from decode_tui.cli.flags import ModeChoice
    from decode_tui.cli.options import DecodingOptions, build_config
    from decode_tui.core.errors import UsageError

    options = DecodingOptions(mode=ModeChoice("sample"), max_new_tokens=16, temperature=0.5, top_k=7,
                              bad_words="sorry,apologize")
    config = build_config(options)
    assert (config.max_new_tokens, config.sampling.temperature, config.sampling.top_k) == (16, 0.5, 7)
    assert config.sampling.bad_words == ("sorry", "apologize") and options.config() == config
    with pytest.raises(UsageError, match="--num-beams"):
        build_config(DecodingOptions(mode=ModeChoice("greedy"), num_beams=4))


def test_tokens_emitted_but_not_yet_written_at_ctrl_c_are_written_before_finished() -> None:
    from decode_tui.cli.headless import _unwritten
    from decode_tui.core.record.events import Finished, TokenEmitted

    written = [TokenEmitted(index=0, token_id=5, text="Hel", start=0, end=3)]
    result = Finished(mode="greedy", prompt_token_ids=(1,), token_ids=(5, 6, 7), text="Hello!",
                      finish_reason="cancelled", new_tokens=3, target_forwards=3, elapsed_s=0.1, tokens_per_s=30.0)
    missing = _unwritten(result, written)
    assert [e.token_id for e in written + missing] == list(result.token_ids)
    assert "".join(e.text for e in written + missing) == result.text
    assert [e.index for e in missing] == [1, 2] and missing[-1].end == len(result.text)
    assert _unwritten(result, [*written, *missing]) == []


@pytest.mark.slow
@pytest.mark.real_model
def test_every_readme_generate_and_whatif_example_runs_as_written(smollm2: Any, tiny_model_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `decode-tui generate` line of the README, as written (a few tokens): exit 0 and some output; then each
    `decode-tui whatif` line on the trace one of them wrote."""
    import shlex

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    examples = [line for line in readme.splitlines() if line.startswith("decode-tui generate ")]
    assert len(examples) >= 8
    # The files the examples name, in the folder they run in.
    (tmp_path / "edit-this-code.txt").write_text("Rename x to y: def f(x):\n    return x + x\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("Notes: the meeting moved to Tuesday.", encoding="utf-8")
    (tmp_path / "docs").mkdir()  # the README's schema, as shipped
    (tmp_path / "docs" / "person.json").write_text((ROOT / "docs" / "person.json").read_text(encoding="utf-8"),
                                                   encoding="utf-8")
    (tmp_path / "my-checkpoint").symlink_to(tiny_model_dir, target_is_directory=True)
    # In this process (the model code is imported once, not nine times), through the same command-line parser;
    # the first one also as a real process, so the console script and its stdout are covered as written.
    from typer.testing import CliRunner

    from decode_tui.cli.commands import app

    monkeypatch.chdir(tmp_path)
    constrained = 0
    for i, example in enumerate(examples):
        args = shlex.split(example, comments=True)[1:]
        redirect = args.index(">") if ">" in args else None
        if redirect is not None:
            args = args[:redirect]
        # A constrained example claims its output matches: it gets the tokens to finish, and the claim is checked.
        limit = "64" if "--regex" in args or "--json-schema" in args else "6"
        if i == 0:
            done = subprocess.run([SCRIPT, *args, "--max-new-tokens", limit], capture_output=True, text=True,
                                  cwd=tmp_path, timeout=300)
            assert done.returncode == 0 and done.stdout.strip(), (example, done.stderr[-2000:])
            assert "Traceback" not in done.stderr, example
        result = CliRunner().invoke(app, [*args, "--max-new-tokens", limit])
        assert result.exception is None or isinstance(result.exception, SystemExit), (example, result.exception)
        assert result.exit_code == 0, (example, result.stderr[-2000:])
        assert result.stdout.strip(), (example, "no output")
        if "--regex" in args:  # as a user reads it: \d an ASCII digit
            assert re.fullmatch(args[args.index("--regex") + 1], result.stdout.strip(), re.ASCII), (example,
                                                                                                   result.stdout)
            constrained += 1
        if "--json-schema" in args:
            schema = json.loads((tmp_path / args[args.index("--json-schema") + 1]).read_text(encoding="utf-8"))
            jsonschema.validate(json.loads(result.stdout), schema)
            constrained += 1
        if "--format jsonl" in example:
            assert json.loads(result.stdout.splitlines()[-1])["event"] == "finished"
        if redirect is not None:  # a trace the whatif examples read
            (tmp_path / shlex.split(example, comments=True)[redirect + 2]).write_text(result.stdout, encoding="utf-8")
    assert constrained >= 2
    whatifs = [line for line in readme.splitlines() if line.startswith("decode-tui whatif ")]
    assert whatifs
    for example in whatifs:
        result = CliRunner().invoke(app, shlex.split(example, comments=True)[1:])
        assert result.exit_code == 0, (example, result.stderr[-2000:])
        assert "Best with PLD" in result.stdout, example


def test_bench_prints_one_json_object_per_mode_with_greedy_as_the_baseline(tiny_model_dir: Path,
                                                                            isolated_env: dict[str, str]) -> None:
    # --no-adaptive: pld drafts every round, so its row has an acceptance to show (on this tiny model's 12 tokens the
    # adaptive policy may rightly draft nothing)
    done = cli("bench", "--model", str(tiny_model_dir), "--modes", "pld,sample", "--repeats", "2", "--seed", "1",
               "--max-new-tokens", "12", "-p", "the quick brown fox the quick brown fox", "--format", "json",
               "--no-adaptive", env=isolated_env)
    assert done.returncode == 0, done.stderr
    rows = {r["mode"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert list(rows) == ["greedy", "pld", "sample"], "greedy first: every speed-up is over it"
    for row in rows.values():
        for key in ("mode", "tokens_per_s", "speedup", "target_forwards", "identical", "runs", "acceptance_rate"):
            assert key in row
        assert row["runs"] == 2 and row["speedup_low"] <= row["speedup"] <= row["speedup_high"]
        # one definition: the speed-up is the tok/s column's own ratio (a busy machine once showed 3.2 tok/s
        # against greedy's 3.4 beside a 1.23x)
        assert row["speedup"] == pytest.approx(row["tokens_per_s"] / rows["greedy"]["tokens_per_s"])
    assert rows["greedy"]["speedup"] == 1.0 and rows["greedy"]["target_forwards"] == rows["greedy"]["new_tokens"]
    assert rows["pld"]["identical"] is True and rows["pld"]["acceptance_rate"] is not None
    assert rows["sample"]["acceptance_rate"] is None
    assert "timeline" not in rows["pld"], "a row per forward only with --timeline"


def test_bench_timeline_shows_every_forward(tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    args = ["bench", "--model", str(tiny_model_dir), "--modes", "pld", "--repeats", "1", "--max-new-tokens", "16",
            "-p", "the quick brown fox the quick brown fox", "--timeline", "--no-adaptive"]
    done = cli(*args, "--format", "json", env=isolated_env)
    assert done.returncode == 0, done.stderr
    for row in map(json.loads, done.stdout.splitlines()):
        timeline = row["timeline"]
        assert [f["forward"] for f in timeline] == list(range(1, row["target_forwards"] + 1))
        assert sum(f["tokens"] for f in timeline) == row["new_tokens"]
    text = cli(*args, env=isolated_env)
    assert text.returncode == 0, text.stderr
    assert "pld: acceptance by draft position" in text.stdout
    assert "pld: one row per target forward" in text.stdout and "verify ms" in text.stdout
    assert "█ token · rejected draft" in text.stdout
    # In 80 columns (a pipe, a CI log) the table keeps every figure whole: a range goes under its median.
    narrow = cli(*args, env={**isolated_env, "COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    table = narrow.stdout.split("pld: acceptance")[0]
    assert "…" not in table and max(map(len, table.splitlines())) <= 80, table
    rows = {r["mode"]: r for r in map(json.loads, done.stdout.splitlines())}
    words = table.split()
    assert "1.00x" in words and str(rows["pld"]["target_forwards"]) in words, table
    # One run a mode: no range of one value ("0.76-0.76"), and the title says why, and on how many threads.
    assert "(1.00-1.00)" not in words and "no spread" in " ".join(words), table
    assert re.search(rf"cpu {auto_cpu_dtype()}, [12] threads? ·", table), table
    assert re.search(r"Threads: \d+ threads? (of \d+: a step and a forward of 8 positions took \d+ ms on 1|, the "
                     r"process's own count)", text.stdout), text.stdout


def test_bench_over_a_file_of_prompts_sums_up_each_category(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    """`bench --prompts`: every mode on every prompt in one process, then per category each mode's median
    speed-up, its range over the prompts and whether its text was greedy's, with a chart; json keeps the rows."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "the quick brown fox the quick brown fox", "category": "copy"}\n\n'
                       '{"prompt": "a b c a b c a b", "category": "copy"}\n'
                       "once upon a time\n", encoding="utf-8")
    args = ["bench", "--model", str(tiny_model_dir), "--modes", "pld,recycle", "--repeats", "1",
            "--max-new-tokens", "8", "--prompts", str(prompts)]
    done = cli(*args, "--format", "json", env=isolated_env)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["category"], r["mode"]) for r in rows] == [(c, m) for c in ("copy", "copy", "-")
                                                         for m in ("greedy", "pld", "recycle")]
    assert all(r["identical"] for r in rows), "greedy drafting is greedy's text on every prompt"
    text = cli(*args, env=isolated_env)
    assert text.returncode == 0, text.stderr
    assert "copy (2)" in text.stdout and "- (1)" in text.stdout and "copy · recycle" in text.stdout, text.stdout
    assert re.search(rf"cpu {auto_cpu_dtype()}, [12] threads? · 3 prompts", text.stdout), "the title names the dtype"
    assert "not greedy's text" not in text.stdout
    # A file that cannot be one is refused before any model loads, naming the line.
    prompts.write_text('{"prompt": "fine"}\n{"prompt": \n', encoding="utf-8")
    assert_clean_failure(cli(*args, env=isolated_env), 2, "line 2", "not JSON")
    prompts.write_text("\n  \n", encoding="utf-8")
    assert_clean_failure(cli(*args, env=isolated_env), 2, "holds no prompt")
    assert_clean_failure(cli(*args, "-p", "hi", env=isolated_env), 2, "not both")
    assert_clean_failure(cli(*args[:-1], str(tmp_path / "none.jsonl"), env=isolated_env), 2, "no such file")


def test_the_shipped_prompt_set_covers_the_categories() -> None:
    from decode_tui.cli.measure import read_prompts

    prompts = read_prompts(Path(__file__).resolve().parents[1] / "benchmarks" / "prompts.jsonl")
    categories = {category for category, _ in prompts}
    assert {"open-ended writing", "how-to", "summary of a given text", "code edit", "question on a given text",
            "translation"} <= categories


@pytest.mark.parametrize(("args", "says"), [
    (["--modes", "greedy,warp"], "Unknown mode 'warp' in --modes"),
    (["--modes", ","], "Unknown mode (none given)"),
    (["--repeats", "0"], "--repeats"),
    (["--mode", "pld"], "not --mode"),
])
def test_bench_refuses_bad_modes_and_repeats(args: list[str], says: str, isolated_env: dict[str, str]) -> None:
    assert_clean_failure(cli("bench", *args, env=isolated_env), 2, says)


def test_whatif_predicts_the_forwards_a_real_pld_run_takes(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    # One thread, so that no thread count is timed: whatif keeps its timings per count, and on a loaded machine the
    # count chosen may differ from run to run, which would time them again where this test checks their reuse.
    isolated_env = {**isolated_env, "OMP_NUM_THREADS": "1"}
    prompt = ["--model", str(tiny_model_dir), "-p", "the quick brown fox jumps over the quick brown fox jumps over",
              "--max-new-tokens", "24", "--format", "jsonl"]
    greedy = cli("generate", *prompt, env=isolated_env)
    assert greedy.returncode == 0, greedy.stderr
    trace = tmp_path / "greedy.jsonl"
    trace.write_text(greedy.stdout, encoding="utf-8")
    done = cli("whatif", str(trace), "--model", str(tiny_model_dir), "--format", "json", env=isolated_env)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 5 * 12 + 2 * 3 + 2
    assert {r["drafter"] for r in rows} == {"pld", "pld tree", "suffix", "recycle", "lookahead"}
    for row in rows:
        for key in ("drafter", "max_ngram_size", "num_pred_tokens", "target_forwards", "est_tokens_per_s"):
            assert key in row
        assert row["est_tokens_per_s"] > 0
    by_setting = {(r["max_ngram_size"], r["num_pred_tokens"]): r for r in rows}
    for n, k in ((1, 2), (3, 10)):
        real = cli("generate", *prompt, "--mode", "pld", "--max-ngram-size", str(n), "--num-pred-tokens", str(k),
                   env=isolated_env)
        finished = json.loads(real.stdout.splitlines()[-1])
        assert by_setting[(n, k)]["target_forwards"] == finished["target_forwards"], (n, k)
    trees = {(r["drafter"], r["tree_budget"]): r for r in rows if "tree_budget" in r}
    for mode, kind in (("pld", "pld tree"), ("suffix", "suffix")):
        real = cli("generate", *prompt, "--mode", mode, "--tree-budget", "7", env=isolated_env)
        finished = json.loads(real.stdout.splitlines()[-1])
        assert trees[(kind, 7)]["target_forwards"] == finished["target_forwards"], kind
    # recycle and lookahead, counted on a run at the device's tree budget, as generate runs them drafting every round
    for mode in ("recycle", "lookahead"):
        row = next(r for r in rows if r["drafter"] == mode)
        real = cli("generate", *prompt, "--mode", mode, "--tree-budget", str(row["tree_budget"]), "--no-adaptive",
                   *(["--cold"] if mode == "recycle" else []), env=isolated_env)
        finished = json.loads(real.stdout.splitlines()[-1])
        assert row["target_forwards"] == finished["target_forwards"], mode
    text = cli("whatif", str(trace), "--model", str(tiny_model_dir), "--draft", "self", env=isolated_env)
    assert text.returncode == 0, text.stderr
    assert "PLD: target forwards (exact)" in text.stdout and "Draft model" in text.stdout
    assert "Best with PLD" in text.stdout and "Draft trees" in text.stdout
    assert "Drafting from the target's own outputs" in " ".join(text.stdout.split())
    # the exact counts come first, before any timing; the timings are saved, then reused, and measured again on request
    assert text.stdout.index("PLD: target forwards (exact)") < text.stdout.index("Costs measured here")
    assert "timings measured now" in " ".join(text.stdout.split())
    again = cli("whatif", str(trace), "--model", str(tiny_model_dir), "--draft", "self", env=isolated_env)
    said = " ".join(again.stdout.split())
    assert again.returncode == 0 and "and reused from" in said and "--recalibrate" in said, again.stderr
    anew = cli("whatif", str(trace), "--model", str(tiny_model_dir), "--draft", "self", "--recalibrate",
               env=isolated_env)
    assert anew.returncode == 0 and "timings measured now" in " ".join(anew.stdout.split()), anew.stderr


def test_saved_whatif_timings_that_cannot_be_read_are_measured_again(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A torn or foreign file in whatif/ is no timing: measured again and replaced whole."""
    from types import SimpleNamespace

    from decode_tui.core.analysis import saved_costs
    from decode_tui.core.analysis.whatif import Costs

    monkeypatch.setenv("DECODE_TUI_CACHE", str(tmp_path))
    lm = SimpleNamespace(name="m", device=torch.device("cpu"), dtype=torch.float32)
    trace = SimpleNamespace(prompt_ids=(1,) * 40, token_ids=(2,) * 24)
    measured = Costs(0.4, (0.01, 0.012, 0.02))
    path = saved_costs.folder() / saved_costs.key(lm, trace, 13, None)  # type: ignore[arg-type]
    path.parent.mkdir(parents=True)
    calls: list[str] = []

    def measure() -> Costs:
        calls.append("measured")
        return measured

    for bad in ("", "{not json", json.dumps({"costs": {"prefill_s": 1}}), "\x00\xff"):
        path.write_text(bad, encoding="utf-8")
        saved = saved_costs.costs_for(lm, trace, 13, None, measure)  # type: ignore[arg-type]
        assert calls.pop() == "measured" and saved.costs == measured and "measured now" in saved.said
    longer = SimpleNamespace(prompt_ids=(1,) * 48, token_ids=(2,) * 24)  # a prompt of the same size class
    reused = saved_costs.costs_for(lm, longer, 13, None, lambda: pytest.fail("measured again"))  # type: ignore[arg-type]
    assert reused.costs.prefill_s == pytest.approx(0.48) and "reused" in reused.said  # scaled to its prompt
    assert reused.costs.verify_s == measured.verify_s
    # Timed on another thread count (a busy machine's warm-up chose one thread): its own timings, measured.
    other = saved_costs.costs_for(lm, trace, 13, None, measure, threads=1)  # type: ignore[arg-type]
    assert calls.pop() == "measured" and "measured now" in other.said
    assert saved_costs.costs_for(lm, trace, 13, None, lambda: pytest.fail("measured again"),  # type: ignore[arg-type]
                                 threads=1).costs == measured
    # The count to key them by: on a near tie, the tied count whose timings are saved; else, or asked to measure
    # again, the count chosen.
    from decode_tui.core.execution.threads import TIE, ThreadChoice

    tie = ThreadChoice(1, {1: 0.2 * (1 + TIE / 2), 2: 0.2})
    two_saved = saved_costs.threads_for(lm, trace, 13, None, ThreadChoice(2, tie.seconds))  # type: ignore[arg-type]
    assert two_saved == 1, "1 was saved just now, and is tied with 2"
    (saved_costs.folder() / saved_costs.key(lm, trace, 13, None, 1)).unlink()  # type: ignore[arg-type]
    assert saved_costs.threads_for(lm, trace, 13, None, tie) == 1, "none saved: the count chosen"  # type: ignore[arg-type]
    saved_costs.costs_for(lm, trace, 13, None, measure, threads=2)  # type: ignore[arg-type]
    assert saved_costs.threads_for(lm, trace, 13, None, tie) == 2  # type: ignore[arg-type]
    assert saved_costs.threads_for(lm, trace, 13, None, tie, again=True) == 1  # type: ignore[arg-type]
    clear = ThreadChoice(1, {1: 0.18, 2: 0.7})
    assert saved_costs.threads_for(lm, trace, 13, None, clear) == 1, "not tied: its own"  # type: ignore[arg-type]
    assert saved_costs.threads_for(lm, trace, 13, None, None) == 0, "off the CPU"  # type: ignore[arg-type]


def test_whatif_refuses_what_it_cannot_replay(tiny_model_dir: Path, isolated_env: dict[str, str],
                                              tmp_path: Path) -> None:
    sampled = cli("generate", "--model", str(tiny_model_dir), "-p", "hello", "--max-new-tokens", "4", "--mode",
                  "sample", "--seed", "1", "--format", "jsonl", env=isolated_env)
    (tmp_path / "sampled.jsonl").write_text(sampled.stdout, encoding="utf-8")
    assert_clean_failure(cli("whatif", str(tmp_path / "sampled.jsonl"), env=isolated_env), 2, "sample run",
                         "Record a greedy run")
    (tmp_path / "notes.txt").write_text("not a trace\n", encoding="utf-8")
    assert_clean_failure(cli("whatif", str(tmp_path / "notes.txt"), env=isolated_env), 2, "not a decode-tui event")
    greedy = cli("generate", "--model", str(tiny_model_dir), "-p", "hello", "--max-new-tokens", "4", "--format",
                 "jsonl", env=isolated_env)
    (tmp_path / "greedy.jsonl").write_text(greedy.stdout, encoding="utf-8")
    import shutil

    other = shutil.copytree(tiny_model_dir, tmp_path / "other-model")
    assert_clean_failure(cli("whatif", str(tmp_path / "greedy.jsonl"), "--model", str(other), env=isolated_env), 2,
                         f"was decoded by {tiny_model_dir.name}, not other-model", "Pass --model with the model")
    assert_clean_failure(cli("whatif", str(tmp_path / "greedy.jsonl"), env=isolated_env), 2,
                         f"was decoded by {tiny_model_dir.name}, which is not a model decode-tui can find",
                         "Pass --model with that model's folder")


def test_a_prompt_with_a_nul_byte_is_refused(tiny_model_dir: Path, tmp_path: Path,
                                             isolated_env: dict[str, str]) -> None:
    binary = tmp_path / "prompt.bin"
    binary.write_bytes(b"hello\x00world")
    done = cli("generate", "--model", str(tiny_model_dir), "--prompt-file", str(binary), env=isolated_env)
    assert_clean_failure(done, EXIT_USAGE, "NUL character (at character 5)")


def test_figures_of_one_take_the_singular() -> None:
    from decode_tui.core.record.events import Finished
    from decode_tui.tui.numbers import count
    from decode_tui.tui.teaching import caption

    assert (count(1, "target forward"), count(2, "round"), count(0, "token")) == \
        ("1 target forward", "2 rounds", "0 tokens")
    one = Finished(mode="greedy", prompt_token_ids=(1,), token_ids=(2,), text="x", finish_reason="eos", new_tokens=1,
                   target_forwards=1, elapsed_s=0.1, tokens_per_s=10.0)
    assert caption(one) == "finished: the model ended the text (EOS); 1 token in 1 target forward"


def test_a_byte_tokens_label_shows_its_bytes() -> None:
    from decode_tui.core.record.detokenize import _bytes_label, _token_bytes

    assert _bytes_label(_token_bytes("ĠðŁ") or b"") == " ⟨F0 9F⟩"  # byte-level BPE: ' ' and an emoji's start
    assert _bytes_label(_token_bytes("<0xE6>") or b"") == "⟨E6⟩"  # SentencePiece's byte fallback
    assert _bytes_label("東".encode()[:2] + b"") == "⟨E6 9D⟩" and _bytes_label("東".encode()) == "東"


def _float_options() -> list[tuple[str, str]]:
    """Every float option of every command (subcommands too), as (command words, the option's flag)."""
    import typer.main

    from decode_tui.cli.main import app

    def walk(command: Any, words: str) -> Any:
        context = command.context_class(command)
        if hasattr(command, "list_commands"):
            for name in command.list_commands(context):
                yield from walk(command.get_command(context, name), f"{words} {name}".strip())
        yield words, command

    return [(words, param.opts[0]) for words, command in walk(typer.main.get_command(app), "")
            for param in command.params if param.type_descriptor.annotation is float]


FLOAT_OPTIONS = _float_options()


def test_the_walk_finds_the_float_options_of_every_kind_of_command() -> None:
    """The walk below is no vacuous pass: it reaches the decoding options and each command's own."""
    found = set(FLOAT_OPTIONS)
    assert {("run", "--slow-motion"), ("replay", "--speed"), ("serve", "--idle-minutes"), ("lesson", "--speed"),
            ("generate", "--top-h"), ("bench", "--draft-confidence"), ("whatif", "--draft-confidence")} <= found


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
@pytest.mark.parametrize(("words", "flag"), FLOAT_OPTIONS, ids=lambda x: str(x).replace(" ", "-"))
def test_every_float_option_of_every_command_refuses_what_is_not_a_finite_number(words: str, flag: str,
                                                                                 value: str) -> None:
    """`run --slow-motion inf` was taken, shown as `slow=infs`, and the first step failed in time.sleep: each float
    option is refused while the command line is read, before anything loads or opens."""
    from typer.testing import CliRunner

    from decode_tui.cli.main import app

    result = CliRunner().invoke(app, [*words.split(), f"{flag}={value}"])
    message = " ".join(result.output.split())
    assert result.exit_code == EXIT_USAGE, message
    assert flag in message and "not a finite number" in message, message
