"""Plans for any host, described as DetectedHost values; the CLI plans for the host it detects or its record
describes, and writes the session's one plan.json, which pytest and the split both read."""

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import run_module

from matrix.cells import Cell, Host, Stack, select
from matrix.host.classify import DetectedHost, detect
from matrix.host.facts import collect_facts
from matrix.host.record import EnvironmentRecord
from matrix.plan import PLAN_SCHEMA, Execution, Plan, cell_pytest_args, load_plan, plan_cell, plan_cells


def host(kind: Host, stack: Stack | None) -> DetectedHost:
    return DetectedHost(kind, stack, (6, 6, 87), "GPU" if stack else "", "test host")


@pytest.mark.parametrize(
    "here, cell, execution",
    [
        (host(Host.LINUX, None), "cuda-linux-v1-graph", Execution.GATE_ONLY),
        (host(Host.LINUX, Stack.CUDA), "cuda-linux-v2-graph", Execution.NATIVE),
        (host(Host.LINUX, Stack.CUDA), "cuda-wsl2new-v2-graph", Execution.EMULATED),
        (host(Host.LINUX, Stack.CUDA), "cuda-wsl2old-v1-eager", Execution.EMULATED),
        (host(Host.LINUX, Stack.CUDA), "rocm-wsl2new-v2-graph", Execution.GATE_ONLY),
        (host(Host.WSL2NEW, Stack.CUDA), "cuda-wsl2new-v1-graph", Execution.NATIVE),
        (host(Host.WSL2NEW, Stack.CUDA), "cuda-wsl2old-v1-graph", Execution.GATE_ONLY),
        (host(Host.WSL2NEW, Stack.CUDA), "cuda-linux-v1-graph", Execution.GATE_ONLY),
        (host(Host.WSL2OLD, Stack.ROCM), "rocm-wsl2old-v2-eager", Execution.NATIVE),
    ],
)
def test_execution(here, cell, execution):
    plan = plan_cell(Cell.parse(cell), here)
    assert plan.execution is execution
    assert plan.reason


def test_a_runner_claiming_a_cell_it_is_not_is_misrouted():
    here = host(Host.WSL2NEW, Stack.CUDA)
    assert plan_cell(Cell.parse("cuda-wsl2new-v2-graph"), here, require_native=True).execution is Execution.NATIVE
    stale = plan_cell(Cell.parse("cuda-wsl2old-v2-graph"), here, require_native=True)
    assert stale.execution is Execution.MISROUTED
    assert "wsl2new" in stale.reason


@pytest.mark.reads_host
def test_plan_command_plans_every_cell_for_the_host_it_detects(cli):
    done = cli("plan", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [p.as_dict() for p in plan_cells(select(None), detect(collect_facts()))]


@pytest.mark.reads_host
def test_require_native_fails_here_with_one_line(cli):
    # A cell of another host than this one, which no runner here can claim natively.
    other = Host.WSL2OLD if detect(collect_facts()).host is Host.WSL2NEW else Host.WSL2NEW
    done = cli("plan", "--cell", f"cuda-{other}-v2-graph", "--require", "native")
    assert done.returncode == 3
    assert "misrouted" in done.stdout
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [["plan", "--cells", "cuda-wsl3-*"], ["plan", "--cell", "cuda-linux-v9-graph"]])
def test_bad_cells_get_one_line_and_exit_2(cli, args):
    done = cli(*args)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


# --- plan.json: one plan per session, read by pytest and the split -------------------------------

CELL = "cuda-wsl2new-v1-graph"
# Stand-ins for machines this one may not be: a native-Linux CUDA host emulates the cell; a GPU-less one gates it.
GPU_HOST = DetectedHost(Host.LINUX, Stack.CUDA, (6, 8, 0), "NVIDIA H200", "stand-in GPU host, written by the test")
NO_GPU_HOST = DetectedHost(Host.LINUX, None, (6, 8, 0), "", "stand-in GPU-less host, written by the test")


