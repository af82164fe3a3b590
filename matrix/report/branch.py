"""What a vLLM branch changes against the release it was cut from: per cell, each question and each checked value,
fixed, regressed or unchanged.

The expectations (matrix/judge/expectations.toml) are written for releases: a branch that fixes a known issue "fails"
them, and a summary counts it as a failure. Here the judgement is the difference instead. Both sides are read
and judged as the report reads and judges them (matrix.store.reading, matrix.report.status, matrix.judge.verdicts):

* a case (a gate value, or any other test) is *right* where its status is pass or fixed (a known issue's
  expected value met), *wrong* where it is a regression, flaky or a known failure; a case that moves from wrong
  to right is fixed, one that becomes wrong, or stops being right (skipped, gone), regressed;
* a question's verdict is right where it is the verdict the cell would get if every value the expectations
  name were as they say; a verdict that becomes right is fixed, one that stops being right regressed, and
  between two verdicts neither of which is right, the more urgent one (matrix.judge.verdicts.URGENCY) is the worse.

Pure functions over two sides' cell reports; reading them from files is ``read_side``'s.
"""

from __future__ import annotations

import datetime as dt
import enum
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from matrix.cells import Cell
from matrix.errors import MatrixError
from matrix.judge.expectations import Rule, expected_values, load_rules
from matrix.judge.verdicts import URGENCY, CellVerdicts, Observations, OutcomeRule, load_verdict_rules, release_verdicts
from matrix.questions import Question, Verdict
from matrix.report.model import observations, row_name
from matrix.report.status import CaseRecord, CellReport, Status, build_cells
from matrix.store.history_archive import COMMITTED_HISTORY, read_committed
from matrix.store.reading import InputError, read_inputs
from matrix.text.cli import KIT_ROOT
from matrix.variables import GATE_PIN_VALUES


class Change(enum.StrEnum):
    FIXED = "fixed"
    REGRESSED = "regressed"
    UNCHANGED = "unchanged"


RIGHT = frozenset({Status.PASS, Status.FIXED})
WRONG = frozenset({Status.REGRESSION, Status.FLAKY, Status.KNOWN_FAIL})
# A cell whose result cannot be judged case by case: the whole result is one row.
UNJUDGED = frozenset({Status.CRASHED, Status.MISROUTED, Status.MISSING, Status.STALE})


def change(before_right: bool, after_right: bool, before_wrong: bool = False, after_wrong: bool = False) -> Change:
    """A check's change: fixed where it becomes right from wrong, regressed where it becomes wrong or stops being
    right (a value nobody judges, skipped or gone, is neither)."""
    if (after_wrong and not before_wrong) or (before_right and not after_right):
        return Change.REGRESSED
    if before_wrong and after_right:
        return Change.FIXED
    return Change.UNCHANGED


@dataclass(frozen=True)
class Item:
    """What one row compares: a question, a case's decision (key, pin_env, kernel edge) or another test."""

    question: Question | None = None
    key: str | None = None
    pin_env: str | None = None
    kernel_edge: str | None = None
    test: str | None = None  # a test with no decision, by its name without the cell's id


@dataclass(frozen=True)
class Row:
    cell: Cell
    item: Item
    release: str | None  # a verdict, a decided value, or a case's or cell's status; None: the side has none
    branch: str | None
    change: Change
    issue: str | None = None  # the known issue the case's expectation names


@dataclass(frozen=True)
class BranchDiff:
    release: str
    branch: str
    rows: tuple[Row, ...]  # every question and case of every cell compared, cell by cell

    @property
    def changed(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.change is not Change.UNCHANGED)

    @property
    def regressed(self) -> bool:
        return any(r.change is Change.REGRESSED for r in self.rows)

    def count(self, which: Change) -> int:
        return sum(r.change is which for r in self.rows)


def _intended(report: CellReport, rules: list[Rule]) -> Observations:
    """The cell's observations with every value the expectations name as they say it: what it would show if
    vLLM decided as the kit expects (values it never showed stay unshown: a gate run shows no engine's)."""
    seen = observations(report)
    values = dict(seen.values)
    for pin_env in GATE_PIN_VALUES:
        for key, expected in expected_values(rules, report.cell, report.vllm, pin_env).items():
            if (key, pin_env) in values:
                values[key, pin_env] = str(expected.value)
    return Observations(values, seen.level)


def _verdicts(
    reports: Mapping[Cell, CellReport], rules: list[Rule], verdict_rules: tuple[OutcomeRule, ...]
) -> tuple[dict[Cell, CellVerdicts], dict[Cell, CellVerdicts]]:
    """Each cell's verdicts, and those it would get with every expectation met."""
    vllm = next(iter(reports.values())).vllm
    seen = release_verdicts(verdict_rules, vllm, {c: observations(r) for c, r in reports.items()})
    intended = release_verdicts(verdict_rules, vllm, {c: _intended(r, rules) for c, r in reports.items()})
    return seen, intended


def _verdict_change(before: Verdict, after: Verdict, right_before: Verdict, right_after: Verdict) -> Change:
    if before is after:
        return Change.UNCHANGED
    was, now = before is right_before, after is right_after
    judged = change(was, now, not was, not now)
    if judged is not Change.UNCHANGED:
        return judged
    return Change.REGRESSED if URGENCY.index(after) < URGENCY.index(before) else Change.FIXED


def _item(case: CaseRecord, cell: Cell) -> Item:
    facts = case.facts
    if facts.decision is not None:
        return Item(key=facts.decision.key, pin_env=facts.decision.pin_env, kernel_edge=facts.kernel_edge)
    return Item(test=row_name(cell.id, case.name).replace("[]", ""))


