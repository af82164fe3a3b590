"""The compact grid the report prints in a terminal (coloured when stdout is one)."""

from __future__ import annotations

from matrix.report.model import COLUMNS, ROWS, Report
from matrix.report.view import COLUMN_NAMES, LOOKS
from matrix.text.visible import visible
from matrix.text.words import STACK_NAMES


def render(report: Report, colour: bool) -> str:
    width = max(max(len(look.word) for look in LOOKS.values()), *(len(COLUMN_NAMES[c]) for c in COLUMNS))
    lines = []
    for vllm in report.versions:
        lines.append(f"vLLM {visible(vllm)}")
        lines.append(" " * 18 + "".join(COLUMN_NAMES[c].ljust(width + 2) for c in COLUMNS))
        for stack, host in ROWS:
            row = f"{STACK_NAMES[stack]} {host.value}".ljust(18)
            for runner, mode in COLUMNS:
                look = LOOKS[report.cell(vllm, stack, host, runner, mode).status]
                word = look.word.ljust(width + 2)
                row += f"\033[{look.ansi}m{word}\033[0m" if colour else word
            lines.append(row.rstrip())
        lines.append("")
    return "\n".join(lines)
