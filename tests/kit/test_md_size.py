"""COMPATIBILITY.md keeps its promise to fit a GitHub step summary (1 MiB) whatever the inputs, through the command."""

from __future__ import annotations

import json
from pathlib import Path

from builders import write_suite
from conftest import run_module

from matrix.cells import CELLS
from matrix.report.model import MAX_RELEASES, build_report
from matrix.report.render_md import NEVER_CUT_CHARS, STEP_SUMMARY_LIMIT, lines

CELL = "cuda-wsl2new-v2-graph"


def report(tmp_path: Path, releases: dict[str, str], cells: tuple[str, ...] = (CELL,)) -> tuple[str, list[dict]]:
    """COMPATIBILITY.md (checked to fit) and compat.json's releases, for misrouted ``cells`` per release: reason."""
    files = [
        write_suite(
            tmp_path / f"{i}-{cell}.xml",
            cell,
            ['<testcase name="t"/>'],
            vllm=vllm,
            execution="misrouted",
            execution_reason=why,
        )
        for i, (vllm, why) in enumerate(releases.items())
        for cell in cells
    ]
    out = tmp_path / "out"
    done = run_module("matrix", "report", *map(str, files), "--out", str(out))
    assert done.returncode == 1, done.stderr  # misrouted cells: a finding, not a mistake
    data = (out / "COMPATIBILITY.md").read_bytes()
    assert len(data) <= STEP_SUMMARY_LIMIT
    return data.decode(), json.loads((out / "compat.json").read_text())["versions"]


def test_as_many_releases_as_a_report_holds_fit_and_a_smaller_budget_leaves_out_the_older_grids(tmp_path):
    """As many releases as a report holds (matrix.report.model.MAX_RELEASES), every cell misrouted with a long
    reason, fit the step summary whole; under a budget they overrun, the older grids go and the file says so."""
    everyone = tuple(cell.id for cell in CELLS)
    text, whole = report(tmp_path, {f"0.{i}.0": "why " * 100 for i in range(MAX_RELEASES)}, everyone)
    assert text.count("## vLLM ") == MAX_RELEASES and "was cut" not in text
    assert len(whole) == MAX_RELEASES
    built = build_report([str(tmp_path)], kit_commit="test")
    budget = 300_000
    text = "\n".join(lines(built, limit=budget)) + "\n"
    assert len(text.encode()) <= budget + (1 << 16)  # what is never cut comes on top (the module says so)
    assert f"## vLLM 0.{MAX_RELEASES - 1}.0\n" in text and "### Legend" in text
    assert 1 < text.count("## vLLM ") < MAX_RELEASES
    note = text.splitlines()[-1]
    assert "the grids of older releases" in note and "index.html and compat.json hold all of it" in note


def test_a_long_release_name_and_reason_are_clipped_where_nothing_is_cut(tmp_path):
    """Each 1,000,000 characters: the header, the newest grid and the legend are never cut, so these are clipped."""
    long = "x" * 1_000_000
    newest = f"1.0.0+{long}"
    text, whole = report(tmp_path, {newest: long, "0.9.0+short": "why"})
    assert text.count(f"## vLLM {newest[:NEVER_CUT_CHARS]}…\n") == 1
    assert f"misrouted · {long[:NEVER_CUT_CHARS]}…" in text and "### Legend" in text
    assert "index.html and compat.json hold all of it" in text.splitlines()[-1]
    assert whole[0]["vllm"] == newest
