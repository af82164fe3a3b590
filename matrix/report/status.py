"""The status rules: one status per test case, then one per cell, judged against expectations.toml.

Test cases that carry what vLLM decided (``gate_key`` and ``observed``
properties) are judged again against the *current* rules, so a corrected rule
re-judges old results. Other cases are judged by their JUnit outcome.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property

from packaging.version import Version

from matrix.case_facts import CaseFacts
from matrix.cells import CELLS, Cell, Runner
from matrix.envelope import Envelope
from matrix.judge.expectations import Expected, Rule, expected_values, release_version
from matrix.junit import ERROR, FAILED, NO_RESULTS, PASSED, SKIPPED, XFAIL
from matrix.plan import Execution
from matrix.store.reading import Attempt, CellGroup, Inputs, ReadCase, ResultKind
from matrix.variables import GATE_PIN_VALUES


class Status(enum.Enum):
    PASS = "pass"
    KNOWN_FAIL = "known-fail"
    REGRESSION = "regression"
    FIXED = "fixed"
    FLAKY = "flaky"
    CRASHED = "crashed"
    MISROUTED = "misrouted"
    SKIPPED = "skipped"
    MISSING = "missing"
    STALE = "stale"

    def __str__(self) -> str:
        return self.value

    @property
    def is_bad(self) -> bool:
        """Statuses that make the report exit 1."""
        return self in (Status.REGRESSION, Status.CRASHED, Status.MISROUTED)


# When a cell's cases disagree, the cell shows the most urgent.
CELL_PRIORITY = (Status.REGRESSION, Status.FLAKY, Status.FIXED, Status.KNOWN_FAIL, Status.PASS, Status.SKIPPED)


@dataclass(frozen=True, slots=True)
class CaseRecord:
    """One test case of one cell, judged: every attempt at it, its status, and the rule it was judged by."""

    classname: str
    name: str
    attempts: tuple[Attempt, ...]
    properties: Mapping[str, str]  # as the file states them (the wire format: every value a string)
    facts: CaseFacts  # what of them a case states in the kit's own terms: read once, when the case is judged
    status: Status
    expected: str | None = None
    rule: str | None = None
    issue: str | None = None
    earlier: int = 0  # the first attempts, from earlier runs of the cell: kept, not judged

    @property
    def message(self) -> str:
        return next((a.message for a in self.attempts[self.earlier :] if a.outcome != PASSED and a.message), "")


@dataclass
class CellReport:
    cell: Cell
    vllm: str
    status: Status
    reason: str = ""
    envelope: Envelope | None = None  # None: no input mentions the cell
    file: str = ""  # the file the newest envelope was read from
    cases: list[CaseRecord] = field(default_factory=list)
    age_days: float | None = None
    underlying: Status | None = None  # what a stale cell showed
    # Weaker evidence for the same cell (e.g. the hosted gate prediction beside a
    # native run): judged and kept, but the cell's status rests on the strongest.
    superseded: dict[ResultKind, list[CaseRecord]] = field(default_factory=dict)
    # With the runner assignment (--runners): the artifact of the runner that must run the cell natively.
    runner: str = ""
    community: bool = False  # its result is a user's bundle (matrix.store.bundle), not the kit's own run

    @property
    def is_bad(self) -> bool:
        """Makes the report exit 1: a bad status, or a cell its runner left without a fresh result."""
        return self.status.is_bad or (bool(self.runner) and self.status in (Status.MISSING, Status.STALE))

    @property
    def command(self) -> str:
        return f'nox -s "{self.cell.session}" -- --vllm {self.vllm}'

    @property
    def issues(self) -> list[str]:
        return sorted({c.issue for c in self.cases if c.issue and c.status in (Status.KNOWN_FAIL, Status.FIXED)})

    @property
    def counts(self) -> dict[str, int]:
        return status_counts(self.cases)

    def observed(self, key: str, pin_env: str) -> str | None:
        return self.gate_values.get((key, pin_env))

    @cached_property
    def gate_values(self) -> dict[tuple[str, str], str]:
        """(gate key, pin_env) -> what vLLM decided, the first case that says so: indexed once, not per question.

        A kernel-edge case says what vLLM decided under another uname, not under the cell's host: left out.
        """
        values: dict[tuple[str, str], str] = {}
        for case in self.cases:
            decision = case.facts.decision_under_the_cells_host
            if decision is not None:
                values.setdefault((decision.key, decision.pin_env), decision.observed)
        return values

    @cached_property
    def summary(self) -> str:
        """One line of behaviour, e.g. 'pin off→on · UVA off→on · offload pageable-copy→uva'.

        ``a→b``: VLLM_WSL2_ENABLE_PIN_MEMORY unset gives a, =1 gives b.
        """
        parts = []
        keys = [("pin", "pin"), ("uva", "UVA")]
        if self.cell.runner is Runner.V2:
            keys.append(("v2_buffer", ""))
        keys += [("offload_path", "offload"), ("repro", "repro")]
        for key, label in keys:
            values = [shown(v) for pin in GATE_PIN_VALUES if (v := self.observed(key, pin)) is not None]
            if not values:
                continue
            text = values[0] if len(set(values)) == 1 else "→".join(values)
            parts.append(f"{label} {text}".strip())
        return " · ".join(parts)


def status_counts(cases: list[CaseRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for case in cases:
        counts[case.status.value] = counts.get(case.status.value, 0) + 1
    return counts


def shown(value: str) -> str:
    """An observed gate value as people read it: booleans as on/off."""
    return {"True": "on", "False": "off"}.get(value, value)


def _outcome_status(outcome: str, message: str) -> Status:
    if outcome == PASSED:
        return Status.PASS
    if outcome == XFAIL:
        return Status.KNOWN_FAIL
    if outcome == SKIPPED:
        return Status.SKIPPED
    if outcome in (FAILED, ERROR) and message.startswith("[XPASS(strict)]"):
        return Status.FIXED
    return Status.REGRESSION


Resolver = Callable[[str], Mapping[str, Expected]]


def resolver(rules: list[Rule], cell: Cell, vllm: str) -> Resolver:
    """pin_env -> the cell's expected gate values under ``vllm``: resolved once per pin_env, not once per case."""

    @cache
    def expected(pin_env: str) -> Mapping[str, Expected]:
        return expected_values(rules, cell, vllm, pin_env)

    return expected


