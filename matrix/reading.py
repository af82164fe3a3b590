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
from dataclasses import dataclass, field
from pathlib import Path

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException
from junitparser import Error, Failure, Skipped, TestCase, TestSuite

MESSAGE_LIMIT = 2000

# A test case's outcome as the file states it, before any judgement.
PASSED, FAILED, ERROR, SKIPPED, XFAIL = "passed", "failed", "error", "skipped", "xfail"


@dataclass(frozen=True)
class CaseResult:
    classname: str
    name: str
    outcome: str
    message: str
    properties: dict[str, str]


@dataclass
class SuiteResult:
    path: str
    name: str
    envelope: dict[str, str]
    cases: list[CaseResult]

    @property
    def cell_id(self) -> str | None:
        return self.envelope.get("cell_id")


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str
    testcases: int = 0


@dataclass
class Inputs:
    files: list[str] = field(default_factory=list)
    suites: list[SuiteResult] = field(default_factory=list)  # attributed to a cell
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
    props = {}
    for container in elem.findall("properties"):
        for prop in container.findall("property"):
            props[prop.get("name", "")] = prop.get("value", prop.text or "")
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
    before = len(into.suites) + len(into.unattributed)
    _walk(path, root, {}, into)
    if len(into.suites) + len(into.unattributed) == before:
        into.unattributed.append(Problem(path, "no test suite in the file"))


def _walk(path: str, elem, inherited: dict[str, str], into: Inputs) -> None:
    if elem.tag == "testsuite":
        envelope = {**inherited, **_properties(elem)}
        suite = TestSuite.fromelem(elem)
        cases = []
        for index, child in enumerate(elem.findall("testcase")):
            case = TestCase.fromelem(child)
            name = child.get("name")
            if not name:
                name = f"<unnamed testcase {index + 1}>"
                into.warnings.append(Problem(path, f"suite {suite.name!r}: a testcase without a name, kept as {name}"))
            outcome, message = _outcome(case)
            cases.append(CaseResult(child.get("classname", ""), name, outcome, message, _properties(child)))
        into.testcases_read += len(cases)
        if cases or not elem.findall("testsuite"):
            if envelope.get("cell_id"):
                into.suites.append(SuiteResult(path, suite.name or "", envelope, cases))
            else:
                into.unattributed.append(
                    Problem(path, f"suite {suite.name!r} has no cell envelope (no cell_id property)", len(cases))
                )
        inherited = envelope
    for child in elem.findall("testsuite"):
        _walk(path, child, inherited, into)


def read_inputs(inputs: list[str]) -> Inputs:
    result = Inputs()
    result.files = expand(inputs)
    for path in result.files:
        read_file(path, result)
    return result
