"""How reproduction runs and probe sections end when things go wrong, with real processes.

Where there is no GPU the engine and the probe sections fail or skip for real, and
those endings are what is tested; on a GPU host they would run, so those tests skip.
"""

import sys

import pytest
from conftest import require_gate_only

from matrix.cells import Cell
from repro import offload, probe
from repro.failures import FailureKind
from repro.isolation import run_command
from repro.probe import sections
from repro.tinymodel import tiny_model


def test_a_hanging_command_is_killed_and_recorded_as_timeout():
    done = run_command(
        [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(120)"], env={}, timeout=2
    )
    assert done.timed_out
    assert "started" in done.output and "killed after 2 s" in done.output
    assert done.seconds < 60


def test_an_engine_run_that_hangs_is_a_timeout_result(tmp_path, monkeypatch):
    # The child imports vLLM before anything else happens; a 1 s limit ends it mid-import.
    run = offload.EngineRun(Cell.parse("cuda-wsl2new-v1-graph"), "unset", True, present_host=True)
    result = offload.run_engine(run, tiny_model(tmp_path), timeout=1)
    assert result.status == "timeout"
    assert result.failure is FailureKind.TIMEOUT and result.outcome == "timeout"


@pytest.mark.reads_host
def test_an_engine_that_cannot_start_is_a_failed_result_with_its_message(tmp_path):
    require_gate_only("cuda-linux-v1-eager")
    run = offload.EngineRun(Cell.parse("cuda-linux-v1-eager"), "1", True, present_host=False)
    result = offload.run_engine(run, tiny_model(tmp_path), timeout=300)
    assert result.status == "failed"
    assert "Traceback" in result.message  # the raw text, kept for the JUnit failure
    assert result.outcome == str(result.failure) and result.failure is not None


def test_engine_runs_set_exactly_the_cells_environment():
    cell = Cell.parse("cuda-linux-v2-graph")
    base = {"VLLM_WSL2_ENABLE_PIN_MEMORY": "1", "VLLM_WEIGHT_OFFLOADING_DISABLE_UVA": "1", "PATH": "/bin"}
    env = offload.EngineRun(cell, "unset", True, False).env(base)
    assert env == {"PATH": "/bin", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_USE_V2_MODEL_RUNNER": "1"}
    minimal = offload.EngineRun(cell, "1", True, False, minimal=True).env({})
    assert minimal["VLLM_WSL2_ENABLE_PIN_MEMORY"] == "1"
    assert minimal["VLLM_WEIGHT_OFFLOADING_DISABLE_UVA"] == minimal["VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY"] == "1"


def test_offload_path_reads_where_the_parameters_went():
    run = offload.EngineRun(Cell.parse("cuda-linux-v1-graph"), "unset", True, False)
    assert offload.EngineResult(run, "ok", offload={"uva": 24, "on_cpu": 0}).offload_path == "uva"
    assert offload.EngineResult(run, "ok", offload={"on_cpu": 24, "pinned_cpu": 24}).offload_path == "pinned-copy"
    assert offload.EngineResult(run, "ok", offload={"on_cpu": 24, "pinned_cpu": 0}).offload_path == "pageable-copy"
    assert offload.EngineResult(run, "ok", offload={"uva": 0, "on_cpu": 0}).offload_path == "none"


@pytest.mark.reads_host
def test_a_probe_section_without_a_gpu_is_skipped_with_the_reason():
    require_gate_only(None)  # the probe uses whatever GPU this machine has
    result = probe.run_section("capture_pinned_non_blocking", timeout=300)
    assert result.status == "skipped"
    assert result.message.startswith("no GPU")


def test_probe_facts_reject_a_platform_that_captures_pageable_copies():
    with pytest.raises(AssertionError, match="refuse to capture"):
        probe.check_facts("capture_pageable_blocking", {"captured": True, "replay_reads_current_host": True})
    probe.check_facts("capture_pageable_blocking", {"captured": False, "kind": "pageable-copy-in-capture"})


def test_the_offload_step_ab_resolves_a_slower_arm_through_the_benchmark_statistics(monkeypatch):
    # No GPU here: torch.cuda is replaced by a stand-in, and each arm's "step" is a busy wait of
    # known length, so the section's interleaving, statistics and facts run for real around it.
    import time
    import types

    def step(ms: float):
        def run() -> None:
            started = time.perf_counter()
            while (time.perf_counter() - started) * 1000 < ms:
                pass

        return run

    arms = {"resident": step(0.2), "pinned_copy": step(0.5), "uva_zero_copy": step(0.6), "pageable_copy": step(1.5)}
    monkeypatch.setattr(sections, "_torch", lambda: types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=int)))
    monkeypatch.setattr(sections, "_offload_variants", lambda torch: (arms, ""))
    monkeypatch.setattr(sections, "_capture", lambda torch, fn: types.SimpleNamespace(replay=fn))
    metrics = sections.section_offload_step_ab()
    verdicts = [c["verdict"] for c in metrics["comparisons"]]
    assert verdicts[0].startswith("offload step (eager): pinned_copy faster than pageable_copy by ")
    assert verdicts[2].startswith("offload step (graph): pinned_copy faster than uva_zero_copy by ")
    assert metrics["step_ms"]["eager/pageable_copy"]["n"] == sections.AB_ROUNDS * sections.AB_STEPS
    probe.check_facts("offload_step_ab", metrics)
