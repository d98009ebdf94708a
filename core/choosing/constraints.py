"""A constraint's text turned into llguidance's grammar and checked, without torch or a tokenizer.

Front ends call :func:`grammar_text` before they load a model, so an invalid JSON schema, regex or Lark grammar
is refused in milliseconds with the library's message and where the error is (line and column, or the schema's
JSON path). It knows constraint texts, not tokens: :mod:`decode_tui.core.choosing.grammar` compiles them for a
tokenizer.
"""

from __future__ import annotations

import json
from typing import Any

import llguidance

from ..errors import UsageError
from ..params import Constraint

# JSON without free whitespace, separated as json.dumps separates it: a model may otherwise pad its output
# with spaces and newlines for as long as it likes. A schema's own "x-guidance" options override these.
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def grammar_text(constraint: Constraint) -> str:
    """llguidance's grammar for ``constraint``, checked: a UsageError with the library's message and where the
    error is (line and column, or the schema's JSON path) when it is invalid. Needs no tokenizer, so a front end
    checks a constraint before it loads a model."""
    if constraint.kind == "json_schema":
        schema = _schema(constraint)
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)  # type: ignore[arg-type]
    elif constraint.kind == "regex":
        grammar = llguidance.LLMatcher.grammar_from_regex(ascii_digits(constraint.text))
    else:
        grammar = llguidance.LLMatcher.grammar_from_lark(constraint.text)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise UsageError(f"The {constraint.describe()} is invalid: {messages[0].strip()}")
    return grammar


def ascii_digits(regex: str) -> str:
    """``regex`` with ``\\d`` as ``[0-9]`` and ``\\D`` as ``[^0-9]``: what a user writing a phone number or a date
    means, and what a JSON schema's ``pattern`` means (ECMA-262). llguidance reads ``\\d`` as Rust's regex crate does,
    any Unicode digit, and the embedded model, asked for ``\\d{3}``, wrote U+1FBF8 (segmented digit eight) three
    times. No library rewrites one class in a regex, so this walks it: an escaped backslash is skipped whole, and
    inside a ``[...]`` class ``\\d`` becomes the range ``0-9`` (a ``\\D`` there is left as it is: a negated class
    cannot be spliced into another)."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(regex):
        char = regex[i]
        if char == "\\" and i + 1 < len(regex):
            escaped = regex[i + 1]
            if escaped == "d":
                out.append("0-9" if in_class else "[0-9]")
            elif escaped == "D" and not in_class:
                out.append("[^0-9]")
            else:
                out.append(regex[i:i + 2])
            i += 2
            continue
        if char == "[" and not in_class:
            in_class = True
            out.append(char)
            # A ']' right after '[' or '[^' is a literal, not the class's end.
            j = i + 1
            if j < len(regex) and regex[j] == "^":
                out.append("^")
                j += 1
            if j < len(regex) and regex[j] == "]":
                out.append("]")
                j += 1
            i = j
            continue
        if char == "]" and in_class:
            in_class = False
        out.append(char)
        i += 1
    return "".join(out)


def _schema(constraint: Constraint) -> dict[str, Any]:
    """The JSON schema, parsed and checked against its meta-schema (jsonschema names the failing JSON path)."""
    import jsonschema  # only for a schema

    try:
        schema = json.loads(constraint.text)
    except json.JSONDecodeError as err:
        raise UsageError(f"The {constraint.describe()} is not JSON: {err.msg} at line {err.lineno}, column "
                         f"{err.colno}.") from None
    if not isinstance(schema, dict):
        raise UsageError(f"The {constraint.describe()} must be a JSON object, not {type(schema).__name__}.")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as err:
        raise UsageError(f"The {constraint.describe()} is invalid at {err.json_path}: {err.message}") from None
    return schema


