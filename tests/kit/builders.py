"""What several test modules build their inputs from: cell results, reports, the doctor's runs, a night's artifacts.

Here, in no test module, so that no test module imports another (and its tests with it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, gpu_machine

from matrix.cells import CELLS, Cell, select
from matrix.envelope import RunInfo
from matrix.host.record import EnvironmentRecord
from matrix.junit import write_cell_results
from matrix.plan import CellPlan, Execution
from matrix.releases import VLLM_VERSION
from matrix.report import render_json
from matrix.report.compat_cases import read_joined
from matrix.report.model import Report, build_report
from matrix.report.render_json import SCHEMA_FILE
from matrix.variables import PIN_MEMORY, V2_MODEL_RUNNER
from repro import gpu_run

# --- cell results and the report (JUnit as `matrix split` writes it) -------------------------------------------------

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
SCHEMA = json.loads(SCHEMA_FILE.read_text())
CASES_SCHEMA = {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/cases_file"}  # a release's case file


def written_compat(report: Report, out: Path) -> dict:
    """compat.json and its case files as the report writes them into ``out``, each checked against its schema; the
    report as one document, the case files joined in (``compat_cases.read_joined``)."""
    import jsonschema

    path = out / "compat.json"
    render_json.write(report, path)
    jsonschema.validate(json.loads(path.read_text()), SCHEMA)
    case_files = sorted((out / "cases").glob("*.json"))
    assert len(case_files) == len(report.versions)
    for case_file in case_files:
        jsonschema.validate(json.loads(case_file.read_text()), CASES_SCHEMA)
    return read_joined(path)


def envelope(cell: str, vllm: str = "0.33.0", started: str = "2026-11-29T12:00:00+00:00", **extra) -> str:
    props = {"cell_id": cell, "vllm_version": vllm, "started_at": started, "execution": "gate-only", **extra}
    return "<properties>" + "".join(f'<property name="{k}" value="{v}"/>' for k, v in props.items()) + "</properties>"


def write_suite(path: Path, cell: str, cases: list[str], **env) -> Path:
    path.write_text(
        f'<testsuites><testsuite name="{cell}">{envelope(cell, **env)}{"".join(cases)}</testsuite></testsuites>'
    )
    return path


def gate_case(name: str, key: str, pin_env: str, observed: str, failure: str = "") -> str:
    props = (
        f'<properties><property name="gate_key" value="{key}"/><property name="pin_env" value="{pin_env}"/>'
        f'<property name="observed" value="{observed}"/></properties>'
    )
    return f'<testcase classname="tests.cell.test_gate" name="{name}">{props}{failure}</testcase>'


def report_of(*inputs, **kw):
    return build_report([str(i) for i in inputs], kit_commit="test", now=NOW, **kw)


# What vLLM decides on each host, as the gate records it: (key, pin_env) -> observed.
# A kit that records the engine config (0.34.0's V1 cells are refused) says it was built; older records do not.
BUILT = {("engine_config", p): "built" for p in ("unset", "1")}
NATIVE = (
    BUILT
    | {("imports", p): "True" for p in ("unset", "1")}
    | {("pin", p): "True" for p in ("unset", "1")}
    | {("offload_path", p): "uva" for p in ("unset", "1")}
    | {("v2_buffer", p): "UvaBuffer" for p in ("unset", "1")}
)
# CUDA on a new WSL2 kernel: nothing pinned unless opted in (0.24.0+, #41496); the V2 runner crashed before 0.30.
CUDA_NEW_KERNEL = (
    BUILT
    | {("imports", p): "True" for p in ("unset", "1")}
    | {
        ("pin", "unset"): "False",
        ("pin", "1"): "True",
        ("offload_path", "unset"): "pageable-copy",
        ("offload_path", "1"): "uva",
        ("v2_buffer", "unset"): "crash: UVA is not available",
        ("v2_buffer", "1"): "UvaBuffer",
    }
)
# What vLLM (0.24.0+) logs as it builds the config of an engine that offloads with CUDA graphs on WSL2.
CAP_WARNING = {("pin_cap_warning", p): "True" for p in ("unset", "1")}
# CUDA on an old kernel: nothing pinned whatever the variable says.
CUDA_OLD_KERNEL = (
    BUILT
    | {("imports", p): "True" for p in ("unset", "1")}
    | {("pin", p): "False" for p in ("unset", "1")}
    | {("offload_path", p): "pageable-copy" for p in ("unset", "1")}
    | {("v2_buffer", p): "crash: UVA is not available" for p in ("unset", "1")}
)


def suite(tmp_path, cell: str, values: dict, vllm: str = "0.29.0", **env):
    cases = [gate_case(f"{key}-{pin}", key, pin, observed) for (key, pin), observed in values.items()]
    return write_suite(tmp_path / f"{cell}-{vllm}.xml", cell, cases, vllm=vllm, **env)


# --- a night's artifacts, as the cell jobs upload them ---------------------------------------------------------------

WSL2NEW = select("cuda-wsl2new-*")
GATE = RunInfo(
    env=EnvironmentRecord({"packages": {"vllm": {"version": VLLM_VERSION}}, "host": {"detected": "linux"}}),
    kit_commit="test",
    runner_name="gate-runner",
    started_at="2026-12-01T03:17:00+00:00",
)


# The night's workflow run, as GitHub names it in the publish job and in every step of the cell jobs.
NIGHT = "https://github.com/owner/kit/actions/runs/41"


def runner(name: str, host: str, started_at: str = "2026-12-02T03:17:00+00:00", run_id: str = "41") -> RunInfo:
    """A runner with a GPU on ``host``, as its environment record says, in workflow run ``run_id``."""
    env = gpu_machine(host)
    env["environment"] = {
        **env["environment"],
        "GITHUB_RUN_ID": run_id,
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_JOB": "cell",
    }
    return dataclasses.replace(GATE, env=EnvironmentRecord(env), runner_name=name, started_at=started_at)


def results(out: Path, cells: list[Cell], execution: Execution, run: RunInfo, failing: str = "") -> Path:
    """What a cell session's split writes for ``cells``: one passing case each, or failing with ``failing``."""
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "pytest.junit"
    failure = f'<failure message="{failing}" type="AssertionError">trace</failure>' if failing else ""
    raw.write_text(
        "<testsuites><testsuite name='pytest'>"
        + "".join(
            f'<testcase classname="tests.cell.test_repro" name="test_offload_{c.id}" time="1.5">'
            f'<properties><property name="cell" value="{c.id}"/></properties>{failure}'
            "<system-out>a long log nobody keeps</system-out></testcase>"
            for c in cells
        )
        + "</testsuite></testsuites>"
    )
    write_cell_results([CellPlan(c, execution, "faked for the test") for c in cells], raw, run, out)
    raw.unlink()
    return out


