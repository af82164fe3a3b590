"""Gate tests: what the installed vLLM decides about pinned memory in each cell."""

from __future__ import annotations

import pytest

from matrix.judge.expectations import RUNNER
from repro.failures import torch_at_fault
from repro.gate import GateRequest


def _answer(gate_outcomes, plans, cell, pin_env):
    return gate_outcomes[GateRequest.for_cell(cell, pin_env, plans[cell].execution)]


def test_vllm_imports(expect, tag, no_answer, gate_outcomes, plans, cell, pin_env, vllm_version, torch_pin):
    """vLLM imports under the cell's host (0.25 raised a circular import on WSL)."""
    if vllm_version is None:
        pytest.fail("vLLM is not installed in this environment: run the cell through nox, which installs it")
    outcome = _answer(gate_outcomes, plans, cell, pin_env)
    tag("gate_seconds", str(outcome.seconds))
    if not outcome.ok:
        no_answer(outcome, "this host")
    answer = outcome.value
    tag("platform_class", answer.get("platform_class", ""))
    error = answer.get("import_error", "")
    if not answer["imports"] and torch_pin and torch_at_fault(error):
        tag("failure_kind", "torch-mismatch")
        pytest.skip(
            f"torch mismatch: vLLM {vllm_version} asks for {torch_pin} and its import failed in torch, "
            f"which says nothing about vLLM; run the cell with the torch vLLM pins: {error.strip().splitlines()[-1]}"
        )
    expect("imports", answer["imports"], "\n" + error)


def test_gate_value(expect, state, gate_outcomes, plans, cell, pin_env, gate_key, vllm_version):
    """One value vLLM decides (pin, UVA, warning, buffer class, offload path) against its rule."""
    outcome = _answer(gate_outcomes, plans, cell, pin_env) if vllm_version else None
    if outcome is None or not outcome.ok or not outcome.value["imports"]:
        pytest.skip("vLLM gave no answer under this host: see test_vllm_imports for this cell")
    answer = outcome.value
    if gate_key in answer["errors"]:
        state(gate_key=gate_key)
        pytest.fail(f"vLLM raised while deciding {gate_key}:\n{answer['errors'][gate_key]}")
    context = f"\nvLLM's warnings: {answer['warnings']}" if gate_key == "warning" else ""
    expect(gate_key, answer[gate_key], context)


def test_runner_selected(expect, state, gate_outcomes, plans, cell, pin_env, vllm_version):
    """vLLM's config picks the cell's model runner under its VLLM_USE_V2_MODEL_RUNNER, or vLLM refuses the value
    (a release without that runner)."""
    outcome = _answer(gate_outcomes, plans, cell, pin_env) if vllm_version else None
    if outcome is None or not outcome.ok or not outcome.value["imports"]:
        pytest.skip("vLLM gave no answer under this host: see test_vllm_imports for this cell")
    key = f"runner_{cell.runner}"
    if key in outcome.value["errors"]:
        state(gate_key=RUNNER)
        pytest.fail(f"vLLM raised while choosing the runner:\n{outcome.value['errors'][key]}")
    expect(RUNNER, outcome.value[key], f" (VLLM_USE_V2_MODEL_RUNNER={cell.runner.env_value})")
