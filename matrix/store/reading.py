"""Reading JUnit files from any number of runners, safely, losing nothing.

XML from a runner is untrusted: it is parsed by defusedxml with DTDs refused,
so no entity is expanded, no external entity or local file is read and nothing
is fetched; ``parse`` is the one way the kit reads JUnit (the split and the
summary use it too). Every input ends up somewhere: attributed to a cell (by the envelope's
``cell_id`` property), *unattributed* (no envelope), or *unreadable* (with the
parser's reason). Counts in the files are never trusted; cases are counted.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from xml.etree.ElementTree import Element

from matrix.envelope import Envelope
from matrix.errors import MatrixError
from matrix.junit import (
    ERROR,
    FAILED,
    PASSED,
    Suite,
    UnreadableError,
    outcome,
    parse,
    properties,
    suites,
)
from matrix.plan import Execution
from matrix.releases import UNKNOWN_RELEASE
from matrix.store.claims import Claims, Suspect


class ResultKind(NamedTuple):
    """Which kind of run a cell's result comes from, and whose: results of one cell that differ in either are never
    merged into one case (a native run and a gate-only prediction; the kit's runner and a user's bundle)."""

    execution: Execution | None  # None: an envelope that names none
    community: bool = False  # a user's own run, sent as a bundle (matrix.store.bundle)


@dataclass(frozen=True, slots=True)
class Attempt:
    outcome: str
    message: str
    source: str


@dataclass(slots=True)
class ReadCase:
    """One test case of one cell as the files state it: every attempt at it (judged by matrix.report.status)."""

    classname: str
    name: str
    # One attempt: a tuple, shared by the cases that share it; a rerun makes it a list that grows in place.
    attempts: tuple[Attempt, ...] | list[Attempt]
    properties: Mapping[str, str]  # shared between cases that state the same properties: never changed in place
    run: tuple[int, float, str]  # the latest run it is from, in the order of runs (``run_order``)
    # Attempts from index ``latest`` on are the latest run's and judge the case; those before, earlier runs'.
    latest: int = 0


@dataclass(slots=True)
class CellGroup:
    """Everything the inputs say about one cell under one vLLM release."""

    envelopes: list[Envelope] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # the file each envelope was read from, in the same order
    cases: dict[tuple[str, str], ReadCase] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str
    testcases: int = 0
    # Of the test cases in no cell, how many failed or errored, and the first FAILURES_NAMED of them as
    # "classname::name: outcome: message": a failure the grid cannot place is still a failure, named where a
    # person reads the report, and it fails the report.
    failed: int = 0
    failures: tuple[str, ...] = ()


FAILURES_NAMED = 20


def _unplaced(path: str, reason: str, cases: list[Element]) -> Problem:
    """A problem holding ``cases``, which no cell owns: its failures counted, and the first ones named."""
    named: list[str] = []
    failed = 0
    for case in cases:
        result, message = outcome(case)
        if result in (FAILED, ERROR):
            failed += 1
            if len(named) < FAILURES_NAMED:
                first = message.splitlines()[0] if message else "(no message)"
                named.append(f"{case.get('classname', '')}::{case.get('name', '')}: {result}: {first}"[:500])
    return Problem(path, reason, len(cases), failed, tuple(named))


@dataclass
class Inputs:
    files: list[str] = field(default_factory=list)
    # (vLLM release, cell id, the kind of result): each its own evidence.
    groups: dict[tuple[str, str, ResultKind], CellGroup] = field(default_factory=dict)
    unattributed: list[Problem] = field(default_factory=list)
    unreadable: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    suspect: list[Suspect] = field(default_factory=list)
    testcases_read: int = 0
    # Which runner may claim which cells (--runners); None: every file speaks for any cell.
    claims: Claims | None = field(default=None, repr=False)
    # Each distinct set of case properties once: across hundreds of thousands of cases few sets differ.
    _shared: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = field(default_factory=dict, repr=False)

    def share(self, props: dict[str, str]) -> Mapping[str, str]:
        return self._shared.setdefault(tuple(props.items()), props)


class InputError(ValueError):
    """An input path that names nothing: a person's mistake, reported in one line."""


def _glob(pattern: str) -> list[str]:
    """The paths ``pattern`` matches, ``**`` never descending into a link to a directory (two links to their own
    parent made ``glob.glob`` walk for ever), in a stable order."""
    path = Path(pattern)
    parts = path.parts[1:] if path.anchor else path.parts
    fixed = 0
    while fixed < len(parts) and not glob.has_magic(parts[fixed]):
        fixed += 1
    base = Path(path.anchor or ".", *parts[:fixed])
    if fixed == len(parts):
        return [pattern] if os.path.lexists(pattern) else []
    return sorted(str(hit) for hit in base.glob(str(Path(*parts[fixed:]))))


def _outside(directory: str, path: Path) -> bool:
    """Whether ``path``, found in ``directory``, is a link to something outside it."""
    return path.is_symlink() and not path.resolve().is_relative_to(Path(directory).resolve())


