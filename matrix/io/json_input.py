"""The report's JSON inputs (--previous, --nox-report, probe and benchmark records): read, bounded, schema checked.

Each kind has a JSON Schema in schemas/ that holds what the report reads of it and nothing more, so a
record written by an older kit still passes. Whatever is wrong with a file is one line naming it, the
JSON path of the first problem, and what to give instead: never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from matrix.errors import MatrixError
from matrix.io.bounded_json import parse
from matrix.io.files import InputFileError, read_input

SCHEMAS = Path(__file__).with_name("schemas")
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
ENGINE_BENCH = JsonKind(
    "--engine-bench",
    "an engine-level benchmark record",
    "engine-bench.schema.json",
    "give records the offline GPU run wrote (its bench.json, `*.engine-bench.json` once `matrix import-run` copied it)",
)

RUNNERS = JsonKind(
    "--runners",
    "a runner matrix",
    "runners.schema.json",
    "give the output of `python -m matrix plan --format runners` (the plan job's runners output)",
)


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
