"""COMPATIBILITY.md: the view model (view.py) as Markdown: grids, sections, footnotes, then test x cell detail.

It must fit a GitHub step summary (1 MiB): past that the detail is cut, never
the grid, and the file says so. Every string from the inputs is escaped.
"""

from __future__ import annotations

import re

from matrix.report.model import Report
from matrix.report.view import DetailView, ReleaseView, Style, build_view, spell

STEP_SUMMARY_LIMIT = 1 << 20
_SPECIAL = {c: f"&#{ord(c)};" for c in "|`*_[]\\~#!<>"}
_SPECIAL["&"] = "&amp;"


def md(text: object) -> str:
    """Text from an input, safe inside a Markdown table cell: no markup, no HTML, one line."""
    flat = re.sub(r"\s+", " ", str(text)).strip()
    return "".join(_SPECIAL.get(ch, ch) for ch in flat)


_MARKS = {Style.TEXT: md, Style.CODE: lambda text: f"`{md(text)}`", Style.STRONG: lambda text: f"**{md(text)}**"}


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _grid(release: ReleaseView, footnotes: dict[str, int]) -> list[str]:
    lines = ["| | " + " | ".join(release.columns) + " |", "|---" * (len(release.columns) + 1) + "|"]
    for row in release.rows:
        shown = [f"**{row.stack}** · {row.host}"]
        for cell in row.cells:
            text = f"{cell.look.glyph} {cell.look.word}"
            detail = cell.summary or cell.reason
            if detail:
                text += f"<br>{md(detail)}"
            for issue in cell.issues:
                text += f"[^{footnotes.setdefault(issue, len(footnotes) + 1)}]"
            shown.append(text)
        lines.append(_row(shown))
    return lines


def _detail(detail: DetailView) -> list[str]:
    lines = [_row(["test", *(f"`{c}`" for c in detail.cell_ids)]), "|---" * (len(detail.cell_ids) + 1) + "|"]
    lines += [_row([md(row.name), *(look.glyph if look else "" for look in row.looks)]) for row in detail.rows]
    return lines


def render(report: Report, limit: int = STEP_SUMMARY_LIMIT) -> str:
    view = build_view(report)
    h = view.header
    head = [
        f"# {view.title}",
        "",
        f"Generated {h.generated} UTC by kit `{md(h.kit_commit)}` from {h.files} file(s), {h.testcases} test case(s). "
        f"Unattributed: {h.unattributed}, unreadable: {h.unreadable}. "
        "Rows: GPU stack × host; columns: model runner × graph mode; *a→b*: "
        "`VLLM_WSL2_ENABLE_PIN_MEMORY` unset gives *a*, `=1` gives *b*.",
        "",
    ]
    footnotes: dict[str, int] = {}
    body: list[str] = []
    for release in view.releases():
        body += [f"## vLLM {md(release.vllm)}", ""] + _grid(release, footnotes) + [""]
        body += [f"Evidence: {md(sentence)} ({n} cells)" for sentence, n in release.evidence] + [""]
        body += [f"- `{cell}`: {md(sentence)}" for cell, sentence in release.benches] + (
            [""] if release.benches else []
        )
    for section in view.sections():
        body += [f"{'#' * section.level} {section.title}", ""]
        body += [
            f"- {spell(item.phrase, _MARKS)}" + "".join(f"<br>↳ {md(note)}" for note in item.notes)
            for item in section.items
        ]
        body.append("")
    notes = [f"[^{n}]: {issue}" for issue, n in sorted(footnotes.items(), key=lambda kv: kv[1])]
    notes += [""] if notes else []
    text = "\n".join(head + body + notes)
    detail: list[str] = []
    for vllm in view.release_names:
        detail += ["", f"## Detail: test × cell, vLLM {md(vllm)}", ""] + _detail(view.detail(vllm))
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
