"""COMPATIBILITY.md keeps its promise to fit a GitHub step summary (1 MiB) whatever the inputs, through the command."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_module
from test_report import write_suite

from matrix.report.render_md import NEVER_CUT_CHARS, STEP_SUMMARY_LIMIT

CELL = "cuda-wsl2new-v2-graph"


def report(tmp_path: Path, releases: dict[str, str]) -> tuple[str, list[dict]]:
    """COMPATIBILITY.md (checked to fit) and compat.json's releases, for one misrouted cell per release: reason."""
    files = [
        write_suite(
            tmp_path / f"{i}.xml",
            CELL,
            ['<testcase name="t"/>'],
            vllm=vllm,
            execution="misrouted",
            execution_reason=why,
        )
        for i, (vllm, why) in enumerate(releases.items())
    ]
    out = tmp_path / "out"
    done = run_module("matrix", "report", *map(str, files), "--out", str(out))
    assert done.returncode == 1, done.stderr  # misrouted cells: a finding, not a mistake
    data = (out / "COMPATIBILITY.md").read_bytes()
    assert len(data) <= STEP_SUMMARY_LIMIT
    return data.decode(), json.loads((out / "compat.json").read_text())["versions"]


def test_many_releases_fit_by_leaving_out_the_older_grids_and_saying_so(tmp_path):
    """500 releases: uncut, the file would be over 2 MiB."""
    text, whole = report(tmp_path, {f"0.{i}.0": "why" for i in range(500)})
    assert text.startswith("# ") and "## vLLM 0.499.0\n" in text and "### Legend" in text
    assert 1 < text.count("## vLLM ") < 500
    note = text.splitlines()[-1]
    assert "the grids of older releases" in note and "index.html and compat.json hold all of it" in note
    assert len(whole) == 500


def test_a_long_release_name_and_reason_are_clipped_where_nothing_is_cut(tmp_path):
    """Each 1,000,000 characters: the header, the newest grid and the legend are never cut, so these are clipped."""
    long = "x" * 1_000_000
    newest = f"1.0.0+{long}"
    text, whole = report(tmp_path, {newest: long, "0.33.0": "why"})
    assert text.count(f"## vLLM {newest[:NEVER_CUT_CHARS]}…\n") == 1
    assert f"misrouted · {long[:NEVER_CUT_CHARS]}…" in text and "### Legend" in text
    assert "index.html and compat.json hold all of it" in text.splitlines()[-1]
    assert whole[0]["vllm"] == newest