def _shown(case: CaseRecord | None) -> str | None:
    if case is None:
        return None
    decision = case.facts.decision
    return decision.observed if decision is not None else case.status.value


def _case_rows(cell: Cell, before: CellReport, after: CellReport) -> list[Row]:
    if before.status in UNJUDGED or after.status in UNJUDGED:
        moved = change(before.status not in UNJUDGED, after.status not in UNJUDGED)
        return [Row(cell, Item(test="result"), before.status.value, after.status.value, moved)]
    old = {c.name: c for c in before.cases}
    new = {c.name: c for c in after.cases}
    rows = []
    for name in dict.fromkeys([*old, *new]):
        was, now = old.get(name), new.get(name)
        was_status, now_status = (c.status if c else None for c in (was, now))
        moved = change(was_status in RIGHT, now_status in RIGHT, was_status in WRONG, now_status in WRONG)
        case = now or was
        assert case is not None
        issue = next((c.issue for c in (now, was) if c is not None and c.issue), None)
        rows.append(Row(cell, _item(case, cell), _shown(was), _shown(now), moved, issue))
    return rows


def compare(
    release: Mapping[Cell, CellReport],
    branch: Mapping[Cell, CellReport],
    rules: list[Rule],
    verdict_rules: tuple[OutcomeRule, ...],
) -> BranchDiff:
    """``branch``'s cells against the same cells of ``release``: one row per question and per case."""
    if set(release) != set(branch):
        raise MatrixError(
            f"the release's results hold cells {sorted(c.id for c in release)} and the branch's "
            f"{sorted(c.id for c in branch)}: compare the same cells"
        )
    seen_before, right_before = _verdicts(release, rules, verdict_rules)
    seen_after, right_after = _verdicts(branch, rules, verdict_rules)
    rows: list[Row] = []
    for cell in sorted(branch):
        for question in Question:
            was, now = seen_before[cell][question].verdict, seen_after[cell][question].verdict
            moved = _verdict_change(was, now, right_before[cell][question].verdict, right_after[cell][question].verdict)
            rows.append(Row(cell, Item(question=question), was.value, now.value, moved))
        rows += _case_rows(cell, release[cell], branch[cell])
    (release_vllm,) = {r.vllm for r in release.values()}
    (branch_vllm,) = {r.vllm for r in branch.values()}
    return BranchDiff(release_vllm, branch_vllm, tuple(rows))


def release_of(vllm: str) -> str:
    """The release a source tree's version (``0.33.0+g1a2b3c4.dirty``, matrix.commands.vllm_source) was cut from."""
    try:
        return Version(vllm).public
    except InvalidVersion:
        raise MatrixError(f"the branch's results name vLLM {vllm!r}, not a version a release is cut from") from None


def read_side(directory: Path, cells: list[Cell], rules: list[Rule]) -> dict[Cell, CellReport]:
    """``cells``' results in ``directory`` (``<cell>.xml``), read and judged as the report judges them."""
    absent = [c.id for c in cells if not (directory / f"{c.id}.xml").is_file()]
    if absent:
        raise MatrixError(f"no result for {', '.join(absent)} in {directory}/: run those cells first")
    try:
        inputs = read_inputs([str(directory / f"{c.id}.xml") for c in cells])
    except InputError as exc:
        raise MatrixError(str(exc)) from None
    problem = next(iter(inputs.unreadable + inputs.unattributed), None)
    if problem is not None:
        raise MatrixError(f"{problem.path} is not a cell's result file ({problem.reason}): run the cell again")
    versions = build_cells(inputs, rules, dt.datetime.now(dt.UTC))
    if len(versions) != 1:
        raise MatrixError(f"{directory}/ holds results of vLLM {', '.join(sorted(versions))}: give one release's")
    (reports,) = versions.values()
    return {r.cell: r for r in reports if r.cell in cells}


def read_committed_side(archive: Path, release: str, cells: list[Cell], rules: list[Rule]) -> dict[Cell, CellReport]:
    """``cells``' gate results of ``release`` as the kit's committed history holds them (``nox -s publish``)."""
    files = read_committed(archive).get(release)
    if files is None:
        raise MatrixError(
            f"vLLM {release}'s gate results are not in {archive}: run the release's gate "
            f"(`nox -s gate -- --vllm {release} --cells ...`, an install and a few minutes) and give its "
            f"results/{release}/gate with --release-results"
        )
    with tempfile.TemporaryDirectory(prefix="wslpin-release-") as scratch:
        for cell in cells:
            name = f"{cell.id}.xml"
            if name in files:
                (Path(scratch) / name).write_bytes(files[name])
        return read_side(Path(scratch), cells, rules)


def against_release(branch_results: Path, release_results: Path | None, cells: list[Cell]) -> tuple[BranchDiff, str]:
    """What the gate results in ``branch_results`` change against their release's: those in ``release_results``,
    else the committed history's; and a few words naming where the release's side came from."""
    rules = load_rules()
    branch = read_side(branch_results, cells, rules)
    release = release_of(next(iter(branch.values())).vllm)
    if release_results is None:
        archive = KIT_ROOT / COMMITTED_HISTORY
        before = read_committed_side(archive, release, cells, rules)
        source = f"vLLM {release}'s gate results committed in {COMMITTED_HISTORY}"
    else:
        before = read_side(release_results, cells, rules)
        source = f"the gate results in {release_results}/"
    return compare(before, branch, rules, load_verdict_rules()), source
