"""A branch's difference from its release (matrix.report.branch) as the terminal table a source tree's gate session ends
with; the item and change words ``matrix bisect`` uses too."""

from __future__ import annotations

import dataclasses
import math

from matrix.cells import Axis, Cell, Host, Mode, Runner, Stack
from matrix.report.branch import BranchDiff, Change, Item, Row
from matrix.report.status import shown
from matrix.text.visible import visible
from matrix.text.words import QUESTION_NAMES
from matrix.variables import PIN_MEMORY, UNSET

AXES: tuple[tuple[str, type[Axis]], ...] = (("stack", Stack), ("host", Host), ("runner", Runner), ("mode", Mode))


def pin_words(pin_env: str) -> str:
    return "unset" if pin_env == UNSET else f"={pin_env}"


def item_words(item: Item) -> str:
    """What a row compares: a question's name, a gate key under a value of the opt-in (and a kernel edge), a test."""
    if item.question is not None:
        return QUESTION_NAMES[item.question]
    if item.key is not None and item.pin_env is not None:
        edge = f", uname {item.kernel_edge}" if item.kernel_edge else ""
        return visible(f"{item.key}, {pin_words(item.pin_env)}{edge}")
    return visible(item.test or "?")


def value_words(value: str | None) -> str:
    return "-" if value is None else visible(shown(value))


def cells_words(cells: list[Cell]) -> str:
    """Cells as one id, a glob where they are every combination of their axes' values, else their ids."""
    if len(cells) == 1:
        return cells[0].id
    axes = [(sorted({getattr(c, name) for c in cells}), axis) for name, axis in AXES]
    if math.prod(len(values) for values, _ in axes) != len(cells):
        return ", ".join(c.id for c in sorted(cells))
    words = []
    for values, axis in axes:
        every = len(values) == len(axis)
        words.append("*" if every else values[0].value if len(values) == 1 else "{" + ",".join(values) + "}")
    return "-".join(words)


def _grouped(rows: tuple[Row, ...]) -> list[tuple[list[Cell], Item, list[str | None], Row]]:
    """Rows that differ only in their cell, or in the kernel edge a value was decided under: one line each."""
    groups: dict[tuple, tuple[list[Cell], Item, list[str | None], Row]] = {}
    for row in rows:
        item = dataclasses.replace(row.item, kernel_edge=None)
        cells, _, edges, _ = groups.setdefault((item, row.release, row.branch, row.change), ([], item, [], row))
        if row.cell not in cells:
            cells.append(row.cell)
        if row.item.kernel_edge not in edges:
            edges.append(row.item.kernel_edge)
    return list(groups.values())


def _under(item: Item, edges: list[str | None]) -> str:
    named = [e for e in edges if e is not None]
    if not named:
        return item_words(item)
    if None in edges:
        return f"{item_words(item)} (and under {len(named)} kernel-edge unames)"
    return f"{item_words(item)}, uname {visible('/'.join(named))}"


def render(diff: BranchDiff, release_from: str) -> str:
    """The changed rows (those alike in all but their cell or kernel edge as one), the count of the unchanged, and
    where the release's side came from (``release_from``)."""
    header = ("cells", "what", f"vLLM {visible(diff.release)}", f"vLLM {visible(diff.branch)}", "change")
    rows = [header]
    rows += [
        (cells_words(cells), _under(item, edges), value_words(row.release), value_words(row.branch), row.change.value)
        for cells, item, edges, row in _grouped(diff.changed)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"vLLM {visible(diff.branch)} against the release it was cut from, {release_from}:"]
    if diff.changed:
        table = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
        table.insert(1, "  ".join("-" * w for w in widths))
        lines += table
    else:
        lines.append("no question's verdict and no checked value changed")
    cells = len({r.cell for r in diff.rows})
    lines.append(
        f"{diff.count(Change.FIXED)} fixed, {diff.count(Change.REGRESSED)} regressed, "
        f"{diff.count(Change.UNCHANGED)} unchanged: the 3 questions' verdicts and every checked value of {cells} "
        f"cell(s), values under {PIN_MEMORY.name} unset / =1."
    )
    for issue in dict.fromkeys(r.issue for r in diff.changed if r.issue):
        moved = {r.change.value for r in diff.changed if r.issue == issue}
        lines.append(f"{' and '.join(sorted(moved))}: the known issue {visible(issue)}")
    return "\n".join(lines)
