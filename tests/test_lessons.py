"""Lessons as data: the shipped seven parse and their settings are valid options; bad files name file, line, field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decode_tui.cli.teaching import lesson_config
from decode_tui.core.record.events import DraftProposed, DraftVerified, Finished, PositionVerdict, TokenEmitted
from decode_tui.lessons import LessonError, Pause, PauseTracker, load, parse, shipped

SHIPPED = ["greedy-vs-sampling", "repetition-penalty", "beam-search", "speculative", "prompt-lookup",
           "when-drafting-does-not-pay", "adaptive-draft-length", "what-if", "min-p", "json-schema",
           "why-trees", "recycling", "fixed-point"]


def test_the_lessons_ship_and_their_settings_are_what_run_accepts() -> None:
    lessons = shipped()
    assert [lesson.name for lesson in lessons] == SHIPPED
    for lesson in lessons:
        config = lesson_config(lesson, {})
        assert config.mode == lesson.mode and lesson.pauses and lesson.intro and lesson.summary
        assert load(lesson.name) == lesson
    by_name = {lesson.name: lesson for lesson in lessons}
    assert by_name["speculative"].settings["temperature"] > 0, "the rejection sampling lesson samples"
    assert {p.on for p in by_name["speculative"].pauses} == {"first rejection", "resampled", "bonus"}


GOOD = '''name = "x"
title = "X"
mode = "greedy"
prompt = "hi"
intro = "look"
'''


@pytest.mark.parametrize(("text", "says"), [
    (GOOD + 'colour = "red"\n', "line 6: colour is not a lesson field"),
    (GOOD.replace('"greedy"', '"warp"'), "line 3: mode must be one of"),
    (GOOD.replace('prompt = "hi"', 'prompt = ""'), "line 4: prompt must be a non-empty string"),
    (GOOD + '[[pause]]\non = "sunrise"\ntext = "t"\n', "line 7: on of pause 1 must be one of"),
    (GOOD + '[[pause]]\non = "token 3"\n', "pause number 1 must have `on` and `text`"),
    (GOOD + '[[pause]]\non = "token 3"\ntext = "t"\ntry = ""\n', "line 9: try of pause 1 must be a non-empty"),
    (GOOD + "settings = 3\n", "line 6: settings must be a table"),
    # pauses the run can never reach, and settings its mode ignores
    (GOOD + '[[pause]]\non = "lookup miss"\ntext = "t"\n', "'lookup miss', which cannot happen in mode 'greedy'"),
    (GOOD.replace('"greedy"', '"speculative"') + '[[pause]]\non = "beam finished"\ntext = "t"\n',
     "cannot happen in mode 'speculative' (only in beam)"),
    (GOOD + '[settings]\nmax_new_tokens = 10\n[[pause]]\non = "token 12"\ntext = "t"\n',
     "waits for token 12, but the run stops after max_new_tokens = 10"),
    (GOOD + '[[pause]]\non = "token 200"\ntext = "t"\n', "max_new_tokens = 128"),
    (GOOD + '[settings]\ntemperature = 0.7\n', "line 7: temperature is a sampling setting, which greedy mode ignores"),
    ("name = \n", "not valid TOML"),
])
def test_a_malformed_lesson_names_the_file_the_line_and_the_field(text: str, says: str, tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(LessonError, match=str(path)) as err:
        load(str(path))
    assert says in str(err.value)


def test_an_unknown_lesson_lists_the_lessons() -> None:
    with pytest.raises(LessonError, match="There is no lesson 'warp'") as err:
        load("warp")
    assert all(name in str(err.value) for name in SHIPPED)
    assert parse(GOOD, "mine.toml").name == "x"


def test_a_lessons_texts_are_reflowed_keeping_paragraphs_and_list_items() -> None:
    """Line breaks written to keep the file readable broke the narration mid-sentence in 80 columns."""
    text = GOOD.replace('intro = "look"', 'intro = """\nOne sentence broken\n  over two lines.\n\nA list:\n- first\n'
                                      '  item, wrapped\n2. second\n"""')
    text += '[[pause]]\non = "token 1"\ntext = """\nLook at\nthe bars."""\ntry = "Press\\nP."\n'
    lesson = parse(text, "mine.toml")
    assert lesson.intro == "One sentence broken over two lines.\n\nA list:\n- first item, wrapped\n2. second"
    assert lesson.pauses[0].text == "Look at the bars." and lesson.pauses[0].try_ == "Press P."
    for shipped_lesson in shipped():  # and the shipped ones: no line break inside a sentence
        for said in (shipped_lesson.intro, shipped_lesson.summary, *(p.text for p in shipped_lesson.pauses)):
            for paragraph in said.split("\n\n"):
                assert all(line[:1] in "-*•" or line[:1].isdigit() for line in paragraph.splitlines()[1:]), said


