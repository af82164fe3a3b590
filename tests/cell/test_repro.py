"""The offload-with-graph reproduction through vLLM's engine, on the cell's GPU.

Without the cell's GPU every case is skipped with the plan's reason; a session
without any GPU cell starts nothing. With it, each (cell, pin_env) runs vLLM twice
in fresh processes — ``cpu_offload_gb=1`` and a reference without offload — and
native Linux cells add the minimal form (vLLM's own switches that take pinned
memory and UVA away). What each run must show is in matrix/judge/expectations.toml.
The bare-torch probe runs only in cells planned native: it measures this machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matrix.cells import Host
from matrix.host import classify, facts
from matrix.io.files import write_file
from matrix.plan import Execution
from repro import offload, probe
from repro.gate import GateRequest
from repro.tinymodel import tiny_model


def _needs_gpu(plan) -> None:
    if not plan.execution.uses_gpu:
        pytest.skip(f"no GPU for this cell: {plan.execution} ({plan.reason})")


@pytest.fixture(scope="session")
def engine_results(request, plans):
    """Every engine run the session's GPU cells need, each once (none, and no model built, without such cells)."""
    runs = offload.runs_for(plans.values())
    if not runs:
        return {}
    model = tiny_model(Path(request.config.getoption("--model-cache")))
    return offload.run_engines(
        runs,
        model,
        timeout=request.config.getoption("--repro-timeout"),
        jobs=request.config.getoption("--repro-jobs"),
    )


def _run(engine_results, plans, cell, pin_env, offloaded=True, minimal=False) -> offload.EngineResult:
    _needs_gpu(plans[cell])
    return engine_results[offload.run_of(plans[cell], pin_env, offloaded, minimal)]


def _pair(engine_results, plans, cell, pin_env):
    return _run(engine_results, plans, cell, pin_env), _run(engine_results, plans, cell, pin_env, offloaded=False)


def _record(tag, result: offload.EngineResult) -> None:
    # The run that was started: cases whose inputs to vLLM are equal share it (offload.share).
    tag("engine_run", result.run.label)
    tag("engine_outcome", result.outcome)
    tag("engine_seconds", str(result.seconds))
    if result.offload:
        tag("offload_stats", json.dumps(result.offload, sort_keys=True))


def test_engine_starts_and_generates(engine_results, expect, tag, plans, cell, pin_env):
    """vLLM's engine with cpu_offload_gb=1 in the cell's runner and graph mode starts and generates."""
    run = _run(engine_results, plans, cell, pin_env)
    _record(tag, run)
    context = f"\nfailure kind: {run.failure}\n{run.message}" if not run.ok else ""
    expect("repro", run.outcome, context)


def test_offload_really_happened(engine_results, expect, tag, plans, cell, pin_env, vllm_version):
    """Weights left device memory, by vLLM's own account: the V2 runner once ignored cpu_offload_gb."""
    run, reference = _pair(engine_results, plans, cell, pin_env)
    if not run.ok:
        pytest.skip(f"the offloaded engine did not run ({run.outcome}): see test_engine_starts_and_generates")
    _record(tag, run)
    if reference.ok:
        device = [r.offload.get("device_weight_bytes") for r in (run, reference)]
        tag("device_weight_bytes", f"{device[0]} vs {device[1]} without offload")
    proven = run.offload_proven
    if proven is None:
        pytest.skip(
            f"no judgement: vLLM {vllm_version} neither marked an offloaded parameter nor counted offloaded bytes "
            f"({run.offload or 'no parameter statistics'}){run.message and chr(10) + run.message}"
        )
    expect("offloaded", proven, f"\nparameters: {run.offload}\n{run.message}")


def test_greedy_tokens_match_the_reference(engine_results, tag, plans, cell, pin_env):
    """Offloading changes where weights live, never what the model computes."""
    run, reference = _pair(engine_results, plans, cell, pin_env)
    if not (run.ok and reference.ok):
        pytest.skip(f"nothing to compare: offloaded run {run.outcome}, reference {reference.outcome}")
    tag("tokens", json.dumps(run.tokens))
    assert run.tokens == reference.tokens


def test_offload_path_is_the_one_the_gate_predicted(engine_results, tag, state, gate_outcomes, plans, cell, pin_env):
    """The path taken (zero-copy UVA or a copy per forward) is what vLLM's gate decided for this host."""
    run = _run(engine_results, plans, cell, pin_env)
    if not run.ok or not run.offloaded:
        pytest.skip(f"no offloaded parameters to look at ({run.outcome}, {run.offloaded} offloaded)")
    gate = gate_outcomes[GateRequest.for_cell(cell, pin_env, plans[cell].execution)]
    if not gate.ok or not gate.value.get("imports"):
        pytest.skip("the gate gave no prediction for this host: see test_vllm_imports")
    state(observed=run.offload_path, expected=gate.value["offload_path"])
    assert run.offload_path == gate.value["offload_path"]


@pytest.mark.only_hosts(Host.LINUX)
def test_minimal_form_on_native_linux(engine_results, expect, tag, plans, cell, pin_env):
    """WSL2's failure on any Linux GPU: offload with VLLM_WEIGHT_OFFLOADING_DISABLE_UVA/_PIN_MEMORY=1."""
    run = _run(engine_results, plans, cell, pin_env, minimal=True)
    _record(tag, run)
    context = f"\nfailure kind: {run.failure}\n{run.message}" if not run.ok else f"\nparameters: {run.offload}"
    expect("minimal_repro", run.outcome, context)


@pytest.mark.only_hosts(Host.LINUX)
def test_minimal_form_copies_pageable_weights(engine_results, expect, tag, plans, cell, pin_env):
    """Where the minimal form runs, its offloader copies pageable weights every forward."""
    run = _run(engine_results, plans, cell, pin_env, minimal=True)
    if not run.ok:
        pytest.skip(f"the minimal form did not run ({run.outcome}): see test_minimal_form_on_native_linux")
    _record(tag, run)
    expect("minimal_offload_path", run.offload_path, f"\nparameters: {run.offload}\n{run.message}")


@pytest.fixture(scope="session")
def probe_results(request, plans):
    """Every probe section once, where some cell is planned native (nothing is started otherwise)."""
    if not any(plan.execution is Execution.NATIVE for plan in plans.values()):
        return {}
    results = {name: probe.run_section(name) for name in probe.SECTIONS}
    out = request.config.getoption("--probe-out")
    if out:
        here = classify.detect(facts.collect_facts())
        document = json.dumps(probe.metrics_document(results, here), indent=2) + "\n"
        write_file(Path(out).parent, Path(out).name, document.encode())  # never through a link waiting there
    return results


@pytest.mark.parametrize("section", list(probe.SECTIONS))
def test_bare_torch_probe(probe_results, tag, plans, cell, section):
    """The pinned-memory mechanism in bare torch on this machine's GPU (no vLLM), in the cell's own host only."""
    plan = plans[cell]
    _needs_gpu(plan)
    if plan.execution is not Execution.NATIVE:
        pytest.skip(
            "the probe measures this machine itself: it runs only in a cell planned native, "
            f"not {plan.execution} ({plan.reason})"
        )
    result = probe_results[section]
    tag("probe_seconds", str(result.seconds))
    if result.status == "skipped":
        pytest.skip(result.message)
    assert result.status == "ok", f"{section} {result.status}:\n{result.message}"
    tag("metrics", json.dumps(result.metrics, sort_keys=True))
    if not probe.judged(section, cell.stack):
        pytest.skip(f"recorded, not judged: what {section} must show on {cell.stack} has not been measured")
    probe.check_facts(section, result.metrics)
