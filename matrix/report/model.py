"""The compatibility report: every input read, every cell judged, the diff with the last report."""

from __future__ import annotations

import datetime as dt
import enum
import gc
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from matrix.cells import Host, Mode, ModelClass, Runner, Stack
from matrix.errors import MatrixError
from matrix.judge.expectations import (
    RUNNER_BY_ARCHITECTURE,
    V2_ARCHITECTURES,
    Rule,
    default_runner_key,
    load_rules,
    release_version,
)
from matrix.judge.verdicts import (
    CellVerdicts,
    Level,
    Observations,
    OutcomeRule,
    load_verdict_rules,
    release_verdicts,
    with_upgrades,
)
from matrix.plan import Execution
from matrix.report.bench import BenchSummary, latest_per_cell
from matrix.report.status import CellReport, Status, build_cells, nox_records, status_counts
from matrix.store.claims import Claims
from matrix.store.engine_bench import EngineBench, read_engine_bench
from matrix.store.evidence import Source, origin, verified
from matrix.store.layout import ENGINE_BENCH_SUFFIX
from matrix.store.probe import Probe, load_probes
from matrix.store.reading import Inputs, Problem, ResultKind, read_inputs
from matrix.variables import UNSET

# The grid's order: rows stack x host, columns runner x mode.
ROWS = [(stack, host) for stack in Stack for host in Host]
COLUMNS = [(runner, mode) for runner in Runner for mode in Mode]


@dataclass(frozen=True, slots=True)
class Change:
    vllm: str
    cell: str
    was: str
    now: str


@dataclass
class Diff:
    new_regressions: list[Change] = field(default_factory=list)
    newly_fixed: list[Change] = field(default_factory=list)
    went_missing: list[Change] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReleaseChange:
    """A cell behaving differently from the release before: what changed, and the rules that say why."""

    cell: str
    vllm: str
    before: str
    after: str
    rules: tuple[str, ...]  # "rule-id: note (issue)" of rules that start at this release


@dataclass(frozen=True, slots=True)
class Contradiction:
    """A result that a rule without a known issue got wrong, or a known issue that no longer holds."""

    vllm: str
    cell: str
    rule: str
    key: str
    pin_env: str
    expected: str
    observed: str
    status: str


class EvidenceKind(enum.StrEnum):
    GATE_ONLY = "gate-only"  # vLLM's own decision code, no GPU
    EMULATED = "emulated"
    NATIVE = "native"
    SUPERSEDED = "superseded"  # a weaker result for the same cell, not used for its status
    PROBE = "probe"
    BENCH = "bench"


@dataclass(frozen=True)
class Evidence:
    """One thing a cell's result rests on; the renderers put it in words."""

    kind: EvidenceKind
    date: str  # YYYY-MM-DD, or "" when the kind has none
    source: str  # the GPU (emulated, native, probe), or the vLLM release (gate-only, bench)
    runner: str | None = None  # native, emulated: the runner, or the run's name (an offline GPU run)
    execution: ResultKind | None = None  # superseded
    counts: tuple[tuple[str, int], ...] | None = None  # superseded: (status, cases), by status
    passed: bool | None = None  # probe: did the mechanism work
    bench: BenchSummary | None = None  # bench
    origin: Source | None = None  # gate-only, emulated, native: who brought it into an evidence store, if one