def test_pauses_stop_at_the_events_they_wait_for_each_once() -> None:
    pauses = (Pause("token 2", "two"), Pause("lookup miss", "miss"), Pause("bonus", "bonus"),
              Pause("end of text", "end"))
    tracker = PauseTracker(pauses)

    def token(i: int) -> TokenEmitted:
        return TokenEmitted(index=i, token_id=i, text="a", start=i, end=i + 1)

    def verified(accepted: int, extra: str) -> DraftVerified:
        verdicts = tuple(PositionVerdict(i, i, 0.5, 1.0, None, "accepted" if i < accepted else "rejected")
                         for i in range(2))
        return DraftVerified(round=0, verdicts=verdicts, accepted=accepted, extra_token_id=1,
                             extra_kind=extra)  # type: ignore[arg-type]

    proposed = DraftProposed(round=0, drafter="lookup", token_ids=(1, 2), texts=("a", "b"), q_probs=None,
                             match_start=0, match_end=1, copy_start=1, copy_end=3, max_tokens=2)
    seen = [tracker.check(e) for e in (token(0), token(1), proposed, verified(0, "target"), verified(2, "bonus"),
                                       token(2), verified(0, "target"))]
    assert [p.text if p else None for p in seen] == [None, "two", None, "miss", "bonus", None, None]
    done = Finished(mode="pld", prompt_token_ids=(1,), token_ids=(1,), text="a", finish_reason="eos",
                    new_tokens=1, target_forwards=1, elapsed_s=1.0, tokens_per_s=1.0)
    assert tracker.check(done) == pauses[3] and tracker.pending == []


# The commands, through the real console script.

