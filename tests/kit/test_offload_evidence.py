"""Offload proven by vLLM's own account, its marker on UVA views and its offloader's byte count; never a guess.

No GPU here: parameters on torch's ``meta`` device stand in for device memory (a size and a dtype,
no storage). Classes named like vLLM's offloaders stand in for them in this process, which must
never import vLLM (test_gate_vllm checks that); the real registry is asked in a child.
"""

import json
import subprocess
import sys

import pytest
import torch

from matrix.cells import Cell
from repro.engine import offloader_stats, parameter_stats
from repro.offload import EngineResult, EngineRun

LAYERS = 3
LINEAR_BYTES = (8 * 8 + 8) * 4  # weight and bias in float32
RUN = EngineRun(Cell.parse("cuda-linux-v2-graph"), "unset", True, False)


def _model(device: str, marked: int = 0) -> torch.nn.Module:
    model = torch.nn.Sequential(*(torch.nn.Linear(8, 8, device=device) for _ in range(LAYERS)))
    for p in list(model.parameters())[:marked]:
        p._vllm_is_uva_offloaded = True  # what vLLM's UVA offloader sets on each view it makes
    return model


def test_an_empty_allocator_snapshot_no_longer_counts_device_parameters_as_uva(monkeypatch):
    # On a GPU, torch's allocator may report no segments; the old guess then took every parameter for UVA.
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: [])
    stats = parameter_stats(_model("meta"))
    assert stats == {"params": 6, "on_cpu": 0, "pinned_cpu": 0, "uva": 0, "device_weight_bytes": LAYERS * LINEAR_BYTES}


def test_only_parameters_vllm_marked_count_as_uva_views():
    stats = parameter_stats(_model("meta", marked=2))
    assert (stats["uva"], stats["device_weight_bytes"]) == (2, LAYERS * LINEAR_BYTES - (8 * 8 + 8) * 4)


def test_parameters_left_on_the_cpu_are_counted_as_such():
    stats = parameter_stats(_model("cpu"))
    assert (stats["on_cpu"], stats["pinned_cpu"], stats["uva"], stats["device_weight_bytes"]) == (6, 0, 0, 0)


class UVAOffloader:  # stands in for vLLM's: it counts the bytes it moved
    def __init__(self, moved: int) -> None:
        self.cpu_offload_bytes = moved


class NoopOffloader:  # stands in for vLLM's default, registered when nothing offloads
    pass


class PrefetchOffloader:  # an offloader the kit knows no count of
    pass


@pytest.mark.parametrize(
    "offloader, expected",
    [
        (UVAOffloader(4096), {"offloader": "UVAOffloader", "offloaded_bytes": 4096}),
        (NoopOffloader(), {"offloader": "NoopOffloader", "offloaded_bytes": 0}),
        (PrefetchOffloader(), {"offloader": "PrefetchOffloader", "offloaded_bytes": None}),
        (None, {"offloader": None, "offloaded_bytes": None}),
    ],
)
def test_the_offloader_says_what_it_moved_or_nothing(offloader, expected):
    assert offloader_stats(offloader) == expected


@pytest.mark.parametrize(
    "stats, proven",
    [
        ({"uva": 24, "on_cpu": 0, "offloader": "UVAOffloader", "offloaded_bytes": 5 << 20}, True),
        ({"uva": 0, "on_cpu": 24, "offloader": "UVAOffloader", "offloaded_bytes": 5 << 20}, True),
        # A release that counts bytes but does not mark its views: the count is vLLM's word.
        ({"uva": 0, "on_cpu": 0, "offloader": "UVAOffloader", "offloaded_bytes": 5 << 20}, True),
        # 0.26.0's V2 runner: the no-op offloader, nothing marked, nothing on the CPU.
        ({"uva": 0, "on_cpu": 0, "offloader": "NoopOffloader", "offloaded_bytes": 0}, False),
        # Neither a marker nor a count: an unmarked UVA view looks like device memory, so no judgement.
        ({"uva": 0, "on_cpu": 0, "offloader": None, "offloaded_bytes": None}, None),
        ({}, None),  # offload_stats itself failed in the engine
    ],
)
def test_offload_is_proven_disproven_or_left_unjudged(stats, proven):
    assert EngineResult(RUN, "ok", offload=stats).offload_proven is proven


def test_the_registry_of_the_installed_vllm_is_found():
    # In a child: vLLM is imported there, never here. No engine ran, so vLLM's default offloader is registered.
    code = (
        "import json, torch\n"
        "from repro.engine import offload_stats\n"
        "print('stats:', json.dumps(offload_stats(torch.nn.Linear(8, 8, device='meta'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("stats: ")]
    stats = json.loads(line.removeprefix("stats: "))
    assert (stats["offloader"], stats["offloaded_bytes"], stats["params"], stats["uva"]) == ("NoopOffloader", 0, 2, 0)
