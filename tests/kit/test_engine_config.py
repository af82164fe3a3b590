"""The engine-config cell tests against the real vLLM the kit pins: what they pass, and what makes them fail.

No GPU is needed (the cells run gate-only here, the GPU stood in for as in the gate tests); vLLM's own
``EngineArgs`` builds each config. The failing case is real too: a model vLLM has no architecture for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import require_gate_only, run_module
from junitparser import JUnitXml

from matrix.junit import case_properties
from repro.tinymodel import tiny_model, tiny_moe

# Every test here reads the machine: its outcome is the host's (the host variants run them).
pytestmark = pytest.mark.reads_host

# One cell of each stack, runner and graph mode: the CUDA stand-in (NVML, compiled kernels) and ROCm's.
CELLS = "cuda-wsl2new-v2-graph,rocm-wsl2old-v1-eager"


def run_cells(tmp_path: Path, model_cache: Path) -> dict[tuple[str, str], object]:
    require_gate_only(CELLS)
    junit = tmp_path / "junit.xml"
    done = run_module(
        "pytest",
        "tests/cell/test_engine_config.py",
        "--cells",
        CELLS,
        "--model-cache",
        str(model_cache),
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    cases = (case for suite in JUnitXml.fromfile(str(junit)) for case in suite)
    return {_named(case): case for case in cases}


def _named(case) -> tuple[str, str]:
    """(cell, test): the test's name, with what parametrises it besides the cell (``test_runner_default[moe]``)."""
    cell = case_properties(case)["cell"]
    test, _, params = case.name.partition("[")
    rest = params.rstrip("]").removeprefix(cell).strip("-")
    return cell, f"{test}[{rest}]" if rest else test


def test_each_cell_builds_the_reproductions_engine_config_and_loads_the_tokenizer(tmp_path):
    cases = run_cells(tmp_path, tmp_path / "models")
    assert len(cases) == 16
    assert all(case.is_passed for case in cases.values()), {k: c.result for k, c in cases.items()}
    graph_v2 = json.loads(
        case_properties(cases["cuda-wsl2new-v2-graph", "test_engine_config_builds"])["engine_settings"]
    )
    eager_v1 = json.loads(
        case_properties(cases["rocm-wsl2old-v1-eager", "test_engine_config_builds"])["engine_settings"]
    )
    # vLLM's own config, read back: the offload the kit asked for, and each cell's runner and mode.
    assert graph_v2["cpu_offload_gb"] == eager_v1["cpu_offload_gb"] == 1
    assert (graph_v2["use_v2_model_runner"], graph_v2["enforce_eager"]) == (True, False)
    assert (eager_v1["use_v2_model_runner"], eager_v1["enforce_eager"]) == (False, True)
    # 0.33.0 picks the default runner alike for every architecture, and says so.
    for cell in CELLS.split(","):
        for test in ("test_v2_architectures", "test_runner_by_architecture"):
            assert case_properties(cases[cell, test])["observed"] == "none"
    # With the runner's variable unset, what vLLM 0.33.0 picks for a dense and for an MoE model (both V2 since
    # 0.29.0; the history asks every release, where MoE models get V1 before it).
    for cell in CELLS.split(","):
        picked = {kind: case_properties(cases[cell, f"test_runner_default[{kind}]"]) for kind in ("dense", "moe")}
        assert {kind: (p["observed"], p["pin_env"]) for kind, p in picked.items()} == {
            "dense": ("v2", "unset"),
            "moe": ("v2", "unset"),
        }
    # What vLLM logged building the config, per value of the variable: on WSL2 with offload and CUDA graphs its
    # warning that Windows caps pinned memory (either value); in eager mode none.
    for cell, warned in (("cuda-wsl2new-v2-graph", "True"), ("rocm-wsl2old-v1-eager", "False")):
        for pin in ("unset", "1"):
            told = case_properties(cases[cell, f"test_pin_cap_warning[pin_env={pin}]"])
            assert (told["observed"], told["pin_env"]) == (warned, pin)
            assert any("WDDM" in w for w in json.loads(told["warnings"])) == (warned == "True")


def test_a_model_vllm_cannot_read_fails_the_config_with_vllms_reason(tmp_path):
    cache = tmp_path / "models"
    config = tiny_model(cache) / "config.json"
    # Tiny-model drift: an architecture no vLLM release implements. The tokenizer files are untouched.
    config.write_text(json.dumps(json.loads(config.read_text()) | {"architectures": ["WslpinNoSuchForCausalLM"]}))
    cases = run_cells(tmp_path, cache)
    for cell in CELLS.split(","):
        failed = cases[cell, "test_engine_config_builds"]
        assert not failed.is_passed and not failed.is_skipped
        report = failed.result[0].text
        assert "gave 'refused' but rule 'engine-config-builds' expects 'built'" in report
        assert "WslpinNoSuchForCausalLM" in report
        assert cases[cell, "test_tokenizer_loads"].is_passed


def test_answers_are_kept_per_cell_and_the_models_architecture_is_inspected_once(tmp_path, monkeypatch):
    """The kit's tests keep vLLM's answers (repro/answers.py). A config is kept per cell, not per child, because
    each test asks for other cells together: asked again, alone or beside the cell it came with, no child starts.
    And vLLM inspects the model in an interpreter of its own (~20 s), caching what it found under its cache root;
    where answers are kept, that root is kept with them, as a user's is between runs, so a later evaluation of
    other cells reads vLLM's entry instead of inspecting again. One fresh evaluation serves both: each is ~20 s."""
    from matrix.cells import select
    from matrix.commands.here import detected_plan
    from repro import engine_config
    from repro.answers import CACHE_VARIABLE

    pair = "cuda-wsl2new-v2-graph,cuda-wsl2new-v1-eager"  # one stack and host: one child builds both
    then = "rocm-wsl2old-v1-eager"  # another stack and host: another child
    require_gate_only(f"{pair},{then}")
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "answers"))
    model, moe = tiny_model(tmp_path / "models"), tiny_moe(tmp_path / "models")
    both = engine_config.requests_for(detected_plan(select(pair)).cells, model, moe)
    assert [len(request.runs) for request in both] == [2]
    first = engine_config.evaluate(both)
    assert all(outcome.ok and "settings" in outcome.value["config"] for outcome in first.values()), first
    entries = sorted((tmp_path / "answers").rglob("modelinfos/**/*.json"))
    assert len(entries) == 2, entries  # the dense model's and the MoE model's architectures

    def no_child(*args, **kwargs):
        raise AssertionError("a child started for an answer already kept")

    with monkeypatch.context() as patched:
        patched.setattr(engine_config, "run_isolated", no_child)
        (alone,) = engine_config.requests_for(detected_plan(select("cuda-wsl2new-v1-eager")).cells, model, moe)
        assert engine_config.evaluate([alone]) == {cell: first[cell] for cell in select("cuda-wsl2new-v1-eager")}
        assert engine_config.evaluate(both) == first

    def written() -> list[tuple[int, bytes]]:
        return [(entry.stat().st_mtime_ns, entry.read_bytes()) for entry in entries]

    before = written()
    outcomes = engine_config.evaluate(engine_config.requests_for(detected_plan(select(then)).cells, model, moe))
    assert all(outcome.ok and "settings" in outcome.value["config"] for outcome in outcomes.values()), outcomes
    assert written() == before, "vLLM inspected a model again"
