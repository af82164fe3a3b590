"""The test groups a run is made of, and what pytest runs for each (``results/<vLLM>/<group>/``).

A session runs one group; the offline GPU run (``repro/gpu_run.py``) runs three, one pytest each, and then its
engine bench, which is no pytest group: one record, no JUnit.
Results are kept per group, so no run replaces another's (matrix/store/layout.py).
"""

from __future__ import annotations

GROUP_TESTS: dict[str, tuple[str, ...]] = {
    # All of a cell's tests: what a cell session and wsl_cuda_graph run.
    "cell": ("tests/cell",),
    # What needs no GPU: vLLM's gate decisions, and its engine config built from the reproduction's arguments.
    "gate": ("tests/cell/test_gate.py", "tests/cell/test_kernel_edges.py", "tests/cell/test_engine_config.py"),
    "repro": ("tests/cell/test_repro.py", "-k", "not bare_torch_probe"),
    "probe": ("tests/cell/test_repro.py", "-k", "bare_torch_probe"),
}
# The offline GPU run's engine-level A/B of pinned memory (repro/engine_bench.py): its record goes to
# results/<vLLM>/bench/ (matrix/commands/offline.py).
BENCH_GROUP = "bench"