def facts_reader() -> Callable[[Mapping[str, str]], CaseFacts]:
    """A case's facts from its properties, one value per properties object: the reader shares equal properties
    between cases (reading.Inputs.share), so their facts, which are frozen, can be shared too (150 bytes a case,
    a third of what a judged case holds)."""
    known: dict[int, tuple[Mapping[str, str], CaseFacts]] = {}

    def facts(properties: Mapping[str, str]) -> CaseFacts:
        found = known.get(id(properties))
        if found is None or found[0] is not properties:  # the object itself is kept, so its id is never reused
            found = known[id(properties)] = (properties, CaseFacts.from_properties(properties))
        return found[1]

    return facts


def judge_case(
    case: ReadCase,
    expected_for: Resolver,
    facts_of: Callable[[Mapping[str, str]], CaseFacts] = CaseFacts.from_properties,
) -> CaseRecord:
    """The case's status: gate cases by the current rule for what vLLM decided, others by their JUnit outcome;
    ``facts_of`` reads its properties (``facts_reader``, for a cell's cases)."""
    attempts = tuple(case.attempts)
    status = _by_outcome(attempts[case.latest :])
    facts = facts_of(case.properties)
    if status is Status.FIXED and facts.issue is None:
        # Only a known failure (its case names the issue) can be fixed: pytest's "[XPASS(strict)]" on any
        # other case is text a failing test wrote, and a failure.
        status = Status.REGRESSION
    judged = CaseRecord(case.classname, case.name, attempts, case.properties, facts, status, earlier=case.latest)
    if judged.status is Status.FLAKY:
        return judged
    decision = facts.decision
    if decision is None:
        return judged
    expected = expected_for(decision.pin_env).get(decision.key)
    if expected is None:
        return judged
    matches = decided(decision.observed, expected.value) == expected.value
    if expected.known_issue:
        status = Status.FIXED if matches else Status.KNOWN_FAIL
    else:
        status = Status.PASS if matches else Status.REGRESSION
    return CaseRecord(
        case.classname,
        case.name,
        attempts,
        case.properties,
        facts,
        status,
        str(expected.value),
        expected.rule.id,
        expected.known_issue,
        case.latest,
    )


