import json

import pytest
from conftest import run_module

from matrix.cells import CELLS, Cell, Host, Mode, Runner, Stack, select
from matrix.errors import MatrixError


def test_the_matrix_has_24_distinct_cells():
    assert len(CELLS) == 24
    assert len({c.id for c in CELLS}) == 24
    assert {c.stack for c in CELLS} == set(Stack)
    assert {c.host for c in CELLS} == set(Host)


def test_cells_order_the_way_the_matrix_is_written_not_alphabetically():
    # Axis values are strings (their ids), but every comparison follows definition order.
    assert sorted(reversed(CELLS)) == list(CELLS)
    assert max(CELLS) == CELLS[-1] and min(CELLS) == CELLS[0]
    assert Mode.GRAPH < Mode.EAGER and Mode.EAGER > Mode.GRAPH and Mode.GRAPH <= Mode.GRAPH <= Mode.EAGER
    assert Host.WSL2NEW >= Host.WSL2OLD >= Host.LINUX
    assert Stack.CUDA == "cuda" and str(Host.WSL2NEW) == f"{Host.WSL2NEW}" == "wsl2new"


@pytest.mark.parametrize("cell", CELLS, ids=str)
def test_ids_round_trip(cell):
    assert Cell.parse(cell.id) == cell
    assert Cell.parse(cell.id).id == cell.id


def test_id_spelling():
    cell = Cell(Stack.CUDA, Host.WSL2NEW, Runner.V2, Mode.GRAPH)
    assert cell.id == "cuda-wsl2new-v2-graph"
    assert cell.session == "cell(cuda, wsl2new, v2, graph)"
    assert cell.env() == {"VLLM_USE_V2_MODEL_RUNNER": "1"}


@pytest.mark.parametrize(
    "bad, says",
    [
        ("cuda-wsl3-v2-graph", "unknown host 'wsl3'; valid values: linux, wsl2old, wsl2new"),
        ("metal-linux-v1-graph", "unknown stack 'metal'; valid values: cuda, rocm"),
        ("cuda-linux-v2", "expected stack-host-runner-mode"),
        ("", "expected stack-host-runner-mode"),
    ],
)
def test_bad_id_names_the_valid_values(bad, says):
    with pytest.raises(MatrixError) as err:
        Cell.parse(bad)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_patterns_select_in_matrix_order_without_duplicates():
    assert [c.id for c in select("cuda-wsl2*-*-graph")] == [
        "cuda-wsl2old-v1-graph",
        "cuda-wsl2old-v2-graph",
        "cuda-wsl2new-v1-graph",
        "cuda-wsl2new-v2-graph",
    ]
    both = select("rocm-linux-v1-eager,rocm-linux-*-eager")
    assert [c.id for c in both] == ["rocm-linux-v1-eager", "rocm-linux-v2-eager"]
    assert select(None) == list(CELLS) == select("all")


@pytest.mark.parametrize("pattern", ["cuda-wsl9*", "cuda-linux-v1-graph,,rocm-*", "cuda-linux-v3-graph"])
def test_bad_patterns_are_errors(pattern):
    with pytest.raises(MatrixError):
        select(pattern)


def test_nox_lists_every_cell_with_its_tags(nox_listing):
    sessions = {s["session"]: s for s in json.loads(nox_listing)}
    for cell in CELLS:
        entry = sessions[cell.session]
        assert set(entry["tags"]) == {"cell", *(str(v) for v in (cell.stack, cell.host, cell.runner, cell.mode))}
        assert entry["description"], "every session documents itself"
    assert {"gate", "wsl_cuda_graph", "tests", "lint"} <= set(sessions)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("banana", "--vllm 'banana' is no release, vLLM wheel file or directory"),
        ("no/such/vllm-0.33.0-cp38-abi3-linux_x86_64.whl", "no vLLM wheel file there"),
        (".github", "is not a vLLM source checkout (no vllm/__init__.py in it)"),
    ],
)
def test_nox_refuses_what_is_no_vllm_in_one_line_before_installing_anything(given, said):
    done = run_module("nox", "-s", "gate", "--", "--vllm", given)
    assert done.returncode != 0
    assert said in done.stderr and "Traceback" not in done.stderr and "uv pip install" not in done.stderr
