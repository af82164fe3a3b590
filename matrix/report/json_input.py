"""The report's JSON inputs (--previous, --nox-report, probe and benchmark records): read, bounded, schema checked.

Each kind has a JSON Schema in schemas/ that holds what the report reads of it and nothing more, so a
record written by an older kit still passes. Whatever is wrong with a file is one line naming it, the
JSON path of the first problem, and what to give instead: never a traceback.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from matrix.errors import MatrixError
from matrix.files import InputFileError, read_input

SCHEMAS = Path(__file__).with_name("schemas")
# Far beyond any record the kit writes (about 8 levels), far below what exhausts Python's stack.
MAX_DEPTH = 64
# Counts, sizes and seconds: no honest number in a record comes near this; Python refuses past 4300.
MAX_DIGITS = 100
QUOTED = 80  # characters of a schema message kept: it may quote a whole value


@dataclass(frozen=True, slots=True)
class JsonKind:
    """One kind of JSON input: the option that gives it, what it is, its schema, what to give instead."""

    option: str
    what: str
    schema: str
    instead: str


PREVIOUS = JsonKind(
    "--previous",
    "a compat.json",
    "previous.schema.json",
    "give the compat.json an earlier `python -m matrix report` wrote",
)
NOX_REPORT = JsonKind(
    "--nox-report", "`nox --report` JSON", "nox-report.schema.json", "give the file `nox --report FILE` wrote"
)
PROBE = JsonKind(
    "--probes",
    "a probe record",
    "probe.schema.json",
    "give a directory holding only records `python -m repro probe --out` wrote",
)
BENCH = JsonKind(
    "--bench",
    "a benchmark record",
    "bench.schema.json",
    "give a directory whose bench.json files `python -m repro bench` wrote",
)

RUNNERS = JsonKind(
    "--runners",
    "a runner matrix",
    "runners.schema.json",
    "give the output of `python -m matrix plan --format github` (the plan job's matrix)",
)


class _RefusedError(Exception):
    """A number the parser hooks refuse; the reason is its message."""


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _RefusedError(f"a number of {digits} digits (at most {MAX_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _RefusedError(f"a number too large for a float: {text[:20]}...")
    return value


def _constant(name: str) -> float:
    raise _RefusedError(f"{name}, which JSON does not have")


def _depth(document: Any) -> int:
    """How deeply ``document`` nests, counted without recursion (a deep one would exhaust the stack)."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def parse(data: bytes) -> Any:
    """``data`` as JSON, or MatrixError saying in a few words what is wrong with it (no file named)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MatrixError(f"not UTF-8: byte {data[exc.start]:#04x} at offset {exc.start}") from None
    try:
        document = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise MatrixError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except _RefusedError as exc:
        raise MatrixError(str(exc)) from None
    except RecursionError:
        raise MatrixError(f"nested deeper than {MAX_DEPTH} levels") from None
    if _depth(document) > MAX_DEPTH:
        raise MatrixError(f"nested deeper than {MAX_DEPTH} levels")
    if _SURROGATE_ESCAPE.search(text):
        document = _surrogates_shown(document)
    return document


# JSON can spell half of a UTF-16 pair (``"\\ud800"``) where UTF-8 cannot: such a string cannot be written to
# any output, and one runner's file once stopped the whole report. Kept as the escape it was written as.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogates_shown(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
    if isinstance(value, dict):
        return {_surrogates_shown(k): _surrogates_shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_surrogates_shown(v) for v in value]
    return value


@cache
def _validator(schema: str) -> Any:
    # Imported here: jsonschema is the report extra's, and `python -m repro` imports this package's bench.py.
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads((SCHEMAS / schema).read_text()))


_TYPES = {"object": "an object", "array": "an array", "string": "a string", "integer": "an integer"}
_TYPES |= {"number": "a number", "boolean": "a boolean", "null": "null"}


def _type_name(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null", int: "integer"}
    return _TYPES[names.get(type(value), "number")]


def schema_problem(document: Any, schema: str) -> str | None:
    """Where and how ``document`` breaks the schema, in a few words; None when it does not."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator(schema).iter_errors(document))
    if error is None:
        return None
    if error.validator == "type":
        wanted = [error.validator_value] if isinstance(error.validator_value, str) else error.validator_value
        expected = " or ".join(_TYPES[name] for name in wanted)
        return f"at {error.json_path}, {_type_name(error.instance)} where {expected} was expected"
    message = error.message if len(error.message) <= QUOTED else error.message[:QUOTED] + "..."
    return f"at {error.json_path}, {message}"


def read_json_input(path: Path, kind: JsonKind) -> Any:
    """The JSON document at ``path`` if it is a ``kind``; else MatrixError, one line naming the file."""
    try:
        data = read_input(path)
    except InputFileError as exc:
        raise MatrixError(f"{kind.option} {path} {exc}: {kind.instead}") from None
    try:
        document = parse(data)
        problem = schema_problem(document, kind.schema)
    except MatrixError as exc:
        problem = str(exc)
    if problem is not None:
        raise MatrixError(f"{kind.option} {path} is not {kind.what} ({problem}): {kind.instead}")
    return document
