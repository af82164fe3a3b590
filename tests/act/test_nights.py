"""Nights of .github/workflows/matrix.yml under nektos/act (tests/act/night.py says what is real and what stands in).

Each test is one night; they share the origin and the Pages site, which outlives a night as GitHub Pages does.
"""

from __future__ import annotations

import json

from night import GPU_RUNNER, Night, Nights

from matrix.cells import CELLS

TWO_CELLS = ["cuda-wsl2new-v1-graph", "cuda-wsl2new-v2-graph"]
# What the workflow's own runs upload beside the runners' artifacts.
NOT_A_RUNNERS = {"junit-gate", "github-pages"}


def runner_artifacts(night: Night) -> set[str]:
    return {p.name for p in night.artifacts.iterdir()} - NOT_A_RUNNERS


def deployed_cells(night: Night) -> dict[str, dict]:
    (release,) = json.loads((night.pages / "compat.json").read_text())["versions"]
    return {cell["id"]: cell for cell in release["cells"]}


def test_a_night_with_the_cuda_wsl2new_runner_online_publishes_its_cells_native_results(nights: Nights):
    night = nights.run("workflow_dispatch", "cuda-wsl2new", cells=",".join(TWO_CELLS))
    assert night.results() == {
        "plan": "success",
        "gate": "success",
        "cell cuda-wsl2new": "success",
        "report": "success",
        "deploy": "success",
    }, night.printed("report")
    assert night.returncode == 0
    runners = json.loads(night.outputs("plan")["runners"])
    assert [job["cells"] for job in runners["include"]] == [TWO_CELLS]
    assert runner_artifacts(night) == {job["artifact"] for job in runners["include"]}
    assert night.outputs("deploy")["page_url"] == f"file://{night.pages}/"
    cells = deployed_cells(night)
    for cell in TWO_CELLS:
        assert cells[cell]["status"] == "pass", cells[cell]["evidence"]
        native = cells[cell]["evidence_records"][0]
        assert (native["kind"], native["runner"]) == ("native", GPU_RUNNER)
    assert all(cells[c.id]["evidence_records"][0]["kind"] == "gate-only" for c in CELLS if c.id not in TWO_CELLS)


def test_a_night_with_every_runner_kind_offline_runs_no_cell_job_and_names_every_kind_not_planned(nights: Nights):
    night = nights.run("schedule", "none")
    results = night.results()
    # No cell job at all: an empty matrix would fail, so the job's condition skips it.
    assert not any(job.startswith("cell") for job in results), results
    assert (results["plan"], results["gate"]) == ("success", "success")
    assert runner_artifacts(night) == set()
    runners = json.loads(night.outputs("plan")["runners"])
    assert runners["include"] == []
    assert len(runners["not_planned"]) == 6
    report = night.outputs("report")
    assert (report["not_planned"], report["missing"]) == ("6", "0"), night.printed("report")
    # Today's workflow (recorded, not endorsed): the report's exit decides the night, the deploy runs after any
    # report that was not cancelled.
    assert (results["report"], results["deploy"], night.returncode) == ("success", "success", 0)
    compat = json.loads((night.pages / "compat.json").read_text())
    assert [kind["name"] for kind in compat["inputs"]["not_planned"]] == [k["name"] for k in runners["not_planned"]]


def test_a_misrouted_runner_fails_its_job_and_the_report_names_the_misroute(nights: Nights):
    """The rocm-wsl2new runner kind's job lands on the GPU runner, a CUDA WSL2 machine: its host check refuses the
    cells and uploads a result saying so, and the report shows them misrouted."""
    rocm = [c.id for c in CELLS if c.id.startswith("rocm-wsl2new-")]
    night = nights.run("workflow_dispatch", "cuda-wsl2new,rocm-wsl2new", cells=",".join([*TWO_CELLS, *rocm]))
    results = night.results()
    assert (results["cell cuda-wsl2new"], results["cell rocm-wsl2new"]) == ("failure", "failure")
    assert night.failed_steps("cell", "cuda-wsl2new") == []
    (refused,) = night.failed_steps("cell", "rocm-wsl2new")
    assert refused.startswith("Is this runner the cells' host?")
    assert "cell(s) misrouted: this runner is not the host its labels claim" in night.printed("cell")
    assert runner_artifacts(night) == {"junit-cuda-wsl2new", "junit-rocm-wsl2new"}
    assert sorted(p.stem for p in (night.artifacts / "junit-rocm-wsl2new").rglob("*.xml")) == sorted(rocm)
    assert night.outputs("report")["misrouted"] == "4"
    assert results["report"] == "failure"
    assert "regressed, crashed, misrouted or missing" in night.printed("report")
    # Today's workflow (recorded, not endorsed): the failed night's table is deployed all the same.
    assert (results["deploy"], night.returncode) == ("success", 1)
    cells = deployed_cells(night)
    for cell in rocm:
        assert cells[cell]["status"] == "misrouted"
        assert "but this machine is wsl2new with cuda" in cells[cell]["reason"]
        assert GPU_RUNNER in json.dumps(cells[cell]), cells[cell]
    assert {cells[c]["status"] for c in TWO_CELLS} == {"pass"}
