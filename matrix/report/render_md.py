"""COMPATIBILITY.md: the grid, a legend, the diff, the inputs not counted, then test x cell detail.

It must fit a GitHub step summary (1 MiB): past that the detail is cut, never
the grid, and the file says so. Every string from the inputs is escaped.
"""

from __future__ import annotations

import re

from matrix.cells import CELLS
from matrix.report.model import COLUMN_NAMES, COLUMNS, HOST_NAMES, ROWS, STACK_NAMES, Report, detail_rows
from matrix.report.status import Status

STEP_SUMMARY_LIMIT = 1 << 20
_SPECIAL = {c: f"&#{ord(c)};" for c in "|`*_[]\\~#!<>"}
_SPECIAL["&"] = "&amp;"


def md(text: object) -> str:
    """Text from an input, safe inside a Markdown table cell: no markup, no HTML, one line."""
    flat = re.sub(r"\s+", " ", str(text)).strip()
    return "".join(_SPECIAL.get(ch, ch) for ch in flat)


def _grid(report: Report, vllm: str, footnotes: dict[str, int]) -> list[str]:
    lines = ["| | " + " | ".join(COLUMN_NAMES[c] for c in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for stack, host in ROWS:
        row = [f"**{STACK_NAMES[stack]}** · {HOST_NAMES[host]}"]
        for runner, mode in COLUMNS:
            cell = report.cell(vllm, stack, host, runner, mode)
            text = f"{cell.status.symbol} {cell.status.value}"
            detail = cell.summary or cell.reason
            if detail:
                text += f"<br>{md(detail)}"
            for issue in cell.issues:
                number = footnotes.setdefault(issue, len(footnotes) + 1)
                text += f"[^{number}]"
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _detail(report: Report, vllm: str) -> list[str]:
    lines = ["| test | " + " | ".join(f"`{c.id}`" for c in CELLS) + " |", "|---" * (len(CELLS) + 1) + "|"]
    for name, row in detail_rows(report, vllm):
        lines.append("| " + " | ".join([md(name)] + [row[c.id].symbol if c.id in row else "" for c in CELLS]) + " |")
    return lines


def render(report: Report, limit: int = STEP_SUMMARY_LIMIT) -> str:
    inputs = report.inputs
    head = [
        "# vLLM WSL2 pinned-memory compatibility",
        "",
        f"Generated {report.generated_at:%Y-%m-%d %H:%M} UTC by kit `{md(report.kit_commit)}` from "
        f"{len(inputs.files)} file(s), {inputs.testcases_read} test case(s). "
        f"Unattributed: {len(inputs.unattributed)}, unreadable: {len(inputs.unreadable)}. "
        "Rows: GPU stack × host; columns: model runner × graph mode; *a→b*: "
        "`VLLM_WSL2_ENABLE_PIN_MEMORY` unset gives *a*, `=1` gives *b*.",
        "",
    ]
    footnotes: dict[str, int] = {}
    body: list[str] = []
    for vllm in report.versions:
        body += [f"## vLLM {md(vllm)}", ""] + _grid(report, vllm, footnotes) + [""]
        evidence: dict[str, int] = {}
        for cell in report.versions[vllm]:
            for line in report.evidence(cell) or ["no result"]:
                evidence[line] = evidence.get(line, 0) + 1
        body += [f"Evidence: {md(line)} ({n} cells)" for line, n in evidence.items()] + [""]
        benches = [(cell.cell.id, bench) for cell in report.versions[vllm] if (bench := report.bench(cell))]
        body += [f"- `{cell}`: {md(bench.line)}" for cell, bench in benches] + ([""] if benches else [])
    if report.changes:
        body += ["## Changes across releases", ""]
        for c in report.changes:
            why = "".join(f"<br>↳ {md(rule)}" for rule in c.rules)
            body.append(f"- `{md(c.cell)}` since **{md(c.vllm)}**: {md(c.before)} → {md(c.after)}{why}")
        body.append("")
    if report.contradictions:
        body += ["## Rules the results contradict", ""]
        body += [
            f"- rule `{md(c.rule)}` expects {md(c.key)}={md(c.expected)} for `{md(c.cell)}` (pin_env {md(c.pin_env)}) "
            f"with vLLM {md(c.vllm)}; vLLM decided {md(c.observed)} ({md(c.status)})"
            for c in report.contradictions
        ]
        body.append("")
    body += ["### Legend", ""]
    body += [f"- {s.symbol} **{s.value}**: {s.meaning}" for s in Status]
    body.append("")
    if report.diff is not None:
        body += ["## Changes since the previous report", ""]
        for title, changes in (
            ("New regressions", report.diff.new_regressions),
            ("Newly fixed", report.diff.newly_fixed),
            ("Went missing", report.diff.went_missing),
        ):
            body.append(
                f"- **{title}**: "
                + (", ".join(f"`{md(c.cell)}` (vLLM {md(c.vllm)}, was {md(c.was)})" for c in changes) or "none")
            )
        body.append("")
    problems = [("unreadable", p) for p in inputs.unreadable] + [("unattributed", p) for p in inputs.unattributed]
    problems += [("warning", p) for p in inputs.warnings]
    if problems:
        body += ["## Inputs not counted in the grid", ""]
        body += [f"- {kind}: `{md(p.path)}`: {md(p.reason)}" for kind, p in problems]
        body.append("")
    notes = [f"[^{n}]: {issue}" for issue, n in sorted(footnotes.items(), key=lambda kv: kv[1])]
    notes += [""] if notes else []
    text = "\n".join(head + body + notes)
    detail: list[str] = []
    for vllm in report.versions:
        detail += ["", f"## Detail: test × cell, vLLM {md(vllm)}", ""] + _detail(report, vllm)
    full = text + "\n".join(detail) + "\n"
    if len(full.encode()) <= limit:
        return full
    cut_note = (
        f"\n_The test × cell detail was cut to fit GitHub's {limit >> 10} KiB step-summary limit; "
        "index.html and compat.json hold all of it._\n"
    )
    budget = limit - len(text.encode()) - len(cut_note.encode())
    kept, size = [], 0
    for line in detail:
        size += len(line.encode()) + 1
        if size > budget:
            break
        kept.append(line)
    return text + "\n".join(kept) + cut_note