def night(root: Path, started_at: str = "2026-12-02T03:17:00+00:00") -> Path:
    """artifacts/ of a night: the gate job's 24 predictions, the CUDA WSL2-new runner's native run of its four
    cells, and a ROCm WSL2-new runner that found itself misrouted (its artifact says so)."""
    artifacts = root / "artifacts"
    results(artifacts / "junit-gate" / VLLM_VERSION / "gate", list(CELLS), Execution.GATE_ONLY, GATE)
    wsl = runner("wsl-box", "wsl2new", started_at)
    results(artifacts / "junit-cuda-wsl2new" / VLLM_VERSION / "cell", WSL2NEW, Execution.NATIVE, wsl)
    misrouted = runner("linux-box", "linux", started_at)
    results(artifacts / "junit-rocm-wsl2new" / "misrouted", select("rocm-wsl2new-*"), Execution.MISROUTED, misrouted)
    return artifacts


def claims_file(root: Path) -> Path:
    """The night's plan as the plan job hands it to the report (``plan --format runners``)."""
    jobs = [
        {"name": kind, "artifact": f"junit-{kind}", "cells": [c.id for c in select(f"{kind}-*")]}
        for kind in ("cuda-wsl2new", "rocm-wsl2new")
    ]
    path = root / "runners.json"
    path.write_text(json.dumps({"include": jobs, "not_planned": []}))
    return path


# --- the doctor, run as a person runs it -----------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """This test process's environment without the variables the doctor reads, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in (PIN_MEMORY.name, V2_MODEL_RUNNER.name)}
    return {**env, **extra}


def doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "matrix", "doctor", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def answered(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def printed(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- the kit's tree as a device call sends it ------------------------------------------------------------------------


def kit_as_sent(kit: Path) -> Path:
    """A copy of the kit's tree at ``kit`` as a device call sends it: tracked and untracked-not-ignored files."""
    for path in gpu_run.tree_files():
        target = kit / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return kit