def _by_outcome(attempts: tuple[Attempt, ...]) -> Status:
    outcomes = {a.outcome for a in attempts}
    if PASSED in outcomes and outcomes & {FAILED, ERROR}:
        return Status.FLAKY
    return _outcome_status(attempts[-1].outcome, attempts[-1].message)


def decided(observed: str, like: object) -> object:
    """What vLLM decided, from the string a JUnit property carries, in the type of the rule's value."""
    if isinstance(like, bool):
        return {"True": True, "False": False}.get(observed, observed)
    return observed


def _age_days(started_at: str, now: dt.datetime) -> float | None:
    try:
        started = dt.datetime.fromisoformat(started_at)
    except (TypeError, ValueError):
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=dt.UTC)
    return round((now - started).total_seconds() / 86400, 2)


def _cell_status(cases: list[CaseRecord]) -> Status:
    present = {c.status for c in cases}
    for status in CELL_PRIORITY:
        if status in present:
            return status
    return Status.SKIPPED


# nox session results that mean a cell's session died.
CRASHES = ("failed", "aborted")


@dataclass(frozen=True)
class NoxRecord:
    result: str  # success | failed | aborted | skipped
    reason: str


def nox_records(reports: list[dict]) -> dict[str, NoxRecord]:
    """Cell id -> the nox session's outcome, from ``nox --report`` JSON (one file per runner)."""
    by_session = {cell.session: cell.id for cell in CELLS}
    records: dict[str, NoxRecord] = {}
    for report in reports:
        for session in report.get("sessions", []):
            for signature in session.get("signatures", []):
                cell = by_session.get(signature)
                known = records.get(cell) if cell else None
                # A failure is never hidden by another runner's success for the same session.
                if cell and not (known and known.result in CRASHES):
                    records[cell] = NoxRecord(str(session.get("result")), str(session.get("reason") or ""))
    return records


def build_cells(
    inputs: Inputs,
    rules: list[Rule],
    now: dt.datetime,
    max_age_days: float | None = None,
    nox: dict[str, NoxRecord] | None = None,
    default_vllm: str = "unknown",
    runners: Mapping[Cell, str] | None = None,
) -> dict[str, list[CellReport]]:
    """vLLM version -> the 24 cells' reports, every case of every attributed suite accounted for.

    ``runners`` (cell -> the artifact of its runner): a cell planned for a GPU runner rests on that
    runner's native (or misrouted) result only; without one it is crashed or missing, never the
    gate prediction, which is kept beside it as weaker evidence.
    """
    nox = nox or {}
    runners = runners or {}
    # The groups are handed over, not kept twice: each is released once judged.
    by_cell: dict[tuple[str, str], dict[ResultKind, CellGroup]] = {}
    for (version, cell_id, kind), group in inputs.groups.items():
        by_cell.setdefault((version, cell_id), {})[kind] = group
    inputs.groups = {}
    versions = sorted({v for v, _ in by_cell}, key=_version_key, reverse=True) or [default_vllm]
    reports: dict[str, list[CellReport]] = {}
    for v in versions:
        reports[v] = []
        for cell in CELLS:
            found = by_cell.pop((v, cell.id), {})
            ranked = sorted(found, key=_strength)
            runner = runners.get(cell, "")
            rests_on = ranked[0] if ranked else None
            if runner and rests_on not in (ResultKind(Execution.NATIVE), ResultKind(Execution.MISROUTED)):
                rests_on = None
            chosen = found.pop(rests_on) if rests_on is not None else None
            report = _cell_report(cell, v, chosen, rules, now, max_age_days, nox, runner)
            report.community = rests_on is not None and rests_on.community
            for kind in ranked:
                if kind != rests_on:
                    expected = resolver(rules, cell, v)
                    facts = facts_reader()
                    cases = found[kind].cases.values()
                    report.superseded[kind] = [judge_case(c, expected, facts) for c in cases]
            reports[v].append(report)
    return reports


