"""COMPATIBILITY.md: the view model (view.py) as Markdown: grids, sections, footnotes, then test x cell detail.

It must fit a GitHub step summary (1 MiB), however many releases, contradictions
or problems a report has and however long its inputs' strings, and is produced
as a stream of lines against that byte budget: the header, the newest release's
grid, the legend and the footnotes are never cut, and an input's text in a grid
is clipped, so what is never cut has a size of its own whatever the inputs;
every other list (the older releases' grids among them) is cut where the budget
ends, is not even put into words past it, and one note at the end names what
was left out. Every string from the inputs is escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain

from matrix.report.bandwidth import PinnedView
from matrix.report.model import Report
from matrix.report.view import ReleaseView, ReportView, Section, Style, build_view, spell
from matrix.text.visible import visible
from matrix.variables import PIN_MEMORY

STEP_SUMMARY_LIMIT = 1 << 20
# Characters of an input's text (a release, a cell's summary or reason) in a line that is never cut;
# index.html and compat.json hold it whole.
NEVER_CUT_CHARS = 200
_SPECIAL = {c: f"&#{ord(c)};" for c in "|`*_[]\\~#!<>"}
_SPECIAL["&"] = "&amp;"


def _clip(text: str) -> str:
    return text if len(text) <= NEVER_CUT_CHARS else text[:NEVER_CUT_CHARS] + "…"


# GitHub makes a link of a bare address in Markdown by itself (GFM's autolinks): an input's URL or e-mail address
# must stay text. An entity breaks "://" and "www." where links are looked for; an "@" needs an element around it,
# as addresses are looked for after entities are read.
_AUTOLINKS = (
    (re.compile("://"), "&#58;//"),
    (re.compile(r"(www)\.", re.IGNORECASE), r"\1&#46;"),
    (re.compile("@"), "<span>&#64;</span>"),
)


def md(text: object) -> str:
    """Text from an input, safe inside a Markdown table cell: no markup, no HTML, no link, one line, nothing hidden."""
    flat = visible(re.sub(r"\s+", " ", str(text)).strip())
    escaped = "".join(_SPECIAL.get(ch, ch) for ch in flat)
    for pattern, replacement in _AUTOLINKS:
        escaped = pattern.sub(replacement, escaped)
    return escaped


# Code as HTML, not backticks: entities (md's escapes) are shown literally inside a backtick span.
_MARKS = {
    Style.TEXT: md,
    Style.CODE: lambda text: f"<code>{md(text)}</code>",
    Style.STRONG: lambda text: f"**{md(text)}**",
}


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(columns: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> Iterator[str]:
    """A table of plain values, each escaped."""
    yield _row([md(name) for name in columns])
    yield "|---" * len(columns) + "|"
    for values in rows:
        yield _row([md(value) for value in values])


def _grid(release: ReleaseView, footnotes: dict[str, int]) -> list[str]:
    lines = ["| | " + " | ".join(release.columns) + " |", "|---" * (len(release.columns) + 1) + "|"]
    for row in release.rows:
        shown = [f"**{row.stack}** · {row.host}"]
        for cell in row.cells:
            text = f"{cell.verdict.glyph} **{cell.verdict.word}**: {spell(cell.advice, _MARKS)}"
            text += "<br>" + " · ".join(f"{a.question} {a.look.glyph} {a.look.word}" for a in cell.answers)
            text += f"<br>{cell.look.glyph} {cell.look.word}"
            detail = cell.summary or cell.reason
            if detail:
                text += f" · {md(_clip(detail))}"
            for issue in cell.issues:
                text += f"[^{footnotes.setdefault(issue, len(footnotes) + 1)}]"
            shown.append(text)
        lines.append(_row(shown))
    return lines


def _detail(view: ReportView, vllm: str) -> Iterator[str]:
    detail = view.detail(vllm)  # only once the budget reaches it
    yield _row(["test", *(f"`{c}`" for c in detail.cell_ids)])
    yield "|---" * (len(detail.cell_ids) + 1) + "|"
    for row in detail.rows:
        yield _row([md(row.name), *(look.glyph if look else "" for look in row.looks)])


def _items(section: Section) -> Iterator[str]:
    for item in section.items:
        yield f"- {spell(item.phrase, _MARKS)}" + "".join(f"<br>↳ {md(note)}" for note in item.notes)


@dataclass(frozen=True)
class _Block:
    """Lines of the file in order. ``cut`` names a list that may be cut (None: never cut);
    ``lines`` are produced only if the budget reaches them."""

    cut: str | None
    lines: Iterable[str]


def _blocks(view: ReportView) -> tuple[list[_Block], Iterator[_Block]]:
    """The file as (blocks built up front, blocks produced as the budget reaches them).

    The grids come first and number the footnotes, which follow the sections: so
    the releases and the footnotes are built before anything is measured; the
    sections and the detail, which grow with the inputs, are produced lazily.
    """
    h = view.header
    head = [
        f"# {view.title}",
        "",
        f"Generated {h.generated} UTC by kit `{md(h.kit_commit)}` from {h.files} file(s), {h.testcases} test case(s). "
        f"Unattributed: {h.unattributed}, unreadable: {h.unreadable}. "
        "Rows: GPU stack × host; columns: model runner × graph mode; *a→b*: "
        f"`{PIN_MEMORY.name}` unset gives *a*, `=1` gives *b*.",
        "",
        f"### {view.verdicts.title}",
        "",
        *_items(view.verdicts),
        "",
        "Then each question's answer, and the cell's status against the rules (for maintainers: see the legend).",
        "",
    ]
    footnotes: dict[str, int] = {}
    releases = [_Block(None, head)]
    for index, release in enumerate(view.releases()):
        # The newest release's grid is the answer most readers came for: the older ones may be cut.
        grid = "the grids of older releases" if index else None
        heading = [f"## vLLM {md(_clip(release.vllm))}", "", f"{md(release.default_runners)}.", ""]
        releases.append(_Block(grid, [*heading, *_grid(release, footnotes), ""]))
        releases.append(_Block("the evidence tallies", [f"Evidence: {md(s)} ({n} cells)" for s, n in release.evidence]))
        releases.append(_Block(grid, [""]))
        answers = [f"- {md(cell.answer)}" for row in release.rows for cell in row.cells]
        releases.append(
            _Block(
                "the answers per set-up",
                ["<details><summary>Each set-up in one sentence</summary>", "", *answers, "", "</details>"],
            )
        )
        releases.append(_Block(grid, [""]))
        if release.benches:
            releases.append(_Block("the benchmarks", [f"- `{cell}`: {md(s)}" for cell, s in release.benches]))
            releases.append(_Block(grid, [""]))
    sections = list(view.sections())
    notes = [f"[^{n}]: {issue}" for issue, n in sorted(footnotes.items(), key=lambda kv: kv[1])]
    notes += [""] if notes else []

    def rest() -> Iterator[_Block]:
        yield _Block("what pinned memory buys", _pinned(view.pinned))
        for section in sections:
            heading = [f"{'#' * section.level} {section.title}", ""]
            if section.key == "legend":
                yield _Block(None, [*heading, *_items(section)])
            else:
                yield _Block(section.title, chain(heading, _items(section)))
            yield _Block(None, [""])
        yield _Block(None, notes)
        for index, vllm in enumerate(view.release_names):
            heading = ([""] if index else []) + [f"## Detail: test × cell, vLLM {md(vllm)}", ""]
            yield _Block("the test × cell detail", chain(heading, _detail(view, vllm)))

    return releases, rest()


def _pinned(pinned: PinnedView) -> Iterator[str]:
    """The probes' bandwidth tables, each beside the picture that bandwidth.svg (written with this file) draws."""
    yield f"## {md(pinned.title)}"
    yield ""
    yield md(pinned.intro)
    yield ""
    if not pinned.charts:
        yield md(pinned.empty)
        yield ""
    else:
        yield f"![{md(pinned.title)}](bandwidth.svg)"
        yield ""
    for chart in pinned.charts:
        yield f"### {md(chart.title)}"
        yield ""
        yield f"{md(chart.headline)} _{md(chart.source)}_"
        yield ""
        yield from _table(pinned.columns, chart.rows)
        yield ""
        for sentence in chart.offload_step:
            yield f"- {md(sentence)}"
        if chart.offload_step:
            yield ""
    yield f"### {md(pinned.engine_title)}"
    yield ""
    yield md(pinned.engine_intro)
    yield ""
    if not pinned.engines:
        yield md(pinned.engine_empty)
        yield ""
    for engine in pinned.engines:
        yield f"#### {md(engine.title)}"
        yield ""
        yield f"_{md(engine.source)}_"
        yield ""
        yield from _table(pinned.engine_columns, engine.rows)
        yield ""
        for note in engine.notes:
            yield f"- {md(note)}"
        if engine.notes:
            yield ""


