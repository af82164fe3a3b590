"""A matrix workflow run, simulated: the plan job's script, runner artifacts, the report job's script.

The plan and the report run as matrix.yml writes them (their ``run:`` scripts, in bash, with
the variables the workflow sets), and a misrouted runner is this machine running the cell job's
host check for a ROCm WSL2 host it is not. What cannot run here is a GPU runner's cells: their
results are faked, written with the kit's own writer as a cell session's split writes them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import ROOT, gpu_machine
from package_index import covered, point_pip_at, refusing_url, served, write_index

from matrix.cells import CELLS, Cell, Host, select
from matrix.commands.here import detected_plan
from matrix.envelope import RunInfo
from matrix.host.record import EnvironmentRecord
from matrix.junit import write_cell_results
from matrix.plan import CellPlan, Execution
from matrix.releases import VLLM_VERSION
from matrix.report.compat_cases import read_joined

WORKFLOW = yaml.safe_load((ROOT / ".github" / "workflows" / "matrix.yml").read_text())
JOBS = WORKFLOW["jobs"]
RUN = RunInfo(
    env=EnvironmentRecord({"packages": {"vllm": {"version": VLLM_VERSION}}, "host": {"detected": "faked"}}),
    kit_commit="test",
    runner_name="faked-runner",
    started_at="2026-12-01T03:17:00+00:00",
)


def step(job: str, name: str) -> dict:
    return next(s for s in JOBS[job]["steps"] if s.get("name", s.get("id", "")).startswith(name))


def bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """A ``run:`` script as GitHub's runner runs it (``bash -e``), with this test's Python and nox first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    environ = {**os.environ, "PATH": path, **env}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def plan_job(where: Path, online: str = "") -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """The plan job's script in the kit's checkout, with the repository variable ``online``; its outputs."""
    where.mkdir(parents=True, exist_ok=True)
    github_output = where / "github-output"
    done = bash(step("plan", "plan")["run"], ROOT, CELLS="", RUNNER_KINDS=online, GITHUB_OUTPUT=str(github_output))
    lines = github_output.read_text().splitlines() if github_output.exists() else []
    return done, dict(line.split("=", 1) for line in lines)


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict[str, str]:
    """The plan job's outputs (``matrix`` for the cell jobs, ``runners`` for the report), every kind planned."""
    done, outputs = plan_job(tmp_path_factory.mktemp("plan"))
    assert done.returncode == 0, done.stderr
    assert sorted(outputs) == ["matrix", "runners"]
    return outputs


def upload(artifacts: Path, name: str, results: Path) -> None:
    """What upload-artifact then download-artifact (no merge-multiple) do: results/ lands in artifacts/<name>/."""
    shutil.copytree(results, artifacts / name)


def runner_run(host: Host) -> RunInfo:
    """RUN as a runner on ``host`` with a GPU records it: an envelope that contradicts itself is not believed."""
    env = gpu_machine(host.value)
    env["gpu"]["devices"] = [{"name": "a GPU (faked for the test)"}]
    return dataclasses.replace(RUN, env=EnvironmentRecord({**env, "env_hash": RUN.env.env_hash}))


def fake_results(
    out: Path, cells: list[Cell], execution: Execution, crashed: tuple[Cell, ...] = (), host: Host | None = None
) -> None:
    """The files a cell session's split writes, for a run nobody could do here: every test passed, or none ran.

    On a runner of ``host`` (default: the cells' own)."""
    run = runner_run(host or cells[0].host) if execution is Execution.NATIVE else RUN
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "pytest.junit"  # not *.xml, and removed: only the split's files are uploaded
    cases = "".join(
        f'<testcase classname="tests.cell.test_probe" name="test_pin_{c.id}">'
        f'<properties><property name="cell" value="{c.id}"/></properties></testcase>'
        for c in cells
    )
    raw.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    ran = [CellPlan(c, execution, "faked for the test") for c in cells if c not in crashed]
    write_cell_results(ran, raw, run, out)
    write_cell_results([CellPlan(c, execution, "faked for the test") for c in crashed], None, run, out)
    raw.unlink()


def nox_report(path: Path, cells: list[Cell], failed: tuple[Cell, ...] = ()) -> None:
    sessions = [
        {"name": "cell", "signatures": [c.session], "result": "failed" if c in failed else "success", "reason": None}
        for c in cells
    ]
    path.write_text(json.dumps({"result": 1 if failed else 0, "sessions": sessions}))


