"""Kernel-edge tests: vLLM's real gate under the unames at the borders of its WSL2 kernel check (#50126's review).

Each edge (``matrix.host.edges``) is tested in the cells of the host the kit classifies it as, against
those cells' rules: where vLLM's answer under the edge is not the answer the kit's host predicts,
the kit and vLLM disagree about that uname, and the case fails. Every case carries ``kernel_edge``,
so the report keeps it out of the cell's own behaviour.
"""

from __future__ import annotations

import pytest

from matrix.host.classify import vllm_in_wsl, vllm_kernel_version
from repro.gate import EdgeRequest


def _edge_answers(edge_outcomes, plans, cell, vllm_version, no_answer) -> dict:
    """The kernel-edge child's answers for the cell's stack; the case fails or skips where there are none."""
    if vllm_version is None:
        pytest.fail("vLLM is not installed in this environment: run the cell through nox, which installs it")
    outcome = edge_outcomes[EdgeRequest.for_cell(cell, plans[cell].execution)]
    if not outcome.ok:
        no_answer(outcome, "the kernel edges")
    if "import_error" in outcome.value:
        pytest.skip(f"vLLM did not import for the kernel edges: see test_vllm_imports\n{outcome.value['import_error']}")
    return outcome.value


def test_gate_under_kernel_edge(
    expect, tag, state, no_answer, edge_outcomes, plans, cell, kernel_edge, pin_env, gate_key, vllm_version
):
    """One value vLLM decides under the edge's uname (release, node name) against the cell's rule."""
    state(kernel_edge=kernel_edge.name)
    tag("uname", f"release={kernel_edge.release} node={kernel_edge.node}")
    answer = _edge_answers(edge_outcomes, plans, cell, vllm_version, no_answer)[kernel_edge.name, pin_env]
    context = f"\nvLLM's warnings: {answer['warnings']}" if gate_key == "warning" else ""
    expect(
        gate_key,
        answer[gate_key],
        f" under {kernel_edge.name} ({kernel_edge.release!r}, node {kernel_edge.node!r}){context}",
    )


def test_vllm_reads_every_sample_uname_as_the_kit_does(tag, state, no_answer, edge_outcomes, plans, cell, vllm_version):
    """vLLM's in_wsl() and its stack's _get_wsl_kernel_version(), asked of every sample uname, against the kit's
    vllm_in_wsl and vllm_kernel_version: the doctor answers from those, so they must be this release's."""
    state(kernel_edge="readings")
    differ = []
    for reading in _edge_answers(edge_outcomes, plans, cell, vllm_version, no_answer)["readings"]:
        system, node, release, version, machine = reading["uname"][:5]
        uname = {"system": system, "node": node, "release": release, "version": version, "machine": machine}
        kit = {"in_wsl": vllm_in_wsl(uname), "kernel": vllm_kernel_version(release)}
        kernel = reading["kernel"]
        vllm = {"in_wsl": reading["in_wsl"], "kernel": tuple(kernel) if isinstance(kernel, list) else kernel}
        if kernel == "absent":  # this release has no kernel gate for the stack: WSL alone decides
            kit["kernel"] = "absent"
        if kit != vllm:
            differ.append(f"{release!r} (node {node!r}): vLLM {vllm}, the kit {kit}")
    assert not differ, f"{len(differ)} uname(s) read otherwise than vLLM does: " + "; ".join(differ[:10])
