"""The report as GitHub shows it on a commit: check-run annotations for the cells that need a maintainer, and step
outputs with the counts.

``python -m matrix annotations COMPAT [--github-output FILE]`` reads the ``compat.json`` a report wrote (with
its case files beside it) and prints one workflow command per cell that failed the run (a regression, a crash, a
misrouted runner: ``::error``), that has no result (``::warning``) or that a known issue no longer holds back
(fixed: ``::notice``), naming the release, the cell, its failing cases' rules and issues, and a ``::notice`` per
runner kind the plan gave no job;
GitHub turns each into an annotation on the workflow run and its commit. With ``--github-output`` it appends
``cells=N``, one ``<status>=N`` per status and ``not_planned=N`` (runner kinds) to the step's outputs file, so a
later step or job can act on the counts. Every text from the report passes ``visible`` first,
then GitHub's own escapes for a command's data, so no input can end the command, start another or mask anything.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from matrix.errors import MatrixError
from matrix.report.compat_cases import read_joined
from matrix.report.status import Status
from matrix.text.visible import visible

# GitHub shows at most 10 annotations of each kind per step; past that, one more line says how many were left out.
MOST = 10
COMMAND = {
    Status.REGRESSION: "error",
    Status.CRASHED: "error",
    Status.MISROUTED: "error",
    Status.MISSING: "warning",  # no result: a runner that never ran, or never uploaded
    Status.FIXED: "notice",  # a known issue no longer holds: its rule wants updating
}


def _data(text: object) -> str:
    """A command's message: GitHub's escapes for its data, after the report's own."""
    return visible(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: object) -> str:
    """A command's property (``title=``): the data escapes, and its separators."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _cases(cell: dict, status: str) -> str:
    """The cell's cases of that status: each test with its rule and issue; the cell's reason where none is."""
    named = []
    for case in cell.get("cases") or []:
        if isinstance(case, dict) and case.get("status") == status:
            rule = f"rule {case['rule']}" if case.get("rule") else "no rule"
            issue = f", {case['issue']}" if case.get("issue") else ""
            named.append(f"{case.get('name', '?')} ({rule}{issue})")
    return "; ".join(named[:3]) + (f"; and {len(named) - 3} more" if len(named) > 3 else "") or str(cell.get("reason"))


def commands(document: dict) -> Iterator[str]:
    """One workflow command per cell to look at, the errors first, at most MOST of them."""
    found = []
    for version in document.get("versions") or []:
        for cell in version.get("cells") or []:
            status = next((s for s in COMMAND if s.value == cell.get("status")), None)
            if status is not None:
                title = f"vLLM {version.get('vllm')} {cell.get('id')}: {status.value}"
                found.append((COMMAND[status], title, _cases(cell, status.value)))
    found.sort(key=lambda entry: ("error", "warning", "notice").index(entry[0]))
    for command, title, message in found[:MOST]:
        yield f"::{command} title={_property(title)}::{_data(message)}"
    if len(found) > MOST:
        yield f"::warning title=more cells to look at::{len(found) - MOST} more: the step summary lists every cell"
    for kind in _not_planned(document):
        title = f"{kind.get('name')}: not planned"
        message = f"{kind.get('reason')}; its {len(kind.get('cells') or [])} cells rest on the gate job's predictions"
        yield f"::notice title={_property(title)}::{_data(message)}"


def _not_planned(document: dict) -> list[dict]:
    """The runner kinds the plan gave no job, as the report lists them (one per kind: six at most)."""
    inputs = document.get("inputs")
    kinds = inputs.get("not_planned") if isinstance(inputs, dict) else None
    return [kind for kind in kinds if isinstance(kind, dict)] if isinstance(kinds, list) else []


def outputs(document: dict) -> dict[str, int]:
    """The counts a later step reads: every cell of every release, and each status."""
    statuses = Counter(
        cell.get("status") for version in document.get("versions") or [] for cell in version.get("cells") or []
    )
    counts = {status.value: statuses[status.value] for status in Status}
    return {"cells": sum(statuses.values()), **counts, "not_planned": len(_not_planned(document))}


def _load(path: Path) -> dict:
    """The report's compat.json with the case files beside it joined in (the failing cases' rules and issues are
    theirs), read as any record the kit did not write here."""
    document = read_joined(path)
    if not isinstance(document.get("versions"), list):
        raise MatrixError(
            f"{path} is not a report's compat.json (no list of versions): give the compat.json "
            "`python -m matrix report` wrote"
        )
    return document


def _run(args: argparse.Namespace) -> int:
    document = _load(Path(args.compat))
    for line in commands(document):
        print(line)
    if args.github_output:
        with open(args.github_output, "a", encoding="utf-8") as out:
            out.writelines(f"{name}={count}\n" for name, count in outputs(document).items())
    return 0


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("compat", help="the compat.json a report wrote")
    parser.add_argument("--github-output", help="append the counts to this file (the step's $GITHUB_OUTPUT)")
    parser.set_defaults(func=_run)
    return parser