def runner_artifacts(workspace: Path, jobs: list[dict], honest: bool) -> Path:
    """artifacts/ as the report job downloads it: the gate job's predictions and each runner's results.

    Dishonest: cuda-linux also claims a native run of a cuda-wsl2new cell, whose own runner uploads
    nothing; one rocm-wsl2old cell crashed with a file saying so, another before writing any; the
    rocm-wsl2new runner is this machine, which is not its host.
    """
    artifacts = workspace / "artifacts"
    gate = workspace / "gate" / "results"
    fake_results(gate / VLLM_VERSION / "gate", list(CELLS), Execution.GATE_ONLY)
    upload(artifacts, "junit-gate", gate)
    for job in jobs:
        cells = [Cell.parse(c) for c in job["cells"]]
        results = workspace / job["name"] / "results"
        results.mkdir(parents=True)
        if honest or job["name"] in ("cuda-linux", "cuda-wsl2old", "rocm-linux"):
            fake_results(results / VLLM_VERSION / "cell", cells, Execution.NATIVE)
            nox_report(results / f"nox-{job['name']}.json", cells)
        elif job["name"] == "rocm-wsl2old":
            fake_results(results / VLLM_VERSION / "cell", cells[:3], Execution.NATIVE, crashed=(cells[0],))
            nox_report(results / f"nox-{job['name']}.json", cells, failed=(cells[0], cells[3]))
        elif job["name"] == "rocm-wsl2new":
            check = step("cell", "Is this runner the cells' host?")
            done = bash(check["run"], results.parent, CELLS=job["pattern"], VLLM="", PYTHONPATH=str(ROOT))
            assert done.returncode == 3, done.stderr  # the job fails, and its artifact says why
        else:
            continue  # cuda-wsl2new: the job never ran, nothing is uploaded
        upload(artifacts, job["artifact"], results)
    if not honest:
        liar = artifacts / "junit-cuda-linux" / VLLM_VERSION / "cell"
        fake_results(liar, [Cell.parse("cuda-wsl2new-v1-graph")], Execution.NATIVE, host=Host.WSL2NEW)
    return artifacts


REPORT_INSTALL = "python -m pip install --no-deps -r requirements/report.txt"


def job_step(job: str, name: str, workspace: Path, **env: str) -> subprocess.CompletedProcess:
    """One step of ``job`` as matrix.yml writes it, run in ``workspace`` with the variables a runner sets."""
    script = step(job, name)["run"]
    install, _, rest = script.partition("\n")
    if install == REPORT_INSTALL:  # done already: this test's Python has what the lock pins (test_workflows)
        script = rest
    temp = workspace / "runner-temp"
    temp.mkdir(exist_ok=True)
    runner = {
        "RUNNER_TEMP": str(temp),
        "GITHUB_STEP_SUMMARY": str(workspace / "step-summary.md"),
        "GITHUB_OUTPUT": str(workspace / "step-outputs"),
        # The kit under test, not the workspace's copy of it (a job's checkout is the kit itself).
        "PYTHONPATH": str(ROOT),
    }
    return bash(script, workspace, **runner, **env)


def report(workspace: Path, planned: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict, str]:
    """The report job's step, as matrix.yml writes it, on the downloaded artifacts."""
    done = job_step("report", "Report the night", workspace, RUNNERS=planned["runners"])
    compat = read_joined(workspace / "night" / "compat.json")
    summary = (workspace / "step-summary.md").read_text()
    assert summary == (workspace / "night" / "COMPATIBILITY.md").read_text()
    return done, compat, summary


def statuses(compat: dict) -> dict[str, dict]:
    (release,) = compat["versions"]
    assert release["vllm"] == VLLM_VERSION
    return {c["id"]: c for c in release["cells"]}