def expand(inputs: list[str]) -> tuple[list[str], list[Problem]]:
    """Files, directories (searched for *.xml) and globs, in a stable order, each once; and the links out of a
    directory given, which are never read (a results tree is read, not whatever its links point at)."""
    found: list[str] = []
    refused: list[Problem] = []
    seen: set[str] = set()
    for item in inputs:
        if os.path.isdir(item):
            hits: list[str] = []
            for found_path in sorted(Path(item).rglob("*.xml")):
                if _outside(item, found_path):
                    reason = f"a link out of {item}, to {os.readlink(found_path)}: not read"
                    refused.append(Problem(str(found_path), reason))
                else:
                    hits.append(str(found_path))
            if not hits and not refused:
                # Nothing to read would be a report of 24 missing cells under "vLLM unknown", exit 0.
                raise InputError(
                    f"{item!r} is a directory without a JUnit file (*.xml): give the one the sessions wrote (results/)"
                )
        elif os.path.exists(item):
            hits = [item]
        else:
            hits = _glob(item)
            if not hits:
                raise InputError(f"{item!r} is not a file, a directory or a glob that matches anything")
        for hit in hits:
            if hit not in seen:
                seen.add(hit)
                found.append(hit)
    return found, refused


def read_file(path: str, into: Inputs, community: bool = False) -> None:
    try:
        root = parse(path)
    except UnreadableError as exc:
        into.unreadable.append(Problem(path, str(exc)))
        return
    found, stray = suites(root)
    if stray:
        reason = f"{len(stray)} testcase(s) outside any <testsuite>, so in no cell"
        into.testcases_read += len(stray)
        into.unattributed.append(_unplaced(path, reason, stray))
    elif not found:
        into.unattributed.append(Problem(path, "no test suite in the file"))
    for suite in found:
        _read_suite(path, suite, into, community)


def run_order(started_at: str) -> tuple[int, float, str]:
    """Where a run stands among the runs of a cell, by when it started: a later run's result for a test supersedes
    an earlier's (a regression is not "flaky" because an older run passed). A start time that cannot be read
    comes before every readable one, so it never hides a run whose time is known."""
    try:
        started = dt.datetime.fromisoformat(started_at)
    except (TypeError, ValueError):
        return (0, 0.0, started_at or "")
    if started.tzinfo is None:
        started = started.replace(tzinfo=dt.UTC)
    return (1, started.timestamp(), "")


def _read_suite(path: str, suite: Suite, into: Inputs, community: bool) -> None:
    children, props, suite_name = suite.cases, suite.props, suite.name
    into.testcases_read += len(children)
    if not props.get("cell_id"):
        reason = f"suite {suite_name!r} has no cell envelope (no cell_id property)"
        into.unattributed.append(_unplaced(path, reason, children))
        return
    try:
        envelope = Envelope.from_properties(props)
    except MatrixError as exc:
        into.unattributed.append(_unplaced(path, f"suite {suite_name!r}: {exc}", children))
        return
    # An envelope that contradicts itself is suspect whatever the runners claim; else the claims decide.
    if contradiction := envelope.contradiction:
        execution = envelope.execution.value if envelope.execution else ""
        artifact = into.claims.artifact(path) if into.claims is not None else ""
        cell, vllm = envelope.cell.id, envelope.vllm_version
        suspect: Suspect | None = Suspect(path, artifact, cell, execution, vllm, len(children), contradiction)
    else:
        suspect = into.claims.suspect(path, envelope, len(children)) if into.claims is not None else None
    if suspect is not None:
        into.suspect.append(suspect)
        return
    run = run_order(envelope.started_at)
    key = (envelope.vllm_version or UNKNOWN_RELEASE, envelope.cell.id, ResultKind(envelope.execution, community))
    group = into.groups.setdefault(key, CellGroup())
    group.envelopes.append(envelope)
    group.files.append(path)
    # Every passing case of a suite has the same attempt (passed, no message, this file): one shared value.
    passed = (Attempt(PASSED, "", path),)
    for index, child in enumerate(children):
        name = child.get("name")
        if not name:
            name = f"<unnamed testcase {index + 1}>"
            into.warnings.append(Problem(path, f"suite {suite_name!r}: a testcase without a name, kept as {name}"))
        result, message = outcome(child)
        attempts = passed if result == PASSED else (Attempt(result, message, path),)
        case_key = (sys.intern(child.get("classname", "")), name)
        record = group.cases.get(case_key)
        if record is None:
            group.cases[case_key] = ReadCase(case_key[0], name, attempts, into.share(properties(child)), run)
        elif record.run == run:  # a rerun within one run: one case, its attempts kept (flaky where they differ)
            if isinstance(record.attempts, tuple):
                record.attempts = list(record.attempts)
            record.attempts.extend(attempts)
            record.properties = into.share({**record.properties, **properties(child)})
        elif record.run < run:  # a later run: it judges the case; the earlier runs' attempts are kept before it
            record.attempts = [*record.attempts, *attempts]
            record.latest = len(record.attempts) - len(attempts)
            record.run = run
            record.properties = into.share(properties(child))
        else:  # an earlier run, read after a later one: kept, not judged
            record.attempts = [*record.attempts[: record.latest], *attempts, *record.attempts[record.latest :]]
            record.latest += len(attempts)


def read_inputs(
    inputs: list[str], claims: Claims | None = None, community: Callable[[str], bool] = lambda path: False
) -> Inputs:
    """Every input read; ``community``: whether a file is a user's bundled result (a ResultKind of its own)."""
    result = Inputs(claims=claims)
    result.files, result.unreadable = expand(inputs)
    for path in result.files:
        read_file(path, result, community(path))
    result._shared.clear()
    return result
