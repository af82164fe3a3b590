"""The compatibility report: every input read, every cell judged, the diff with the last report."""

from __future__ import annotations

import datetime as dt
import gc
from dataclasses import dataclass, field

from matrix.cells import Host, Mode, Runner, Stack
from matrix.expectations import load_rules
from matrix.reading import Inputs, read_inputs
from matrix.status import CellReport, Status, build_cells, nox_records

REPORT_SCHEMA = "wslpin-kit.compat/1"

# The grid: rows stack x host, columns runner x mode.
ROWS = [(stack, host) for stack in Stack for host in Host]
COLUMNS = [(runner, mode) for runner in Runner for mode in Mode]
HOST_NAMES = {
    Host.LINUX: "native Linux",
    Host.WSL2OLD: "WSL2 kernel < 4.19.121",
    Host.WSL2NEW: "WSL2 kernel ≥ 4.19.121",
}
STACK_NAMES = {Stack.CUDA: "CUDA", Stack.ROCM: "ROCm"}
COLUMN_NAMES = {(r, m): f"{r.value.upper()} · {'CUDA graph' if m is Mode.GRAPH else 'eager'}" for r, m in COLUMNS}


@dataclass(frozen=True)
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


@dataclass
class Report:
    generated_at: dt.datetime
    kit_commit: str
    inputs: Inputs
    versions: dict[str, list[CellReport]]
    max_age_days: float | None = None
    diff: Diff | None = None

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
        return [c for c in self.all_cells if c.status.is_bad]


def row_name(cell: CellReport, name: str) -> str:
    """A test's name without its cell, so one row of the detail spans every cell."""
    return name.replace(f"{cell.cell.id}-", "").replace(f"-{cell.cell.id}", "").replace(cell.cell.id, "")


def detail_rows(report: Report, vllm: str) -> list[tuple[str, dict[str, Status]]]:
    """The test x cell detail: (test, {cell id: status}), sorted by test."""
    tests: dict[str, dict[str, Status]] = {}
    for cell in report.versions[vllm]:
        for case in cell.cases:
            tests.setdefault(row_name(cell, case.name), {})[cell.cell.id] = case.status
    return sorted(tests.items())


def compare(previous: dict, versions: dict[str, list[CellReport]]) -> Diff:
    before = {(v["vllm"], c["id"]): c["status"] for v in previous.get("versions", []) for c in v.get("cells", [])}
    diff = Diff()
    for vllm, cells in versions.items():
        for cell in cells:
            was = before.get((vllm, cell.cell.id))
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
    return diff


def build_report(
    inputs: list[str],
    *,
    kit_commit: str,
    previous: dict | None = None,
    nox_report: dict | None = None,
    max_age_days: float | None = None,
    now: dt.datetime | None = None,
) -> Report:
    now = now or dt.datetime.now(dt.UTC)
    # Hundreds of thousands of small records and no reference cycles: the cyclic
    # collector would rescan them all again and again, making time grow faster than input.
    gc.disable()
    try:
        read = read_inputs(inputs)
        versions = build_cells(read, load_rules(), now, max_age_days, nox_records(nox_report or {}))
    finally:
        gc.enable()
    report = Report(now, kit_commit, read, versions, max_age_days)
    if previous is not None:
        report.diff = compare(previous, versions)
    return report