@dataclass
class Report:
    generated_at: dt.datetime
    kit_commit: str
    inputs: Inputs
    versions: dict[str, list[CellReport]]
    max_age_days: float | None = None
    diff: Diff | None = None
    probes: list[Probe] = field(default_factory=list)
    engine_benches: list[EngineBench] = field(default_factory=list)  # the offline GPU run's engine-level A/Bs
    changes: list[ReleaseChange] = field(default_factory=list)
    benches: dict[tuple[str, str], BenchSummary] = field(default_factory=dict)  # the latest per (cell id, vLLM)
    verdicts: dict[tuple[str, str], CellVerdicts] = field(default_factory=dict)  # (vLLM, cell id)
    # Cells of runs that crashed before vLLM answered (no release to place them in): shown, never a release.
    unplaced: list[CellReport] = field(default_factory=list)
    stores: tuple[Path, ...] = ()  # the evidence stores read beside the inputs

    def bench(self, cell: CellReport) -> BenchSummary | None:
        """The cell's latest benchmark of its own release."""
        return self.benches.get((cell.cell.id, cell.vllm))

    def default_runners(self, vllm: str) -> dict[str, str | None]:
        """Per model class, the runner vLLM's config picks with VLLM_USE_V2_MODEL_RUNNER unset, as the release's
        cells observed it; None where none did, or they disagree."""
        runners = {}
        for kind in ModelClass:
            chosen = {c.observed(default_runner_key(kind), UNSET) for c in self.versions[vllm]} - {None}
            runners[kind.value] = chosen.pop() if len(chosen) == 1 else None
        return runners

    def v2_architectures(self, vllm: str) -> dict[str, dict] | None:
        """``find_v2_architectures`` of the release, found once: every output asks it of every release."""
        return self._architectures[vllm]

    @cached_property
    def _architectures(self) -> dict[str, dict[str, dict] | None]:
        return {vllm: self.find_v2_architectures(vllm) for vllm in self.versions}

    def find_v2_architectures(self, vllm: str) -> dict[str, dict] | None:
        """Per stack, which architectures vLLM's config gives the V2 runner by default and which runner each class
        of architecture gets (on the list or off it, MoE or dense), with the architectures vLLM reads as MoE and as
        dense where that changes the answer: as the release's cells observed it. None where the release decides
        alike for every architecture, or no cell said.

        A release fact, not a cell's: a weaker result of the cell (the gate's, beside a GPU run whose kit did not
        yet ask it) says it as well as the strongest.
        """
        said: dict[str, dict[str, str]] = {}  # stack -> fact -> what the first case stating it said
        for cell in self.versions[vllm]:
            facts = said.setdefault(cell.cell.stack.value, {})
            for case in (*cell.cases, *(c for cases in cell.superseded.values() for c in cases)):
                decision = case.facts.decision_under_the_cells_host
                if decision is not None and decision.key in (V2_ARCHITECTURES, RUNNER_BY_ARCHITECTURE):
                    facts.setdefault(decision.key, decision.observed)
                for kind in ("moe", "dense"):
                    if f"{kind}_architectures" in case.properties:
                        facts.setdefault(kind, case.properties[f"{kind}_architectures"])
        found: dict[str, dict] = {}
        for stack, facts in said.items():
            listed, runners = facts.get(V2_ARCHITECTURES, "none"), facts.get(RUNNER_BY_ARCHITECTURE, "none")
            if "none" in (listed, runners):
                continue
            found[stack] = {
                "listed": listed.split(","),
                "runner": dict(pair.split("=", 1) for pair in runners.split(",")),
                **{kind: json.loads(facts[kind]) for kind in ("moe", "dense") if kind in facts},
            }
        return found or None

    def verdicts_of(self, cell: CellReport) -> CellVerdicts:
        return self.verdicts[(cell.vllm, cell.cell.id)]

    def origin(self, cell: CellReport) -> Source | None:
        """Who brought the cell's result into the evidence store, where the report read it from there."""
        return _origin(cell.file, self.stores)

    def evidence(self, cell: CellReport) -> list[Evidence]:
        """What a cell's result rests on: its own run, weaker results, probes and benchmarks of its host."""
        env = cell.envelope
        found: list[Evidence] = []
        if env is not None:
            date = env.started_at[:10]
            if env.execution is Execution.GATE_ONLY:
                found.append(Evidence(EvidenceKind.GATE_ONLY, date, cell.vllm, origin=self.origin(cell)))
            elif env.execution is Execution.EMULATED:
                runner = env.runner_name or "?"
                found.append(Evidence(EvidenceKind.EMULATED, date, env.gpu or "?", runner, origin=self.origin(cell)))
            elif env.execution is Execution.NATIVE:
                runner = env.runner_name or "?"
                found.append(Evidence(EvidenceKind.NATIVE, date, env.gpu or "?", runner, origin=self.origin(cell)))
        for execution, cases in cell.superseded.items():
            counts = tuple(sorted(status_counts(cases).items()))
            found.append(Evidence(EvidenceKind.SUPERSEDED, "", "", execution=execution, counts=counts))
        for probe in self.probes:
            if (probe.stack, probe.host) == (cell.cell.stack.value, cell.cell.host.value):
                found.append(Evidence(EvidenceKind.PROBE, probe.collected_at[:10], probe.gpu, passed=probe.passed))
        bench = self.bench(cell)
        if bench is not None:
            found.append(Evidence(EvidenceKind.BENCH, bench.started_at[:10], bench.vllm_version, bench=bench))
        return found

    def timeline(self, cell_id: str) -> list[CellReport]:
        """The cell in every release, oldest first."""
        return self._timelines.get(cell_id, [])

    @cached_property
    def _timelines(self) -> dict[str, list[CellReport]]:
        # Indexed once: asked per cell of every release, a scan each time would grow with the square of releases.
        timelines: dict[str, list[CellReport]] = {}
        for v in reversed(list(self.versions)):
            for c in self.versions[v]:
                timelines.setdefault(c.cell.id, []).append(c)
        return timelines

    @cached_property
    def contradictions(self) -> list[Contradiction]:
        found = []
        for cell in self.all_cells:
            cell_id = cell.cell.id
            for case in cell.cases:
                if case.rule and case.status in (Status.REGRESSION, Status.FIXED):
                    facts = case.facts
                    found.append(
                        Contradiction(
                            cell.vllm,
                            cell_id,
                            case.rule,
                            facts.gate_key or "",
                            facts.pin_env or "",
                            case.expected or "",
                            facts.observed or "",
                            case.status.value,
                        )
                    )
        return found

    @cached_property
    def contradicted(self) -> dict[str, list[Contradiction]]:
        """``contradictions`` by release, in the same order: each release's are its case file's and its page's."""
        found: dict[str, list[Contradiction]] = {}
        for contradiction in self.contradictions:
            found.setdefault(contradiction.vllm, []).append(contradiction)
        return found

    def cell(self, vllm: str, stack: Stack, host: Host, runner: Runner, mode: Mode) -> CellReport:
        return next(
            c
            for c in self.versions[vllm]
            if (c.cell.stack, c.cell.host, c.cell.runner, c.cell.mode) == (stack, host, runner, mode)
        )

    @property
    def all_cells(self) -> list[CellReport]:
        return [c for cells in self.versions.values() for c in cells]

    @property
    def bad_cells(self) -> list[CellReport]:
        return [c for c in [*self.all_cells, *self.unplaced] if c.is_bad]