@pytest.mark.reads_host
def test_a_lying_crashed_misrouted_or_missing_runner_fails_the_report(tmp_path, planned):
    here = detected_plan(select("rocm-wsl2new-*"), require_native=True)
    if any(p.execution is not Execution.MISROUTED for p in here.cells):
        pytest.skip("this machine is a ROCm WSL2 host: it cannot play the runner misrouted to one")
    jobs = json.loads(planned["matrix"])["include"]
    assert sorted(c for job in jobs for c in job["cells"]) == sorted(c.id for c in CELLS)
    assert json.loads(planned["runners"]) == {"include": jobs, "not_planned": []}
    runner_artifacts(tmp_path, jobs, honest=False)
    done, compat, summary = report(tmp_path, planned)
    assert done.returncode == 1, done.stderr
    cells = statuses(compat)
    shown = {cell: c["status"] for cell, c in cells.items()}
    for cell in ("cuda-wsl2new-v1-graph", "cuda-wsl2new-v2-graph", "cuda-wsl2new-v1-eager", "cuda-wsl2new-v2-eager"):
        assert shown[cell] == "missing", cell  # never the gate job's "pass"
        assert "cuda-wsl2new" in cells[cell]["reason"]
    assert shown["rocm-wsl2old-v1-graph"] == shown["rocm-wsl2old-v2-eager"] == "crashed"
    assert {shown[c.id] for c in CELLS if c.id.startswith("rocm-wsl2new")} == {"misrouted"}
    assert "this machine is" in cells["rocm-wsl2new-v1-graph"]["reason"]
    assert shown["cuda-linux-v1-graph"] == shown["rocm-wsl2old-v2-graph"] == "pass"
    # The lie: listed as suspect, and the cell it claims rests on nothing native.
    (lie,) = compat["inputs"]["suspect"]
    assert (lie["artifact"], lie["cell"], lie["execution"]) == ("junit-cuda-linux", "cuda-wsl2new-v1-graph", "native")
    assert not any("native" in e for e in cells["cuda-wsl2new-v1-graph"]["evidence"])
    assert [s["execution"] for s in cells["cuda-wsl2new-v1-graph"]["superseded"]] == ["gate-only"]
    assert "Suspect results" in summary and "cuda-wsl2new-v1-graph" in summary
    assert "10 cell(s) regressed, crashed, misrouted or missing" in done.stderr
    assert "1 result(s) claim a run their runner may not speak for" in done.stderr
    # On the commit: an annotation per crashed or misrouted cell, and the counts as the step's outputs.
    errors = [line for line in done.stdout.splitlines() if line.startswith("::error ")]
    warnings = [line for line in done.stdout.splitlines() if line.startswith("::warning ")]
    assert len(errors) == 6 and f"::error title=vLLM {VLLM_VERSION} rocm-wsl2old-v1-graph%3A crashed::" in done.stdout
    assert len(warnings) == 4 and all("cuda-wsl2new" in line for line in warnings)
    outputs = dict(line.split("=") for line in (tmp_path / "step-outputs").read_text().splitlines())
    assert (outputs["cells"], outputs["crashed"], outputs["misrouted"], outputs["missing"]) == ("24", "2", "4", "4")


def test_an_honest_run_passes(tmp_path, planned):
    runner_artifacts(tmp_path, json.loads(planned["matrix"])["include"], honest=True)
    done, compat, _ = report(tmp_path, planned)
    assert done.returncode == 0, done.stderr
    cells = statuses(compat)
    assert {c["status"] for c in cells.values()} == {"pass"}
    assert all(c["evidence"][0].startswith("native run") for c in cells.values())
    assert compat["inputs"]["suspect"] == []


def test_a_runner_kind_not_online_gets_no_job_and_the_report_names_it(tmp_path):
    """WSLPIN_RUNNER_KINDS lists two kinds: the other four are not queued (a job would wait 24 hours for a runner),
    and the night's report says so instead of calling their cells missing."""
    done, outputs = plan_job(tmp_path, online="cuda-linux,cuda-wsl2new")
    assert done.returncode == 0, done.stderr
    jobs = json.loads(outputs["matrix"])["include"]
    assert [job["name"] for job in jobs] == ["cuda-linux", "cuda-wsl2new"]
    not_planned = json.loads(outputs["runners"])["not_planned"]
    assert [kind["name"] for kind in not_planned] == ["cuda-wsl2old", "rocm-linux", "rocm-wsl2old", "rocm-wsl2new"]
    assert all("WSLPIN_RUNNER_KINDS" in kind["reason"] and len(kind["cells"]) == 4 for kind in not_planned)
    runner_artifacts(tmp_path, jobs, honest=True)
    done, compat, summary = report(tmp_path, outputs)
    assert done.returncode == 0, done.stderr
    cells = statuses(compat)
    for cell in CELLS:
        planned_native = cell.id in {c for job in jobs for c in job["cells"]}
        evidence = cells[cell.id]["evidence"][0]
        assert evidence.startswith("native run") == planned_native, (cell.id, evidence)
    assert [kind["name"] for kind in compat["inputs"]["not_planned"]] == [kind["name"] for kind in not_planned]
    summary_file = json.loads((tmp_path / "night" / "compat.json").read_text())
    jsonschema.validate(summary_file, json.loads((ROOT / "matrix" / "report" / "compat.schema.json").read_text()))
    assert "Runner kinds not planned in this run" in summary and "no rocm-wsl2new runner is listed online" in summary
    notices = [line for line in done.stdout.splitlines() if line.startswith("::notice title=")]
    assert len(notices) == 4 and all("not planned" in line for line in notices)
    assert "not_planned=4" in (tmp_path / "step-outputs").read_text().splitlines()


