"""compat.json's test cases: one file per release beside it, ``cases/<release>.json``, linked from compat.json.

The cases are nine tenths of a report and grow with every release, while what a reader wants first (the releases,
cells, verdicts and evidence) is small: compat.json (schema ``wslpin-kit.compat/2``) holds that, and names each
release's case file by its path relative to itself and the SHA-256 of its bytes, with how many of its results
contradict their rules. A case file holds, per cell of its release in compat.json's order, the cases judged and
those a stronger result superseded, then the release's contradictions (one per such case, so they are here).
Joined, the two are the one document schema 1 published whole (``joined``), which is what a comparison of two
reports reads.

Standard library only: tools/compat_diff.py joins reports before any environment exists.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from matrix.errors import MatrixError
from matrix.io.bounded_json import parse
from matrix.io.files import InputFileError, read_input
from matrix.text.words import COMPAT_SCHEMA, COMPAT_WHOLE_SCHEMA

CASES_SCHEMA = "wslpin-kit.compat-cases/1"
# A report in one file, its cases inline: what compat.json was before its cases moved out, and what joined() gives.
JOINED_SCHEMA = COMPAT_WHOLE_SCHEMA
CASE_KEYS = ("superseded", "cases")
CASES_DIRECTORY = "cases"
# A release names itself as a file where it is a plain version; any other text a result gave (a local version, a
# million characters, a slash) is named by its digest, which starts with a letter so it never looks like one.
_PLAIN = re.compile(r"[0-9]+(?:\.[0-9a-z]+){0,5}")


def stem(vllm: str) -> str:
    """A release's name as a file's name without its suffix: the page and the cases of a release share it."""
    if len(vllm) <= 40 and _PLAIN.fullmatch(vllm):
        return vllm
    return "r" + hashlib.sha256(vllm.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def cases_path(vllm: str) -> str:
    """Where a release's case file lies, relative to compat.json."""
    return f"{CASES_DIRECTORY}/{stem(vllm)}.json"


def read_cases(compat: Path, version: dict[str, Any]) -> dict[str, Any]:
    """The case file a release of the compat.json at ``compat`` links, checked against the link and the release's
    cells (one entry each, in compat.json's order); else one line saying what is wrong."""
    vllm = version.get("vllm")
    link = version.get("cases")
    again = "copy compat.json together with the cases/ directory beside it, from the same report"
    if not isinstance(vllm, str) or not isinstance(link, dict) or link.get("path") != cases_path(vllm):
        raise MatrixError(f"{compat}: release {vllm!r} does not link its case file as {cases_path(str(vllm))}")
    path = compat.parent / link["path"]
    if not path.exists():
        raise MatrixError(f"{path} does not exist: {again}")
    try:
        data = read_input(path)
    except InputFileError as exc:
        raise MatrixError(f"{path}: {exc}: {again}") from None
    if hashlib.sha256(data).hexdigest() != link.get("sha256"):
        raise MatrixError(f"{path} is not the file {compat} names (its SHA-256 differs): {again}")
    try:
        document = parse(data)
    except MatrixError as exc:
        raise MatrixError(f"{path} cannot be read ({exc}): {again}") from None
    cells = document.get("cells") if isinstance(document, dict) else None
    if (
        not isinstance(document, dict)
        or document.get("schema") != CASES_SCHEMA
        or document.get("vllm") != vllm
        or not isinstance(cells, list)
    ):
        raise MatrixError(f"{path} is not vLLM {vllm}'s case file (schema {CASES_SCHEMA}): {again}")
    if not isinstance(document.get("contradictions"), list):
        raise MatrixError(f"{path} has no list of contradictions: {again}")
    named = [cell.get("id") if isinstance(cell, dict) else None for cell in cells]
    if named != [cell.get("id") if isinstance(cell, dict) else None for cell in version.get("cells") or []]:
        raise MatrixError(f"{path} does not hold the cells {compat} lists for vLLM {vllm}: {again}")
    return document


def read_joined(compat: Path) -> dict[str, Any]:
    """The report whose compat.json is at ``compat`` as one document (``joined``), or one line saying what is
    wrong."""
    try:
        document = parse(read_input(compat))
    except InputFileError as exc:
        raise MatrixError(f"{compat}: {exc}: give a compat.json `python -m matrix report` wrote") from None
    except MatrixError as exc:
        raise MatrixError(
            f"{compat} cannot be read ({exc}): give a compat.json `python -m matrix report` wrote"
        ) from None
    return joined(document, compat)


def joined(document: Any, compat: Path) -> dict[str, Any]:
    """A compat.json's ``document``, read from ``compat``, as one document, its case files (beside ``compat``)
    joined in: what schema 1 held in one file (a document of schema 1 is returned as it is)."""
    again = "give a compat.json `python -m matrix report` wrote"
    schema = document.get("schema") if isinstance(document, dict) else None
    if schema == JOINED_SCHEMA:
        return document
    if schema != COMPAT_SCHEMA or not isinstance(document.get("versions"), list):
        raise MatrixError(f"{compat} is not a report's compat.json (schema {COMPAT_SCHEMA}): {again}")
    contradictions = []
    for version in document["versions"]:
        if not isinstance(version, dict) or not isinstance(version.get("cells"), list):
            raise MatrixError(f"{compat} has a release that is not an object with a list of cells: {again}")
        cases = read_cases(compat, version)
        for cell, found in zip(version["cells"], cases["cells"], strict=True):
            cell.update({key: found.get(key, []) for key in CASE_KEYS})
        contradictions += cases["contradictions"]
        del version["cases"], version["contradictions"]
    document["schema"] = JOINED_SCHEMA
    document["contradictions"] = contradictions
    return document