def row_name(cell_id: str, name: str) -> str:
    """A test's name without its cell, so one row of the detail spans every cell."""
    return name.replace(f"{cell_id}-", "").replace(f"-{cell_id}", "").replace(cell_id, "")


def detail_rows(report: Report, vllm: str) -> list[tuple[str, dict[str, Status]]]:
    """The test x cell detail: (test, {cell id: status}), sorted by test."""
    tests: dict[str, dict[str, Status]] = {}
    for cell in report.versions[vllm]:
        cell_id = cell.cell.id
        for case in cell.cases:
            tests.setdefault(row_name(cell_id, case.name), {})[cell_id] = case.status
    return sorted(tests.items())


def compare(previous: dict, versions: dict[str, list[CellReport]]) -> Diff:
    """What changed since ``previous`` (a compat.json that previous.schema.json accepts)."""
    before = {(v["vllm"], c["id"]): c["status"] for v in previous["versions"] for c in v["cells"]}
    diff = Diff()
    for vllm, cells in versions.items():
        for cell in cells:
            was = before.pop((vllm, cell.cell.id), None)
            if was is None:
                continue
            now = cell.status.value
            change = Change(vllm, cell.cell.id, was, now)
            if now == Status.REGRESSION.value and was != now:
                diff.new_regressions.append(change)
            if (now == Status.FIXED.value and was != now) or (
                now == Status.PASS.value and was in (Status.REGRESSION.value, Status.KNOWN_FAIL.value)
            ):
                diff.newly_fixed.append(change)
            if now == Status.MISSING.value and was != now:
                diff.went_missing.append(change)
    # A release no input mentions any more: every cell it had went missing with it.
    missing = Status.MISSING.value
    diff.went_missing += [Change(v, cell, was, missing) for (v, cell), was in before.items() if was != missing]
    return diff


def release_changes(versions: dict[str, list[CellReport]], rules: list[Rule]) -> list[ReleaseChange]:
    """Where each cell's behaviour (or status) changed from one release to the next, oldest first."""
    ordered = list(reversed(list(versions)))
    changes = []
    for index in range(1, len(ordered)):
        before, after = ordered[index - 1], ordered[index]
        before_version, after_version = release_version(before), release_version(after)
        for old, new in zip(versions[before], versions[after], strict=True):
            was = f"{old.status.value}: {old.summary}" if old.summary else old.status.value
            now = f"{new.status.value}: {new.summary}" if new.summary else new.status.value
            if was == now or Status.MISSING in (old.status, new.status):
                continue
            # The rules newly in force, the general ones first (the file lists the exceptions first).
            why = tuple(
                f"{r.id}: {r.note}" + (f" ({r.issue})" if r.issue else "")
                for r in reversed(rules)
                if r.selector.holds_for(new.cell, after_version) and not r.selector.covers(before_version)
            )
            changes.append(ReleaseChange(new.cell.id, after, was, now, why))
    return changes


def observations(cell: CellReport) -> Observations:
    """What a cell's own result says, for its verdicts: nothing where no result can be trusted."""
    env = cell.envelope
    if env is None or env.execution is None or cell.status in (Status.CRASHED, Status.MISROUTED, Status.MISSING):
        return Observations({}, Level.NONE)
    level = env.execution.level
    return Observations(cell.gate_values, min(level, Level.COMMUNITY) if cell.community else level)