def test_with_no_runner_kind_online_the_cell_jobs_are_skipped_and_a_kind_the_matrix_lacks_is_one_line(tmp_path):
    done, outputs = plan_job(tmp_path / "none", online="none")
    assert done.returncode == 0, done.stderr
    assert json.loads(outputs["matrix"]) == {"include": []}
    assert len(json.loads(outputs["runners"])["not_planned"]) == 6
    # An empty matrix fails the job: the cell job's condition skips it instead.
    assert "fromJson(needs.plan.outputs.matrix).include[0] != null" in JOBS["cell"]["if"]
    done, outputs = plan_job(tmp_path / "typo", online="cuda-linux,cuda-wsl3")
    assert done.returncode != 0 and outputs == {}
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "WSLPIN_RUNNER_KINDS names cuda-wsl3, no runner kind of the matrix" in line


def releases_step(where: Path, vllm: str = "") -> tuple[subprocess.CompletedProcess, dict, str]:
    """The plan job's step that asks the package index, as matrix.yml writes it: the gate job's matrix, the summary."""
    install, _, script = step("plan", "vLLM releases newer")["run"].partition("\n")
    assert install == REPORT_INSTALL  # done already: this test's Python has what the lock pins (test_workflows)
    where.mkdir()
    outputs, summary = where / "step-outputs", where / "step-summary.md"
    done = bash(
        script, ROOT, VLLM=vllm, RUNNER_TEMP=str(where), GITHUB_OUTPUT=str(outputs), GITHUB_STEP_SUMMARY=str(summary)
    )
    gate = dict(line.split("=", 1) for line in outputs.read_text().splitlines())["gate"] if outputs.exists() else "{}"
    return done, json.loads(gate), summary.read_text() if summary.exists() else ""


def test_a_release_newer_than_the_matrix_is_gated_beside_the_nights_in_an_artifact_the_report_does_not_read(
    tmp_path, monkeypatch
):
    index = write_index(tmp_path / "index", [*covered(), "99.1.0", "99.2.0rc1"])
    with served(index.parent) as url:
        point_pip_at(monkeypatch, f"{url}/simple/")
        done, gate, summary = releases_step(tmp_path / "night")
        asked, asked_gate, _ = releases_step(tmp_path / "asked", vllm="0.32.0")
    assert done.returncode == 0, done.stderr
    assert gate == {
        "include": [{"vllm": "", "artifact": "junit-gate"}, {"vllm": "99.1.0", "artifact": "new-release-gate-99.1.0"}]
    }
    assert summary == "New vLLM releases gated tonight: 99.1.0\n"
    assert JOBS["gate"]["strategy"]["matrix"] == "${{ fromJson(needs.plan.outputs.gate) }}"
    for job in ("report", "publish"):
        (download,) = [s for s in JOBS[job]["steps"] if "download-artifact" in s.get("uses", "")]
        pattern = download["with"]["pattern"]
        assert fnmatch.fnmatch("junit-gate", pattern) and not fnmatch.fnmatch("new-release-gate-99.1.0", pattern)
    # A release asked for by hand is the night's alone.
    assert asked.returncode == 0, asked.stderr
    assert asked_gate == {"include": [{"vllm": "0.32.0", "artifact": "junit-gate"}]}


def test_with_no_package_index_the_night_gates_its_own_release_and_warns(tmp_path, monkeypatch):
    point_pip_at(monkeypatch, refusing_url())
    done, gate, summary = releases_step(tmp_path / "night")
    assert done.returncode == 0, done.stderr
    assert gate == {"include": [{"vllm": "", "artifact": "junit-gate"}]}
    (warning,) = [line for line in done.stdout.splitlines() if line.startswith("::warning ")]
    assert "no list of vLLM releases" in warning
    assert done.stderr.splitlines()[-1].startswith("error: the package index gave no list of vllm releases (")
    assert summary == "New vLLM releases gated tonight: none\n"


def test_the_cell_jobs_tools_go_into_a_venv_of_the_jobs_own(tmp_path):
    """A runner's system Python may refuse installs (Debian 12's is externally managed; pip's
    PIP_REQUIRE_VIRTUALENV refuses the same way here): the step installs nox and uv into a venv under
    RUNNER_TEMP, and the next steps find them through GITHUB_PATH."""
    github_path = tmp_path / "github-path"
    done = bash(
        step("cell", "Install the kit's tools")["run"],
        tmp_path,
        RUNNER_TEMP=str(tmp_path),
        GITHUB_PATH=str(github_path),
        PIP_REQUIRE_VIRTUALENV="true",
    )
    assert done.returncode == 0, done.stderr
    (tools,) = github_path.read_text().splitlines()
    assert Path(tools) == tmp_path / "kit-tools" / "bin"
    for tool in ("nox", "uv"):
        version = subprocess.run([str(Path(tools) / tool), "--version"], capture_output=True, text=True, check=False)
        assert version.returncode == 0, version.stderr
    assert not any("--user" in line for s in JOBS["cell"]["steps"] for line in s.get("run", "").splitlines())


def git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True)
    return done.stdout
