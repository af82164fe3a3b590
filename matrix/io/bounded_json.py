"""JSON from files the kit did not write, read within bounds: one line for what is wrong, never a traceback.

The one reader of untrusted JSON: the report's inputs (matrix.io.json_input), the kit's own records
(matrix.io.records) and the doctor's matrix. A document nested past any the kit writes, or holding a number past
Python's int() limit, would otherwise stop the reader with a RecursionError or a ValueError. The standard library
alone, and Python 3.8: the doctor, ``env`` and ``plan`` run on a bare runner's Python through it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from matrix.errors import MatrixError

# Far beyond any record the kit writes (about 8 levels), far below what exhausts Python's stack.
MAX_DEPTH = 64
# Counts, sizes and seconds: no honest number in a record comes near this; Python refuses past 4300.
MAX_DIGITS = 100


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
        if isinstance(value, (dict, list)):
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