def without_release(versions: dict[str, list[CellReport]]) -> list[CellReport]:
    """Take out of ``versions`` each one that is no release number and holds only crashed cells: a run that
    crashed before vLLM answered (a container that never started names no vLLM, matrix.releases.UNKNOWN_RELEASE)
    is a result, but no release of vLLM. Its cells, which the report still shows and fails on."""
    unplaced = []
    for vllm in [v for v in versions if release_version(v) is None]:
        present = [c for c in versions[vllm] if c.status is not Status.MISSING]
        if present and all(c.status is Status.CRASHED for c in present):
            del versions[vllm]
            unplaced += present
    return unplaced


def judge_verdicts(
    versions: dict[str, list[CellReport]], rules: tuple[OutcomeRule, ...]
) -> dict[tuple[str, str], CellVerdicts]:
    """(vLLM, cell id) -> the cell's verdicts, every release judged once."""
    judged: dict[tuple[str, str], CellVerdicts] = {}
    for vllm, cells in versions.items():
        verdicts = release_verdicts(rules, vllm, {c.cell: observations(c) for c in cells})
        judged.update(((vllm, cell.id), found) for cell, found in verdicts.items())
    return with_upgrades(judged)


def load_engine_benches(directory: str | None) -> list[EngineBench]:
    """The engine-level benchmark records (``*.engine-bench.json``) of ``directory`` and the folders under it."""
    if not directory or not Path(directory).is_dir():
        return []
    return [read_engine_bench(path) for path in sorted(Path(directory).rglob(f"*{ENGINE_BENCH_SUFFIX}"))]


def _records(stores: tuple[Path, ...]) -> tuple[list[str], list[Problem]]:
    """The records of the stores that match their names and folders, and the files that do not (an empty store
    is no error, as an input directory without a JUnit file is)."""
    paths: list[str] = []
    refused: list[Problem] = []
    for store in stores:
        records, bad = verified(store)
        paths += [str(record.path) for record in records]
        refused += bad
    return paths, refused


def _origin(path: str, stores: tuple[Path, ...]) -> Source | None:
    return next((found for store in stores if (found := origin(path, store)) is not None), None) if path else None


# Every release costs each output a grid of all 24 cells however little of it the inputs hold: a 300 KB file
# naming 1,000 releases made 109 MB of report. Bounded, the outputs grow with the inputs' cases, not with the
# names they make up; the published history has 13 releases.
MAX_RELEASES = 64


def build_report(
    inputs: list[str],
    *,
    kit_commit: str,
    previous: dict | None = None,
    nox_reports: list[dict] | None = None,
    max_age_days: float | None = None,
    now: dt.datetime | None = None,
    probes: str | None = None,
    benches: str | None = None,
    engine_benches: str | None = None,
    claims: Claims | None = None,
    stores: tuple[Path, ...] = (),
) -> Report:
    if max_age_days is not None and not (math.isfinite(max_age_days) and max_age_days >= 0):
        # nan compares false with every age and inf exceeds none: either would turn the staleness check off.
        raise MatrixError(f"--max-age-days {max_age_days:g}: give a number of days, 0 or more")
    if stores and claims is not None:
        # The store's records were checked against their own night's plan when they were added; this night's
        # claims would refuse them all, since no runner of tonight's uploaded them.
        raise MatrixError(
            "--evidence or --community with --runners: report a night's artifacts, or the evidence, not both at once"
        )
    now = now or dt.datetime.now(dt.UTC)
    # Hundreds of thousands of small records and no reference cycles: the cyclic
    # collector would rescan them all again and again, making time grow faster than input.
    rules, verdict_rules = load_rules(), load_verdict_rules()
    gc.disable()
    try:
        # A user's bundle is its own evidence, never merged with the kit's runs of the same cell.
        records, refused = _records(stores)
        read = read_inputs([*inputs, *records], claims, lambda path: _origin(path, stores) is Source.COMMUNITY)
        read.unreadable += refused
        releases = {vllm for vllm, _, _ in read.groups}
        if len(releases) > MAX_RELEASES:
            raise MatrixError(
                f"the inputs name {len(releases)} vLLM releases, and a report holds at most {MAX_RELEASES} (each "
                "adds a grid of 24 cells to every output, whatever the input holds): report fewer, a directory each"
            )
        nox = nox_records(nox_reports or [])
        versions = build_cells(read, rules, now, max_age_days, nox, runners=claims.runners if claims else None)
        unplaced = without_release(versions)
    finally:
        gc.enable()
    report = Report(
        now,
        kit_commit,
        read,
        versions,
        max_age_days,
        probes=load_probes(probes),
        engine_benches=load_engine_benches(engine_benches),
        changes=release_changes(versions, rules),
        benches=latest_per_cell(benches),
        verdicts=judge_verdicts(versions, verdict_rules),
        unplaced=unplaced,
        stores=stores,
    )
    if previous is not None:
        report.diff = compare(previous, versions)
    return report
