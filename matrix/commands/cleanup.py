"""What `nox -s clean` removes from results/: the files of every crashed cell, so a failed try leaves nothing behind.

A run that crashed (a container that never started, a session that died before pytest wrote anything) leaves a
result that says so; the report fails on it, and one that crashed before vLLM answered is in no release. Once its
cause is mended, the user removes it here: the report's own reader says which cells crashed and which files they
came from (each with the environment record beside it), and each is named as it goes. results/history/ is left
alone: ``nox -s publish`` makes it from its cache.

Usage: ``python -m matrix clean-results RESULTS`` (what the nox session runs).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from matrix.report.model import build_report
from matrix.report.status import Status
from matrix.text.visible import visible

KEPT = "history"  # results/history/: the published history's, made again from its cache


@dataclass(frozen=True)
class Crashed:
    """One crashed cell's result file, the environment record beside it, and why it crashed."""

    cell: str
    vllm: str
    files: tuple[Path, ...]
    reason: str


def crashed(results: Path) -> list[Crashed]:
    """Every crashed cell's files under ``results`` (but results/history/), as the report reads them."""
    # Only what holds a result: the report refuses an input that names nothing.
    inputs = (
        [str(p) for p in sorted(results.iterdir()) if p.name != KEPT and any(p.rglob("*.xml"))]
        if results.is_dir()
        else []
    )
    if not inputs:
        return []
    report = build_report(inputs, kit_commit="clean")
    found = []
    for cell in [*report.all_cells, *report.unplaced]:
        if cell.status is not Status.CRASHED:
            continue
        sources = sorted({Path(a.source) for case in cell.cases for a in case.attempts if a.source})
        records = [s.with_name(s.name.removesuffix(".xml") + ".env.json") for s in sources]
        files = tuple(p for p in [*sources, *records] if p.is_file())
        if files:
            found.append(Crashed(cell.cell.id, cell.vllm, files, cell.reason))
    return found


def remove(found: list[Crashed], results: Path) -> list[str]:
    """Remove ``found`` and the directories it leaves empty under ``results``; a line for each cell removed."""
    said = []
    for c in found:
        for path in c.files:
            path.unlink(missing_ok=True)
        where = ", ".join(str(p.relative_to(results)) for p in c.files)
        said.append(visible(f"removed {c.cell} (vLLM {c.vllm}, crashed: {c.reason}): {where}"))
    for directory in sorted({p.parent for c in found for p in c.files}, key=lambda d: len(d.parts), reverse=True):
        while directory != results and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent
    return said


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Remove the results of cells that crashed.")
    parser.add_argument("results", type=Path, help="the results directory (results/)")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    results = args.results
    found = crashed(results)
    for line in remove(found, results):
        print(line)
    print(
        f"{len(found)} crashed cell(s) removed from {visible(str(results))}/" if found else "nothing crashed to remove"
    )
    return 0
