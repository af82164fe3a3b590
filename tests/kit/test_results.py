"""A cell run end to end, as the cell session runs it: env -> plan -> pytest -> split -> summary, real vLLM."""

import json

import pytest
from conftest import require_gate_only, run_module
from junitparser import JUnitXml

from matrix.host.classify import detect
from matrix.host.facts import collect_facts
from matrix.junit import case_properties, suite_properties
from matrix.plan import cell_pytest_args

CELL = "rocm-wsl2new-v2-graph"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    require_gate_only(CELL)
    tmp = tmp_path_factory.mktemp("cell")
    env, plan, raw, out = tmp / "env.json", tmp / "plan.json", tmp / "junit.xml", tmp / "results"
    assert run_module("matrix", "env", "--out", str(env)).returncode == 0
    assert run_module("matrix", "plan", "--cell", CELL, "--env", str(env), "--out", str(plan)).returncode == 0
    tests = run_module("pytest", "tests/cell", *cell_pytest_args(CELL, str(raw), str(tmp / "probe.json"), str(plan)))
    assert tests.returncode == 0, tests.stdout[-3000:]
    split = run_module("matrix", "split", str(raw), "--plan", str(plan), "--env", str(env), "--out", str(out))
    assert split.returncode == 0, split.stderr
    return out


@pytest.mark.reads_host
def test_one_file_per_cell_named_by_its_id_with_the_envelope(results):
    (suite,) = JUnitXml.fromfile(str(results / f"{CELL}.xml"))
    assert suite.name == CELL
    props = suite_properties(suite)
    assert props["cell_id"] == CELL
    assert (props["stack"], props["host"], props["runner"], props["mode"]) == ("rocm", "wsl2new", "v2", "graph")
    assert props["execution"] == "gate-only"
    assert props["vllm_version"] == "0.33.0" and props["vllm_commit"]
    env = json.loads((results / f"{CELL}.env.json").read_text())
    torch = env["packages"]["torch"]
    assert props["torch_version"] == torch["version"]
    assert props["torch_build"] == (f"cuda {torch['cuda']}" if torch["cuda"] else "cpu")
    assert props["kernel_release"] and props["wsl"] == str(detect(collect_facts()).host.is_wsl).lower()
    assert props["kit_commit"] and props["runner_name"] and props["started_at"]
    assert props["env_hash"] == env["env_hash"]


@pytest.mark.reads_host
def test_gate_cases_show_what_vllm_decided_for_both_pin_env_values(results):
    (suite,) = JUnitXml.fromfile(str(results / f"{CELL}.xml"))
    observed = {}
    for case in suite:
        p = case_properties(case)
        if "gate_key" in p and "kernel_edge" not in p:
            observed[p["gate_key"], p.get("pin_env")] = (p["observed"], case)
    assert observed["pin", "unset"][0] == "True" and observed["pin", "1"][0] == "True"
    assert observed["runner", "unset"][0] == "v2"
    # ROCm ignoring the opt-in is a known failure: an xfail that names its issue.
    pin_unset = observed["pin", "unset"][1]
    assert [r.type for r in pin_unset.result] == ["pytest.xfail"]
    assert "49861" in case_properties(pin_unset)["issue"]


@pytest.mark.reads_host
def test_gpu_groups_are_listed_as_skipped_with_the_reason(results):
    (suite,) = JUnitXml.fromfile(str(results / f"{CELL}.xml"))
    skipped = {case.name: case.result[0].message for case in suite if case.classname == "tests.cell.test_repro"}
    # 4 reproduction cases per pin_env, and 10 probe sections; the minimal form exists only on Linux cells.
    assert len(skipped) == 4 * 2 + 10
    assert all(reason.startswith("no GPU for this cell: gate-only") for reason in skipped.values())


@pytest.mark.reads_host
def test_summary_prints_the_table(results):
    done = run_module("matrix", "summary", "--cell", CELL, "--results", str(results), "--strict")
    assert done.returncode == 0, done.stderr
    header, rule, row = done.stdout.splitlines()[:3]
    assert header.split()[:2] == ["cell", "execution"]
    assert row.split()[:7] == [CELL, "gate-only", "38", "0", "13", "18", "on"]


@pytest.mark.reads_host
def test_a_cell_without_results_still_gets_a_file_that_says_why(tmp_path):
    env, plan = tmp_path / "env.json", tmp_path / "plan.json"
    assert run_module("matrix", "env", "--out", str(env)).returncode == 0
    planned = run_module("matrix", "plan", "--cells", "cuda-linux-*-graph", "--env", str(env), "--out", str(plan))
    assert planned.returncode == 0, planned.stderr
    done = run_module(
        "matrix",
        "split",
        str(tmp_path / "absent.xml"),
        "--plan",
        str(plan),
        "--env",
        str(env),
        "--out",
        str(tmp_path / "out"),
        "--crashed-if-missing",
    )
    assert done.returncode == 0, done.stderr
    for cell in ("cuda-linux-v1-graph", "cuda-linux-v2-graph"):
        (suite,) = JUnitXml.fromfile(str(tmp_path / "out" / f"{cell}.xml"))
        (case,) = list(suite)
        assert case.name == "no_results" and "pytest wrote no result" in case.result[0].message
    strict = run_module(
        "matrix", "summary", "--cells", "cuda-linux-*-graph", "--results", str(tmp_path / "out"), "--strict"
    )
    assert strict.returncode == 1 and "FAILED cuda-linux-v1-graph: no_results" in strict.stdout


def test_summary_of_cells_never_run_is_one_clear_error(tmp_path):
    done = run_module("matrix", "summary", "--cell", "cuda-linux-v1-graph", "--results", str(tmp_path))
    assert done.returncode == 2 and "run those cells first" in done.stderr
