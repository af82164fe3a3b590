"""`nox -s clean` (python -m matrix clean-results): a failed try's results go, and nothing else."""

from __future__ import annotations

import json
import shutil

import pytest
from builders import envelope, gate_case
from conftest import run_module

CELL = "cuda-wsl2new-v1-graph"


@pytest.mark.reads_host
def test_clean_removes_each_crashed_cell_saying_so_and_keeps_every_other_result(tmp_path):
    results = tmp_path / "results"
    # A container try with no Docker engine to answer: a crash before vLLM said its release (results/unknown/).
    tried = run_module(
        "repro",
        "container",
        "--cells",
        CELL,
        "--image",
        "vllm/vllm-openai:v0.33.0",
        "--results",
        str(results),
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert tried.returncode == 1, tried.stdout + tried.stderr
    (crash,) = results.glob(f"unknown/*/{CELL}.xml")
    # A release's result, and the published history (even a crash in it): both stay.
    passed = results / "0.33.0" / "gate" / f"{CELL}.xml"
    passed.parent.mkdir(parents=True)
    case = gate_case("pin-unset", "pin", "unset", "False")
    passed.write_text(f'<testsuites><testsuite name="{CELL}">{envelope(CELL)}{case}</testsuite></testsuites>')
    history = results / "history" / "0.33.0" / f"{CELL}.xml"
    history.parent.mkdir(parents=True)
    shutil.copyfile(crash, history)
    kept = {p: p.read_bytes() for p in (passed, history)}
    # Reported alone, the crash is in no release, and the doctor names the way out.
    alone = run_module("matrix", "report", str(results / "unknown"), "--out", str(tmp_path / "crash"))
    assert alone.returncode == 1
    doctor = run_module("matrix", "doctor", "--matrix", str(tmp_path / "crash" / "compat.json"), "--stack", "cuda")
    assert "holds no vLLM release (a report of crashed runs alone; `nox -s clean` removes them)" in doctor.stderr

    done = run_module("matrix", "clean-results", str(results))
    assert done.returncode == 0, done.stderr
    first, last = done.stdout.splitlines()
    assert first.startswith(f"removed {CELL} (vLLM unknown, crashed: crashed in vllm/vllm-openai:v0.33.0: no Docker")
    assert f"{crash.relative_to(results)}, " in first and first.endswith(".env.json")
    assert last == f"1 crashed cell(s) removed from {results}/"
    assert not (results / "unknown").exists()
    assert {p: p.read_bytes() for p in kept} == kept
    # The report no longer fails on the mended try, and the doctor reads it.
    report = run_module("matrix", "report", str(results / "0.33.0"), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert [v["vllm"] for v in json.loads((tmp_path / "report" / "compat.json").read_text())["versions"]] == ["0.33.0"]
    again = run_module("matrix", "clean-results", str(results))
    assert (again.returncode, again.stdout) == (0, "nothing crashed to remove\n")
