"""The kit's JSON records on disk (the environment record, the plan): read, schema checked, refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matrix.errors import MatrixError
from matrix.files import InputFileError, read_input


def read_record(path: Path, schema: str, name: str, kind: str, again: str) -> dict[str, Any]:
    """The JSON object at ``path`` if it says it is a ``schema`` record; else one line: what ``name`` is, and ``again``.

    ``kind`` names the record in that line ("a plan record"); ``again`` says how to write a good one.
    """
    if not path.exists():
        raise MatrixError(f"{name} does not exist: {again}")
    try:
        record = json.loads(read_input(path))
    except InputFileError as exc:
        raise MatrixError(f"{name} is {exc}: {again}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MatrixError(f"{name} is not JSON ({exc}): {again}") from None
    if not isinstance(record, dict) or record.get("schema") != schema:
        raise MatrixError(f"{name} is not {kind} (schema {schema}): {again}")
    return record
