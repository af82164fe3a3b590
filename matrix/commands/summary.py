"""The short terminal table a cell session ends with, judged by the report's rules.

The file is read and judged exactly as ``python -m matrix report`` reads and
judges it (matrix.store.reading, matrix.report.status), so the table and the
report never disagree about the same file.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from matrix.cells import Cell, Runner
from matrix.errors import MatrixError
from matrix.judge.expectations import load_rules
from matrix.report.status import CellReport, Status, build_cells, shown
from matrix.store.reading import Inputs, read_file
from matrix.text.visible import visible
from matrix.variables import GATE_PIN_VALUES, PIN_MEMORY

# Which column of the table each case status counts in; "fail" is what --strict fails on.
COUNTED = {
    Status.PASS: "pass",
    Status.REGRESSION: "fail",
    Status.FLAKY: "fail",
    Status.FIXED: "fail",  # a known failure now passing: the rule needs updating
    Status.KNOWN_FAIL: "known",
    Status.SKIPPED: "skip",
}


@dataclass
class CellSummary:
    cell: str
    execution: str
    vllm: str
    passed: int = 0
    failed: int = 0
    known: int = 0  # expected failures naming their issue
    skipped: int = 0
    observed: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (key, pin_env) -> value
    failures: list[str] = field(default_factory=list)


def summarize(path: Path) -> CellSummary:
    inputs = Inputs(files=[str(path)])
    read_file(str(path), inputs)
    problem = next(iter(inputs.unreadable + inputs.unattributed), None)
    if problem is not None or not inputs.groups:
        reason = problem.reason if problem else "no cell's results in it"
        raise MatrixError(f"{path} is not a cell's result file ({reason}): run the cell again")
    versions = build_cells(inputs, load_rules(), dt.datetime.now(dt.UTC))
    (report,) = (cell for cells in versions.values() for cell in cells if cell.envelope is not None)
    return _summary(report)


def _summary(report: CellReport) -> CellSummary:
    env = report.envelope
    execution = env.execution.value if env and env.execution else "?"
    summary = CellSummary(report.cell.id, execution, report.vllm, observed=report.gate_values)
    for case in report.cases:
        column = COUNTED[case.status]
        if column == "pass":
            summary.passed += 1
        elif column == "fail":
            summary.failed += 1
            summary.failures.append(case.name)
        elif column == "known":
            summary.known += 1
        else:
            summary.skipped += 1
    return summary


def _pair(summary: CellSummary, key: str) -> str:
    values = [summary.observed.get((key, pin), "-") for pin in GATE_PIN_VALUES]
    # Read from the file, as are the releases and test names below: each on one line, nothing hidden.
    values = [visible(shown(v)) for v in values]
    return values[0] if values[0] == values[1] else f"{values[0]} / {values[1]}"


COLUMNS = ("cell", "execution", "pass", "fail", "known", "skip", "pin", "uva", "v2 buffer", "offload", "repro")


def render(summaries: list[CellSummary]) -> str:
    rows = [COLUMNS]
    for s in summaries:
        rows.append(
            (
                s.cell,
                s.execution,
                str(s.passed),
                str(s.failed),
                str(s.known),
                str(s.skipped),
                _pair(s, "pin"),
                _pair(s, "uva"),
                _pair(s, "v2_buffer") if Cell.parse(s.cell).runner is Runner.V2 else "n/a",
                _pair(s, "offload_path"),
                _pair(s, "repro"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    versions = sorted({s.vllm for s in summaries})
    lines.append("")
    lines.append(
        f"vLLM {', '.join(map(visible, versions))}; values are {PIN_MEMORY.name} unset / =1 "
        "(one value when both agree); known = expected failure with its issue."
    )
    for s in summaries:
        for name in s.failures:
            lines.append(f"FAILED {s.cell}: {visible(name)}")
    return "\n".join(lines)
