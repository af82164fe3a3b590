"""The kit's JSON records on disk (the environment record, the plan): read, schema checked, refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matrix.errors import MatrixError
from matrix.io.bounded_json import parse
from matrix.io.files import InputFileError, read_input


def read_record(path: Path, schema: str | tuple[str, ...], name: str, kind: str, again: str) -> dict[str, Any]:
    """The JSON object at ``path`` if it says it is a ``schema`` record (or one of several); else one line: what
    ``name`` is, and ``again``.

    ``kind`` names the record in that line ("a plan record"); ``again`` says how to write a good one.
    """
    schemas = (schema,) if isinstance(schema, str) else schema
    if not path.exists():
        raise MatrixError(f"{name} does not exist: {again}")
    # The reports' bounded reader: a record nested past any the kit writes, or with a number past Python's
    # int() limit, is one line like any other bad record, never a RecursionError or a ValueError.
    try:
        record = parse(read_input(path))
    except InputFileError as exc:
        raise MatrixError(f"{name} is {exc}: {again}") from None
    except MatrixError as exc:
        raise MatrixError(f"{name} cannot be read ({exc}): {again}") from None
    if not isinstance(record, dict) or record.get("schema") not in schemas:
        raise MatrixError(f"{name} is not {kind} (schema {' or '.join(schemas)}): {again}")
    return record
