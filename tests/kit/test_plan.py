"""Plans for any host, described as DetectedHost values; the CLI plans for the host it detects."""

import json

import pytest

from matrix.cells import Cell, Host, Stack, select
from matrix.host.classify import DetectedHost, detect
from matrix.host.facts import collect_facts
from matrix.plan import Execution, plan_cell, plan_cells


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


def test_plan_command_plans_every_cell_for_the_host_it_detects(cli):
    done = cli("plan", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [p.as_dict() for p in plan_cells(select(None), detect(collect_facts()))]


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