def _size(line: str) -> int:
    return len(line.encode()) + 1


def _cut_note(limit: int, cut: Iterable[str]) -> str:
    return (
        f"_This file was cut to fit GitHub's {limit >> 10} KiB step-summary limit; left out, in part or whole: "
        f"{', '.join(cut)}. index.html and compat.json hold all of it._"
    )


def lines(report: Report, limit: int = STEP_SUMMARY_LIMIT) -> Iterator[str]:
    """COMPATIBILITY.md line by line, at most ``limit`` bytes in all (beyond what is never cut)."""
    releases, rest = _blocks(build_view(report))
    # A list is cut where it would overrun the limit; never-cut lines after it (the footnotes, a
    # blank line) are kept regardless, and _make_room then takes back as many lines as they need.
    kept: list[tuple[str | None, str]] = []
    used = 0
    cut: dict[str, None] = {}  # the lists left out, in order
    for block in chain(releases, rest):
        if block.cut is None:
            for line in block.lines:
                kept.append((None, line))
                used += _size(line)
            continue
        if cut:  # past the budget: name the list, never put it into words
            cut[block.cut] = None
            continue
        for line in block.lines:
            if used + _size(line) > limit:
                cut[block.cut] = None
                break
            kept.append((block.cut, line))
            used += _size(line)
    if cut or used > limit:
        kept = _make_room(kept, used, limit, cut)
    for _, line in kept:
        yield line
    if cut:
        yield ""
        yield _cut_note(limit, cut)


def _make_room(
    kept: list[tuple[str | None, str]], used: int, limit: int, cut: dict[str, None]
) -> list[tuple[str | None, str]]:
    """Drop the last lines that may be cut until the rest and the note saying so fit (naming their lists in it)."""
    drop = set()
    index = len(kept)
    while used + _size("") + _size(_cut_note(limit, cut)) > limit and index > 0:
        index -= 1
        part, line = kept[index]
        if part is not None:
            drop.add(index)
            used -= _size(line)
            cut.setdefault(part, None)
    return [entry for i, entry in enumerate(kept) if i not in drop]


def render(report: Report, limit: int = STEP_SUMMARY_LIMIT) -> str:
    return "".join(line + "\n" for line in lines(report, limit))
