"""Reading JUnit files from any number of runners, safely, losing nothing.

XML from a runner is untrusted: it is parsed by defusedxml with DTDs refused,
so no entity is expanded, no external entity or local file is read and nothing
is fetched. junitparser then reads suites, properties and results over that
tree. Every input ends up somewhere: attributed to a cell (by the envelope's
``cell_id`` property), *unattributed* (no envelope), or *unreadable* (with the
parser's reason). Counts in the files are never trusted; cases are counted.
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException
from junitparser import Error, Failure, Skipped, TestCase

from matrix.cells import Cell
from matrix.errors import MatrixError

MESSAGE_LIMIT = 2000

# A test case's outcome as the file states it, before any judgement.
PASSED, FAILED, ERROR, SKIPPED, XFAIL = "passed", "failed", "error", "skipped", "xfail"


@dataclass(frozen=True, slots=True)
class Attempt:
    outcome: str
    message: str
    source: str


@dataclass(slots=True)
class CaseRecord:
    """One test case of one cell: every attempt at it, and (once judged by matrix.report.status) its status."""

    classname: str
    name: str
    attempts: tuple[Attempt, ...]
    properties: dict[str, str]
    status: object = None  # a matrix.report.status.Status once judged
    expected: str | None = None
    rule: str | None = None
    issue: str | None = None

    @property
    def message(self) -> str:
        return next((a.message for a in self.attempts if a.outcome != PASSED and a.message), "")


@dataclass
class CellGroup:
    """Everything the inputs say about one cell under one vLLM release."""

    envelopes: list[dict[str, str]] = field(default_factory=list)
    cases: dict[tuple[str, str], CaseRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str
    testcases: int = 0


@dataclass
class Inputs:
    files: list[str] = field(default_factory=list)
    # (vLLM release, cell id, execution): a native run and a gate-only prediction of
    # the same cell are different evidence and never merged into one case.
    groups: dict[tuple[str, str, str], CellGroup] = field(default_factory=dict)
    unattributed: list[Problem] = field(default_factory=list)
    unreadable: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    testcases_read: int = 0


class InputError(ValueError):
    """An input path that names nothing: a person's mistake, reported in one line."""


def expand(inputs: list[str]) -> list[str]:
    """Files, directories (searched for *.xml) and globs, in a stable order, each once."""
    found: list[str] = []
    for item in inputs:
        if os.path.isdir(item):
            hits = sorted(str(p) for p in Path(item).rglob("*.xml"))
        elif os.path.exists(item):
            hits = [item]
        else:
            hits = sorted(glob.glob(item, recursive=True))
            if not hits:
                raise InputError(f"{item!r} is not a file, a directory or a glob that matches anything")
        found.extend(h for h in hits if h not in found)
    return found


def _outcome(case: TestCase) -> tuple[str, str]:
    results = case.result
    for kind, label in ((Error, ERROR), (Failure, FAILED)):
        for r in results:
            if isinstance(r, kind):
                return label, _message(r)
    for r in results:
        if isinstance(r, Skipped):
            return (XFAIL if (r.type or "") == "pytest.xfail" else SKIPPED), _message(r)
    return PASSED, ""


def _message(result) -> str:
    text = " ".join(part for part in (result.message, result.text) if part)
    return text.strip()[:MESSAGE_LIMIT]


def _properties(elem) -> dict[str, str]:
    # Interned: the same few names and values repeat across hundreds of thousands of cases.
    props = {}
    for container in elem.findall("properties"):
        for prop in container.findall("property"):
            value = prop.get("value", prop.text or "")
            props[sys.intern(prop.get("name", ""))] = sys.intern(value) if len(value) < 64 else value
    return props


def read_file(path: str, into: Inputs) -> None:
    try:
        root = SafeET.parse(path, forbid_dtd=True).getroot()
    except DefusedXmlException as exc:
        into.unreadable.append(Problem(path, f"refused: {type(exc).__name__} (DTDs and entities are not allowed)"))
        return
    except SafeET.ParseError as exc:
        into.unreadable.append(Problem(path, f"not well-formed XML: {exc}"))
        return
    except (OSError, ValueError) as exc:
        into.unreadable.append(Problem(path, f"cannot be read: {exc}"))
        return
    if root.tag not in ("testsuites", "testsuite"):
        into.unreadable.append(Problem(path, f"root element is <{root.tag}>, not <testsuites> or <testsuite>"))
        return
    if root.tag == "testsuites" and root.find(".//testsuite") is None:
        into.unattributed.append(Problem(path, "no test suite in the file"))
    _walk(path, root, {}, into)


def _walk(path: str, elem, inherited: dict[str, str], into: Inputs) -> None:
    if elem.tag == "testsuite":
        envelope = {**inherited, **_properties(elem)}
        _read_suite(path, elem, envelope, into)
        inherited = envelope
    for child in elem.findall("testsuite"):
        _walk(path, child, inherited, into)


def _read_suite(path: str, elem, envelope: dict[str, str], into: Inputs) -> None:
    children = elem.findall("testcase")
    if not children and elem.findall("testsuite"):
        return  # a container: its nested suites carry the cases
    suite_name = elem.get("name", "")
    into.testcases_read += len(children)
    cell_id = envelope.get("cell_id")
    if not cell_id:
        reason = f"suite {suite_name!r} has no cell envelope (no cell_id property)"
        into.unattributed.append(Problem(path, reason, len(children)))
        return
    try:
        Cell.parse(cell_id)
    except MatrixError as exc:
        into.unattributed.append(Problem(path, f"suite {suite_name!r}: cell_id is not a cell: {exc}", len(children)))
        return
    key = (envelope.get("vllm_version") or "unknown", cell_id, envelope.get("execution", ""))
    group = into.groups.setdefault(key, CellGroup())
    group.envelopes.append(envelope)
    for index, child in enumerate(children):
        name = child.get("name")
        if not name:
            name = f"<unnamed testcase {index + 1}>"
            into.warnings.append(Problem(path, f"suite {suite_name!r}: a testcase without a name, kept as {name}"))
        outcome, message = _outcome(TestCase.fromelem(child))
        attempt = Attempt(outcome, message, path)
        key = (sys.intern(child.get("classname", "")), name)
        record = group.cases.get(key)
        if record is None:
            group.cases[key] = CaseRecord(key[0], name, (attempt,), _properties(child))
        else:  # a rerun, or the same test from another runner: one case, its attempts kept
            record.attempts += (attempt,)
            record.properties.update(_properties(child))


def read_inputs(inputs: list[str]) -> Inputs:
    result = Inputs()
    result.files = expand(inputs)
    for path in result.files:
        read_file(path, result)
    return result
