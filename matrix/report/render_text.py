"""The compact grid the report prints in a terminal (coloured when stdout is one)."""

from __future__ import annotations

from matrix.report.model import COLUMN_NAMES, COLUMNS, ROWS, STACK_NAMES, Report
from matrix.report.status import Status

ANSI = {
    Status.PASS: "32",
    Status.KNOWN_FAIL: "33",
    Status.REGRESSION: "1;31",
    Status.FIXED: "36",
    Status.FLAKY: "35",
    Status.CRASHED: "1;37;41",
    Status.MISROUTED: "1;33",
    Status.SKIPPED: "2",
    Status.MISSING: "2",
    Status.STALE: "34",
}


def render(report: Report, colour: bool) -> str:
    width = max(max(len(s.value) for s in Status), *(len(COLUMN_NAMES[c]) for c in COLUMNS))
    lines = []
    for vllm in report.versions:
        lines.append(f"vLLM {vllm}")
        lines.append(" " * 18 + "".join(COLUMN_NAMES[c].ljust(width + 2) for c in COLUMNS))
        for stack, host in ROWS:
            row = f"{STACK_NAMES[stack]} {host.value}".ljust(18)
            for runner, mode in COLUMNS:
                status = report.cell(vllm, stack, host, runner, mode).status
                word = status.value.ljust(width + 2)
                row += f"\033[{ANSI[status]}m{word}\033[0m" if colour else word
            lines.append(row.rstrip())
        lines.append("")
    return "\n".join(lines)
