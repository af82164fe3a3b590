"""GPU busy and idle time per decode step, from a torch-profiler (Kineto) trace.

These are the seed report's three figures: idle time per step (WDDM on WSL2
stalls the GPU on every pageable copy), the count of pageable vs pinned
host-to-device copies, and the count of stream synchronisations those copies
force. The trace is Chrome's trace-event JSON that torch's profiler writes (and
vLLM's ``/start_profile`` ... ``/stop_profile`` saves, gzipped).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST_CATEGORIES = {"cuda_runtime", "cuda_driver"}
# vLLM's worker annotates each engine step in its trace, on a GPU and on the CPU alike.
STEP_ANNOTATION = "execute_context"


@dataclass(frozen=True)
class StepProfile:
    steps: int
    busy_ms_per_step: float
    idle_ms_per_step: float
    pageable_h2d: int
    pinned_h2d: int
    stream_syncs: int


# A profile of the bench's few steps is tens of MiB; a trace past this, once decompressed, is not read (a gzip bomb
# would otherwise take the machine's memory).
MAX_TRACE_BYTES = 512 << 20


def read_trace(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read(MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise ValueError(f"it is over {MAX_TRACE_BYTES >> 20} MiB decompressed, which no bench profile reaches")
    doc = json.loads(data)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def annotated_steps(events: list[dict]) -> int:
    """How many engine steps vLLM's worker marked in the trace."""
    return sum(
        1
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") == "user_annotation"
        and str(e.get("name", "")).startswith(STEP_ANNOTATION)
    )


def _busy(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals: overlapping kernels on two streams count once."""
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def step_profile(events: list[dict], steps: int) -> StepProfile:
    """Per-step figures over the GPU's active span, for a trace of ``steps`` engine steps."""
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]
    if not gpu or steps < 1:
        spans = sum(e.get("ph") == "X" for e in events)
        raise ValueError(
            f"the trace has no GPU activity ({annotated_steps(events)} engine steps annotated, {spans} events): "
            "a CPU engine, or a profiler without CUDA/HIP activities"
        )
    intervals = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in gpu]
    span = max(hi for _, hi in intervals) - min(lo for lo, _ in intervals)
    busy = _busy(intervals)
    copies = [e["name"] for e in gpu if e["cat"] == "gpu_memcpy" and "HtoD" in e["name"]]
    syncs = sum(
        1 for e in events if e.get("cat") in HOST_CATEGORIES and str(e.get("name", "")).endswith("StreamSynchronize")
    )
    return StepProfile(
        steps=steps,
        busy_ms_per_step=busy / steps / 1000,
        idle_ms_per_step=(span - busy) / steps / 1000,
        pageable_h2d=sum("Pageable" in name for name in copies),
        pinned_h2d=sum("Pinned" in name for name in copies),
        stream_syncs=syncs,
    )
