"""vLLM 0.26.0's measured outcomes on an H200, replayed through tests/cell/test_repro.py.

The GPU cannot exist here: pytest runs the cell tests in a real subprocess, as a cell session
does, with a plan standing in for an H200 on native Linux and the ``replay_h200`` plugin standing
in for the engine runs, the gate's answers and the probe (see that file for what was measured and
what is derived). What is real: the cell tests, their fixtures and the ``expect`` judge, the rules
in matrix/judge/expectations.toml (resolved for 0.26.0), repro/failures.py's classifier reading the
error texts, pytest's JUnit, and the kit's JUnit reader. Each cuda-* case must come out as below.
"""

import fnmatch
from pathlib import Path

import pytest
from conftest import run_module

from matrix.cells import Host, Stack, select
from matrix.host.classify import DetectedHost
from matrix.junit import FAILED, PASSED, SKIPPED, XFAIL, outcome, parse, properties
from matrix.plan import Plan, cell_pytest_args
from matrix.variables import GATE_PIN_VALUES
from repro.probe import SECTIONS

H200 = DetectedHost(Host.LINUX, Stack.CUDA, (6, 8, 0), "NVIDIA H200", "stand-in for the H200 of the 0.26.0 table")
CELLS = "cuda-*"
ISSUE = "https://github.com/vllm-project/vllm/issues/"
DYNAMO, UVA = "dynamo-unsupported", "uva-not-available"

# Per (cells, pin_env): the offloaded run's outcome as the classifier names it, then the JUnit
# outcome of each engine test (a known failure as (XFAIL, its issue)). The first matching row wins.
ENGINE_TESTS = (
    "test_engine_starts_and_generates",
    "test_offload_really_happened",
    "test_greedy_tokens_match_the_reference",
    "test_offload_path_is_the_one_the_gate_predicted",
)
V2_IGNORES_OFFLOAD = (XFAIL, "51396")
ENGINE_ROWS = [
    # Pinned memory: native Linux, and a new WSL2 kernel with the opt-in.
    ("cuda-linux-v1-*", "*", "works", (PASSED, PASSED, PASSED, PASSED)),
    ("cuda-wsl2new-v1-*", "1", "works", (PASSED, PASSED, PASSED, PASSED)),
    ("cuda-linux-v2-*", "*", "works", (PASSED, V2_IGNORES_OFFLOAD, PASSED, SKIPPED)),
    ("cuda-wsl2new-v2-*", "1", "works", (PASSED, V2_IGNORES_OFFLOAD, PASSED, SKIPPED)),
    # No pinned memory: WSL2's default, and an old kernel whatever the variable.
    ("cuda-wsl2*-v1-graph", "*", DYNAMO, ((XFAIL, "37883"), SKIPPED, SKIPPED, SKIPPED)),
    ("cuda-wsl2*-v1-eager", "*", "works", (PASSED, PASSED, PASSED, PASSED)),
    ("cuda-wsl2*-v2-*", "*", UVA, ((XFAIL, "47387"), SKIPPED, SKIPPED, SKIPPED)),
]
# The minimal form, native Linux only: (its outcome, test_minimal_form_on_native_linux,
# test_minimal_form_copies_pageable_weights). V2 no longer fails: a known issue, strictly expected.
MINIMAL_ROWS = {
    "cuda-linux-v1-graph": (DYNAMO, PASSED, SKIPPED),
    "cuda-linux-v1-eager": ("works", PASSED, PASSED),
    "cuda-linux-v2-graph": ("works", V2_IGNORES_OFFLOAD, V2_IGNORES_OFFLOAD),
    "cuda-linux-v2-eager": ("works", PASSED, V2_IGNORES_OFFLOAD),
}
CUDA_CELLS = [cell.id for cell in select(CELLS)]


