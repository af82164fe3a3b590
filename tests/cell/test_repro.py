"""The offload-with-graph reproduction through vLLM's engine, on the cell's GPU.

Without the cell's GPU every case is skipped with the plan's reason, before
anything is started. With it, each (cell, pin_env) runs vLLM twice in fresh
processes — ``cpu_offload_gb=1`` and a reference without offload — and native
Linux cells add the minimal form (vLLM's own switches that take pinned memory
and UVA away).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matrix.cells import Host, Mode
from matrix.host import classify, facts
from matrix.plan import Execution
from matrix.variables import GATE_PIN_VALUES, UNSET
from repro import offload, probe
from repro.failures import FailureKind
from repro.gate import GateRequest
from repro.tinymodel import tiny_model

# What the minimal form must do in graph mode: fail the way WSL2 does, for one of these reasons.
CAPTURE_FAILURES = {
    FailureKind.DYNAMO_UNSUPPORTED,
    FailureKind.PAGEABLE_COPY_IN_CAPTURE,
    FailureKind.CAPTURE_INVALIDATED,
}


def _needs_gpu(plan) -> None:
    if not plan.execution.uses_gpu:
        pytest.skip(f"no GPU for this cell: {plan.execution} ({plan.reason})")


def _runs_for(plans) -> list[offload.EngineRun]:
    runs = []
    for cell, plan in plans.items():
        if not plan.execution.uses_gpu:
            continue
        emulated = plan.execution is not Execution.NATIVE
        for pin_env in GATE_PIN_VALUES:
            run = offload.EngineRun(cell, pin_env, True, emulated)
            runs += [run, run.reference()]
        if cell.host is Host.LINUX and plan.execution is Execution.NATIVE:
            minimal = offload.EngineRun(cell, UNSET, True, False, minimal=True)
            runs += [minimal, minimal.reference()]
    return runs


@pytest.fixture(scope="session")
def engine_results(request, plans):
    model = tiny_model(Path(request.config.getoption("--model-cache")))
    return offload.run_engines(
        _runs_for(plans),
        model,
        timeout=request.config.getoption("--repro-timeout"),
        jobs=request.config.getoption("--repro-jobs"),
    )


def _pair(request, plans, cell, pin_env, minimal=False):
    _needs_gpu(plans[cell])
    results = request.getfixturevalue("engine_results")
    run = offload.EngineRun(cell, pin_env, True, plans[cell].execution is not Execution.NATIVE, minimal)
    return results[run], results[run.reference()]


def _record(tag, result: offload.EngineResult) -> None:
    tag("engine_outcome", result.outcome)
    tag("engine_seconds", str(result.seconds))
    if result.offload:
        tag("offload_stats", json.dumps(result.offload, sort_keys=True))


def test_engine_starts_and_generates(request, expect, tag, plans, cell, pin_env):
    """vLLM's engine with cpu_offload_gb=1 in the cell's runner and graph mode starts and generates."""
    run, _ = _pair(request, plans, cell, pin_env)
    _record(tag, run)
    context = f"\nfailure kind: {run.failure}\n{run.message}" if not run.ok else ""
    expect("repro", run.outcome, context)


def test_offload_really_happened(request, expect, tag, plans, cell, pin_env):
    """Parameters left device memory: the V2 runner once ignored cpu_offload_gb, so outputs alone prove nothing."""
    run, reference = _pair(request, plans, cell, pin_env)
    if not run.ok:
        pytest.skip(f"the offloaded engine did not run ({run.outcome}): see test_engine_starts_and_generates")
    _record(tag, run)
    offloaded = run.offloaded > 0
    if offloaded and reference.ok:
        tag(
            "device_weight_bytes", f"{run.offload['device_weight_bytes']} vs {reference.offload['device_weight_bytes']}"
        )
        offloaded = run.offload["device_weight_bytes"] < reference.offload["device_weight_bytes"]
    expect("offloaded", offloaded, f"\nparameters: {run.offload}\n{run.message}")


def test_greedy_tokens_match_the_reference(request, tag, plans, cell, pin_env):
    """Offloading changes where weights live, never what the model computes."""
    run, reference = _pair(request, plans, cell, pin_env)
    if not (run.ok and reference.ok):
        pytest.skip(f"nothing to compare: offloaded run {run.outcome}, reference {reference.outcome}")
    tag("tokens", json.dumps(run.tokens))
    assert run.tokens == reference.tokens


def test_offload_path_is_the_one_the_gate_predicted(request, tag, gate_outcomes, plans, cell, pin_env):
    """The path taken (zero-copy UVA or a copy per forward) is what vLLM's gate decided for this host."""
    run, _ = _pair(request, plans, cell, pin_env)
    if not run.ok or not run.offloaded:
        pytest.skip(f"no offloaded parameters to look at ({run.outcome}, {run.offloaded} offloaded)")
    gate = gate_outcomes[GateRequest.for_cell(cell, pin_env, plans[cell].execution)]
    if not gate.ok or not gate.value.get("imports"):
        pytest.skip("the gate gave no prediction for this host: see test_vllm_imports")
    tag("observed", run.offload_path)
    tag("expected", gate.value["offload_path"])
    assert run.offload_path == gate.value["offload_path"]


@pytest.mark.only_hosts(Host.LINUX)
def test_minimal_form_on_native_linux(request, tag, plans, cell):
    """WSL2's failure on any Linux GPU: offload with VLLM_WEIGHT_OFFLOADING_DISABLE_UVA/_PIN_MEMORY=1."""
    _needs_gpu(plans[cell])
    run, _ = _pair(request, plans, cell, UNSET, minimal=True)
    _record(tag, run)
    if cell.mode is Mode.EAGER:
        assert run.ok, f"eager offload without pinned memory must work; it failed ({run.failure}):\n{run.message}"
        assert run.offload_path == "pageable-copy", run.offload
    else:
        assert not run.ok, "graph mode with pageable offload copies ran: vLLM no longer needs pinned memory here"
        assert run.failure in CAPTURE_FAILURES, f"failed for another reason ({run.failure}):\n{run.message}"


@pytest.fixture(scope="session")
def probe_results(request):
    results = {name: probe.run_section(name) for name in probe.SECTIONS}
    out = request.config.getoption("--probe-out")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        here = classify.detect(facts.collect_facts())
        Path(out).write_text(json.dumps(probe.metrics_document(results, probe.host_of(here)), indent=2) + "\n")
    return results


@pytest.mark.parametrize("section", list(probe.SECTIONS))
def test_bare_torch_probe(request, tag, plans, cell, section):
    """The pinned-memory mechanism in bare torch on this machine's GPU (no vLLM)."""
    _needs_gpu(plans[cell])
    result = request.getfixturevalue("probe_results")[section]
    tag("probe_seconds", str(result.seconds))
    if result.status == "skipped":
        pytest.skip(result.message)
    assert result.status == "ok", f"{section} {result.status}:\n{result.message}"
    tag("metrics", json.dumps(result.metrics, sort_keys=True))
    probe.check_facts(section, result.metrics)