@pytest.fixture(scope="module")
def env_record(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("env") / "env.json"
    assert run_module("matrix", "env", "--out", str(path)).returncode == 0
    return path


@pytest.mark.reads_host
def test_plan_from_the_environment_record_is_written_once_and_read_back(cli, env_record, tmp_path):
    out = tmp_path / "plan.json"
    done = cli("plan", "--cells", "cuda-wsl2*-*-graph", "--env", str(env_record), "--out", str(out))
    assert done.returncode == 0, done.stderr
    record = EnvironmentRecord.read(env_record, str(env_record), "")
    plan = Plan.from_record(select("cuda-wsl2*-*-graph"), record)
    assert load_plan(out) == plan and plan.env_hash == record.env_hash == json.loads(env_record.read_text())["env_hash"]
    assert json.loads(out.read_text())["schema"] == PLAN_SCHEMA
    # The same table as without --out, one row per cell.
    assert [line.split()[:2] for line in done.stdout.splitlines()] == [
        [p.cell.id, p.execution.value] for p in plan.cells
    ]


@pytest.mark.reads_host
def test_case_and_suite_execution_come_from_the_same_plan_json(env_record, tmp_path):
    cell = Cell.parse(CELL)
    # Written as data, for a host this machine is not, so detection here would say otherwise.
    plan = Plan.for_host([cell], GPU_HOST)
    if plan_cell(cell, detect(collect_facts())).execution is plan.cells[0].execution:
        plan = Plan.for_host([cell], NO_GPU_HOST)
    (planned,) = plan.cells
    plan_file, raw, out = tmp_path / "plan.json", tmp_path / "junit.xml", tmp_path / "results"
    plan.write(plan_file)
    # Two cases, but both host evaluations (pin_env unset and 1): vLLM's gate is slow to ask.
    tests = run_module(
        "pytest",
        "tests/cell/test_gate.py",
        *cell_pytest_args(CELL, str(raw), str(tmp_path / "probe.json"), str(plan_file)),
        *("-k", "test_runner_selected", "-p", "no:cacheprovider"),
    )
    # An emulated cell on a machine without the GPU fails its tests: a result, like any other.
    assert tests.returncode in (0, 1), tests.stdout[-3000:]
    split = run_module(
        "matrix", "split", str(raw), "--plan", str(plan_file), "--env", str(env_record), "--out", str(out)
    )
    assert split.returncode == 0, split.stderr
    (suite,) = ElementTree.parse(out / f"{CELL}.xml").getroot().iter("testsuite")
    envelope = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert (envelope["execution"], envelope["execution_reason"]) == (planned.execution.value, planned.reason)
    cases = suite.findall("testcase")
    assert len(cases) == 2
    for case in cases:
        properties = {p.get("name"): p.get("value") for p in case.find("properties")}
        assert properties["execution"] == planned.execution.value


@pytest.mark.parametrize(
    "text, says",
    [
        (None, "does not exist"),
        ("{garbage", "cannot be read (not JSON: Expecting property name"),
        ("[" * 100_000, "cannot be read (nested deeper than 64 levels)"),
        ('{"schema": 1' + "0" * 5000 + "}", "cannot be read (a number of 5001 digits (at most 100))"),
        ('{"schema": "wslpin-kit.env/1"}', f"is not a plan record (schema {PLAN_SCHEMA})"),
        (f'{{"schema": "{PLAN_SCHEMA}", "cells": []}}', "is a damaged plan record (KeyError: 'host')"),
    ],
)
@pytest.mark.reads_host
def test_split_with_a_missing_or_bad_plan_refuses_in_one_line(env_record, tmp_path, text, says):
    plan, raw, out = tmp_path / "plan.json", tmp_path / "junit.xml", tmp_path / "results"
    if text is not None:
        plan.write_text(text)
    raw.write_text('<testsuites><testsuite name="pytest"/></testsuites>')
    done = run_module("matrix", "split", str(raw), "--plan", str(plan), "--env", str(env_record), "--out", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"error: plan {plan} {says}") and done.stderr.count("\n") == 1, done.stderr
    assert f"`python -m matrix plan --cells CELLS --env ENV.json --out {plan}`" in done.stderr
    assert not out.exists()


@pytest.mark.reads_host
def test_split_refuses_cells_the_plan_does_not_hold(env_record, tmp_path):
    plan = tmp_path / "plan.json"
    Plan.for_host([Cell.parse(CELL)], NO_GPU_HOST).write(plan)
    done = run_module(
        "matrix",
        "split",
        "absent.xml",
        "--cells",
        "rocm-*",
        "--plan",
        str(plan),
        "--env",
        str(env_record),
        "--crashed-if-missing",
        "--out",
        str(tmp_path / "results"),
    )
    assert done.returncode == 2 and done.stderr.startswith("error: the plan has no rocm-linux-v1-graph")
    assert not (tmp_path / "results").exists()