def _engine_row(cell: str, pin_env: str) -> tuple[str, tuple]:
    for cells, pin, kind, judged in ENGINE_ROWS:
        if fnmatch.fnmatchcase(cell, cells) and pin in ("*", pin_env):
            return kind, judged
    raise AssertionError(f"no row for {cell} pin_env={pin_env}")


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> dict[tuple[str, str, str], tuple[str, str, dict[str, str]]]:
    """(test, cell, pin_env or probe section) -> (JUnit outcome, message, case properties)."""
    tmp = tmp_path_factory.mktemp("replay")
    plan, raw = tmp / "plan.json", tmp / "junit.xml"
    Plan.for_host(select(CELLS), H200).write(plan)
    done = run_module(
        "pytest",
        "tests/cell/test_repro.py",
        *cell_pytest_args(CELLS, str(raw), str(tmp / "probe.json"), str(plan)),
        *("-p", "replay_h200"),
        env={"PYTHONPATH": str(Path(__file__).parent)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cases = {}
    for case in parse(raw).iter("testcase"):
        test, _, params = case.get("name", "").partition("[")
        props = properties(case)
        detail = props.get("pin_env") or next(s for s in SECTIONS if params.endswith(f"-{s}]"))
        state, message = outcome(case)
        cases[test, props["cell"], detail] = (state, message, props)
    return cases


def _check(replayed, test: str, cell: str, detail: str, expected) -> dict[str, str]:
    state, message, props = replayed[test, cell, detail]
    want, issue = expected if isinstance(expected, tuple) else (expected, None)
    where = f"{test} {cell} {detail}"
    assert state == want, f"{where}: {state}, expected {want}: {message}"
    if issue:
        assert props["issue"] == ISSUE + issue, where
        assert "if this passes the issue is fixed" in message, f"{where}: not a strict xfail: {message}"
    return props


def test_every_cuda_case_of_the_reproduction_is_replayed_and_none_fails(replayed):
    engine = len(CUDA_CELLS) * len(GATE_PIN_VALUES) * len(ENGINE_TESTS)
    minimal = len(MINIMAL_ROWS) * len(GATE_PIN_VALUES) * 2
    assert len(replayed) == engine + minimal + len(CUDA_CELLS) * len(SECTIONS)
    assert {cell for _, cell, _ in replayed} == set(CUDA_CELLS)
    assert not [key for key, (state, _, _) in replayed.items() if state == FAILED]


@pytest.mark.parametrize("pin_env", GATE_PIN_VALUES)
@pytest.mark.parametrize("cell", CUDA_CELLS)
def test_engine_cases_are_judged_as_the_rules_say(replayed, cell, pin_env):
    kind, judged = _engine_row(cell, pin_env)
    for test, expected in zip(ENGINE_TESTS, judged, strict=True):
        props = _check(replayed, test, cell, pin_env, expected)
        assert props["execution"] == ("native" if "-linux-" in cell else "emulated")
    # The classifier read the failure from the error text the engine left; the case names the run it rests on.
    props = replayed[ENGINE_TESTS[0], cell, pin_env][2]
    assert props["engine_outcome"] == kind
    assert props["engine_run"] == f"{cell} pin_env={pin_env} offload"


@pytest.mark.parametrize("pin_env", GATE_PIN_VALUES)
@pytest.mark.parametrize("cell", MINIMAL_ROWS)
def test_the_minimal_form_is_judged_by_its_rules_and_v2_no_longer_fails(replayed, cell, pin_env):
    kind, runs, copies = MINIMAL_ROWS[cell]
    props = _check(replayed, "test_minimal_form_on_native_linux", cell, pin_env, runs)
    assert props["engine_outcome"] == kind and props["gate_key"] == "minimal_repro"
    _check(replayed, "test_minimal_form_copies_pageable_weights", cell, pin_env, copies)


def test_the_offload_path_matches_the_gate_where_parameters_were_offloaded(replayed):
    paths = {
        cell: replayed["test_offload_path_is_the_one_the_gate_predicted", cell, "unset"][2].get("observed")
        for cell in CUDA_CELLS
    }
    assert paths["cuda-linux-v1-graph"] == paths["cuda-linux-v1-eager"] == "uva"
    assert paths["cuda-wsl2new-v1-eager"] == paths["cuda-wsl2old-v1-eager"] == "pageable-copy"


@pytest.mark.parametrize("cell", CUDA_CELLS)
def test_the_probe_runs_only_in_cells_planned_native(replayed, cell):
    for section in SECTIONS:
        state, message, _ = replayed["test_bare_torch_probe", cell, section]
        assert state == SKIPPED
        if "-linux-" in cell:
            assert message.startswith("replay: the probe measures this machine's GPU"), message
        else:
            assert "it runs only in a cell planned native, not emulated" in message, message
