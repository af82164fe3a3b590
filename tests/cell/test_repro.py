"""The GPU groups of a cell: the offload-with-graph reproduction and the bare-torch probe.

They are listed in every cell's results so that nothing is silently left out;
until they can run, each says why it did not.
"""

from __future__ import annotations

import pytest


def _why_not(plan, what: str, issue: str) -> str:
    if not plan.execution.uses_gpu:
        return f"{what} needs the cell's GPU: {plan.execution} ({plan.reason})"
    return f"{what} is not built yet ({issue})"


def test_offload_graph_reproduction(tag, plans, cell, pin_env):
    """vLLM's engine with cpu_offload_gb and the cell's graph mode, against a no-offload reference."""
    pytest.skip(_why_not(plans[cell], "the offload-with-graph reproduction", "issue #3"))


def test_bare_torch_probe(tag, plans, cell):
    """Pinned allocation, bandwidth and graph capture of host copies in bare torch."""
    pytest.skip(_why_not(plans[cell], "the bare-torch probe", "issue #3"))