def test_lessons_lists_them_as_json() -> None:
    from .test_cli import cli

    done = cli("lessons", "--format", "json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [item["name"] for item in listed] == SHIPPED
    assert all({"name", "title", "mode"} <= set(item) and item["recorded"] for item in listed)


def test_lesson_bad_input_exits_with_a_message(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    from decode_tui.core.errors import EXIT_MODEL_UNAVAILABLE, EXIT_USAGE

    from .test_cli import assert_clean_failure, cli

    assert_clean_failure(cli("lesson", "warp"), EXIT_USAGE, "There is no lesson 'warp'", *SHIPPED)
    bad = tmp_path / "mine.toml"
    bad.write_text(GOOD.replace('"greedy"', '"warp"'), encoding="utf-8")
    assert_clean_failure(cli("lesson", str(bad)), EXIT_USAGE, f"{bad}, line 3: mode must be one of")
    typo = tmp_path / "typo.toml"
    typo.write_text(GOOD + "[settings]\ntemprature = 0.5\n", encoding="utf-8")
    assert_clean_failure(cli("lesson", str(typo), "--live"), EXIT_USAGE, f"{typo}, line 7: temprature is not a "
                         "decoding option")
    assert_clean_failure(cli("lesson", str(bad.with_name("gone.toml"))), EXIT_USAGE, "Cannot read the lesson file")
    unrecorded = tmp_path / "unrecorded.toml"
    unrecorded.write_text(GOOD, encoding="utf-8")
    assert_clean_failure(cli("lesson", str(unrecorded)), EXIT_USAGE, "cannot play without a model",
                         f"decode-tui lesson {unrecorded} --live")
    assert_clean_failure(cli("lesson", "speculative", "--temperature", "0.3"), EXIT_USAGE,
                         "--temperature changes a live run: add --live")
    for model in (str(tmp_path / "no-model"), "someone/not-on-disk"):  # unknown; a hub id that is not here
        run = cli("run", "--model", model, env=isolated_env)
        assert run.returncode in (EXIT_USAGE, EXIT_MODEL_UNAVAILABLE)
        assert_clean_failure(cli("lesson", "speculative", "--live", "--model", model, env=isolated_env),
                             run.returncode, run.stderr.strip())  # exactly what `run` says
    assert_clean_failure(cli("lesson", "beam-search", "--live", "--speed", "2"), EXIT_USAGE, "--speed sets the pace")
    assert_clean_failure(cli("lesson", "beam-search", "--live", "--num-draft-tokens", "3"), EXIT_USAGE,
                         "--num-draft-tokens applies to --mode speculative")


def test_a_lesson_constrains_its_output_as_the_command_line_does_and_the_command_line_wins(tmp_path: Path) -> None:
    """A JSON schema written in the lesson or in a file beside it, a regex, a Lark grammar beside it; an option
    given with --live replaces the lesson's constraint, whichever kind each is."""
    (tmp_path / "yes.lark").write_text('start: "yes" | "no"\n', encoding="utf-8")
    (tmp_path / "cat.json").write_text('{"type": "object"}', encoding="utf-8")
    cases = {"json_schema = '{\"type\": \"integer\"}'": ("json_schema", None),
             'json_schema = "cat.json"': ("json_schema", "cat.json"),
             'regex = "[0-9]+"': ("regex", None), 'grammar = "yes.lark"': ("grammar", "yes.lark")}
    for line, (kind, origin) in cases.items():
        path = tmp_path / "mine.toml"
        path.write_text(GOOD + f"[settings]\n{line}\n", encoding="utf-8")
        lesson = load(str(path))
        constraint = lesson_config(lesson, {}).constraint
        assert constraint is not None and (constraint.kind, constraint.origin) == (kind, origin), line
        replaced = lesson_config(lesson, {"regex": "a+"}).constraint
        assert replaced is not None and (replaced.kind, replaced.text) == ("regex", "a+")
        assert lesson_config(lesson, {"max_new_tokens": 5}).constraint == constraint


@pytest.mark.parametrize(("settings", "says"), [
    ('regex = "a["', "line 7: regex does not work: The regex is invalid"),
    ('json_schema = \'{"type": "strin"}\'', "line 7: json_schema does not work: The JSON schema is invalid at $.type"),
    ('grammar = "missing.lark"', "line 7: grammar does not work: The grammar file"),
    ('regex = "a"\njson_schema = "{}"', "line 8: json_schema and regex each constrain the output: keep one"),
    ("regex = 3", "line 7: regex must be a non-empty string"),
])
def test_a_lessons_bad_constraint_names_the_file_the_line_and_the_field(settings: str, says: str,
                                                                        tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(GOOD + f"[settings]\n{settings}\n", encoding="utf-8")
    with pytest.raises(LessonError, match=str(path)) as err:
        lesson_config(load(str(path)), {})
    assert says in str(err.value)


def test_the_readmes_lesson_example_is_a_valid_lesson(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("**Writing a lesson.**", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my-lesson.toml"
    path.write_text(block, encoding="utf-8")
    lesson = load(str(path))
    assert lesson.pauses[0].try_ and lesson.recording_path == tmp_path / "my-lesson.jsonl"
    assert lesson_config(lesson, {}).sampling.top_p == 0.5


def test_live_record_writes_a_recording_the_lesson_then_plays(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                              tmp_path: Path) -> None:
    from decode_tui.core.record.events import Finished, Started
    from decode_tui.tui.recording import read_recording

    from .test_cli import cli

    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace('mode = "greedy"', 'mode = "pld"') + 'recording = "mine.jsonl"\n'
                    "[settings]\nmax_new_tokens = 8\nno_chat = true\n", encoding="utf-8")
    done = cli("lesson", str(path), "--live", "--model", str(tiny_model_dir), "--record", str(tmp_path / "mine.jsonl"),
               env=isolated_env)
    assert done.returncode == 0, done.stderr
    assert "8 tokens" in done.stdout
    header, events = read_recording(tmp_path / "mine.jsonl")
    assert header["settings"]["prompt"] == "hi" and header["settings"]["config"]["mode"] == "pld"
    assert isinstance(events[0][1], Started) and events[0][0] == 0.0, "the clock starts at the run's first event"
    assert isinstance(events[-1][1], Finished) and events[-1][1].new_tokens == 8
    assert load(str(path)).recording_path == tmp_path / "mine.jsonl"