def _strength(kind: ResultKind) -> tuple[bool, bool, int]:
    """Which of a cell's results its status rests on: the lowest. Any GPU's result before any prediction, the kit's
    own before a user's of the same kind; a result that names no execution, last."""
    if kind.execution is None:
        return (True, True, len(Execution))
    return (not kind.execution.uses_gpu, kind.community, kind.execution.strength)


def _version_key(version: str) -> tuple[int, Version]:
    """Final releases first, newest first; then what names no final release (a source build, a pre-release),
    never the report's newest: the page's first grid and the doctor's default answer are a release's."""
    ordered = release_version(version)
    if ordered is None:
        return (0, Version("0"))
    final = not (ordered.is_prerelease or ordered.is_postrelease or ordered.local or ordered.epoch)
    return (2 if final else 1, ordered)


def _cell_report(
    cell: Cell,
    vllm: str,
    group: CellGroup | None,
    rules: list[Rule],
    now: dt.datetime,
    max_age_days: float | None,
    nox: dict[str, NoxRecord],
    runner: str = "",
) -> CellReport:
    if group is None:
        record = nox.get(cell.id)
        if record and record.result in CRASHES:
            reason = f"nox session {record.result}: {record.reason}".strip()
            return CellReport(cell, vllm, Status.CRASHED, reason, runner=runner)
        reason = f"no native result from its runner ({runner})" if runner else "no input mentions this cell"
        return CellReport(cell, vllm, Status.MISSING, reason, runner=runner)
    index = max(range(len(group.envelopes)), key=lambda i: group.envelopes[i].started_at)
    newest = group.envelopes[index]
    expected = resolver(rules, cell, vllm)
    facts = facts_reader()
    cases = [judge_case(case, expected, facts) for case in group.cases.values()]
    report = CellReport(
        cell,
        vllm,
        _cell_status(cases),
        envelope=newest,
        file=group.files[index],
        cases=cases,
        age_days=_age_days(newest.started_at, now),
        runner=runner,
    )
    if newest.execution is Execution.MISROUTED:
        report.status, report.reason = Status.MISROUTED, newest.execution_reason
    elif cases and all(c.name == NO_RESULTS for c in cases):
        record = nox.get(cell.id)
        report.status = Status.CRASHED
        report.reason = (
            f"nox session {record.result}: {record.reason}" if record else cases[0].message
        ) or "no results"
    stale = None if max_age_days is None else _stale(newest.started_at, report.age_days, max_age_days)
    if stale:
        report.underlying, report.status, report.reason = report.status, Status.STALE, stale
    return report


# Runners' clocks disagree a little; a start further in the future than this is no time to trust.
CLOCK_SKEW_DAYS = 1 / 24


def _stale(started_at: str, age_days: float | None, max_age_days: float) -> str | None:
    """Why the newest result cannot count as fresh under the limit, or None: too old, or an age nobody can know
    (a start time that is empty, unreadable, or in the future), which must not pass for fresh."""
    limit = f"(limit {max_age_days:g} days)"
    if age_days is None:
        return f"the newest result's start time {started_at!r} cannot be read, so its age is unknown {limit}"
    if age_days < -CLOCK_SKEW_DAYS:
        return f"the newest result's start time {started_at} is {-age_days:g} days in the future {limit}"
    if age_days > max_age_days:
        return f"newest result is {age_days:.1f} days old (limit {max_age_days:g})"
    return None
