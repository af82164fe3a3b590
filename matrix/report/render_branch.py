"""A branch's difference from its release (matrix.branch) as the terminal table a source tree's gate session ends
with; the item and change words ``matrix bisect`` uses too."""

from __future__ import annotations

from matrix.branch import BranchDiff, Change, Item
from matrix.report.status import shown
from matrix.report.visible import visible
from matrix.variables import PIN_MEMORY, UNSET
from matrix.words import QUESTION_NAMES


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


def render(diff: BranchDiff, release_from: str) -> str:
    """The changed rows, the count of the unchanged, and where the release's side came from (``release_from``)."""
    header = ("cell", "what", f"vLLM {visible(diff.release)}", f"vLLM {visible(diff.branch)}", "change")
    rows = [header]
    rows += [
        (r.cell.id, item_words(r.item), value_words(r.release), value_words(r.branch), r.change.value)
        for r in diff.changed
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
