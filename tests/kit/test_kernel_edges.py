"""The kernel edges: the host the kit makes of each, and vLLM's gate asked under many unames in one process.

One child asks every edge, vLLM's caches cleared in between (repro/gate.py ``decide_edges``): that
is only honest if the answers are a fresh process's. Proved here against the gate's own fresh
children, with the real installed vLLM.
"""

import pytest

from matrix.cells import Host, Stack
from matrix.host.edges import KERNEL_EDGES, KernelEdge
from repro.emulation import EMULATED_NODE
from repro.gate import EDGE_KEYS, EdgeRequest, GateRequest, evaluate, evaluate_edges


def test_every_host_has_an_edge_so_every_cell_session_tests_one():
    assert {edge.host for edge in KERNEL_EDGES} == set(Host)


def test_the_kit_classifies_the_edges_as_vllm_gates_them():
    hosts = {edge.name: edge.host for edge in KERNEL_EDGES}
    assert hosts == {
        "4.19.121": Host.WSL2NEW,
        "4.19.120": Host.WSL2OLD,
        "unparsable": Host.WSL2OLD,
        "wsl1": Host.WSL2OLD,
        "custom-wsl2+": Host.WSL2NEW,
        "node-name": Host.WSL2NEW,  # "microsoft" anywhere in uname is WSL, to vLLM and to the kit
        "azure": Host.LINUX,
        "rc": Host.WSL2OLD,  # vLLM cannot int() "0rc1": the old-kernel path
        "two-part": Host.WSL2NEW,  # (5, 15) is past (4, 19, 121)
        "wsl-variable-only": Host.LINUX,  # vLLM reads the uname, not WSL's variable
    }


def test_edge_names_are_distinct():
    assert len({edge.name for edge in KERNEL_EDGES}) == len(KERNEL_EDGES)


@pytest.mark.needs_vllm
def test_cleared_caches_answer_as_a_fresh_process():
    # Each host as the gate presents it, asked in turn: a cache left uncleared would repeat the one before.
    hosts = (Host.WSL2NEW, Host.LINUX, Host.WSL2OLD)
    emulated = tuple(KernelEdge(host.value, host.emulated_release, EMULATED_NODE) for host in hosts)
    cases = [(Stack.CUDA, Host.WSL2OLD, "unset"), (Stack.CUDA, Host.WSL2NEW, "1"), (Stack.ROCM, Host.WSL2NEW, "unset")]
    fresh = [GateRequest(stack, host, pin_env, present_host=True, stub_gpu=True) for stack, host, pin_env in cases]
    answers = evaluate(fresh, timeout=300)
    edges = evaluate_edges([EdgeRequest(stack, stub_gpu=True, edges=emulated) for stack in Stack], timeout=300)
    assert all(o.ok for o in [*answers.values(), *edges.values()])
    by_stack = {request.stack: outcome.value for request, outcome in edges.items()}
    for request, outcome in answers.items():
        asked = by_stack[request.stack][request.host.value, request.pin_env]
        assert {k: asked[k] for k in EDGE_KEYS} == {k: outcome.value[k] for k in EDGE_KEYS}, request.label
