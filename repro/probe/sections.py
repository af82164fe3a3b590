"""The probe's measurements: each section is one question about pinned memory, answered with bare torch.

Every section runs in a fresh process (``repro/probe/child.py``): a failed capture can poison
a CUDA context. The same code runs on CUDA and ROCm builds of torch (``torch.cuda`` is HIP there).
"""

from __future__ import annotations

import ctypes
import dataclasses
import statistics
import time
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

from repro.failures import classify

MiB = 1 << 20
SIZES = [4 << 10 << (2 * k) for k in range(10)]  # 4 KiB, 16 KiB, ... 1 GiB
BANDWIDTH_REFERENCE_SIZE = 256 * MiB
STEP_LAYERS, STEP_LAYER_BYTES = 4, 32 * MiB


class NotApplicableError(Exception):
    """The section has no meaning on this platform; the message says why."""


def _torch() -> types.ModuleType:
    import torch

    if not torch.cuda.is_available():
        raise NotApplicableError("no GPU: torch sees no CUDA/HIP device")
    return torch


def _time_copies(torch: types.ModuleType, dst: Tensor, src: Tensor, non_blocking: bool, reps: int) -> float:
    """Median seconds of one copy, timed by device events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dst.copy_(src, non_blocking=non_blocking)
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start.record()
        dst.copy_(src, non_blocking=non_blocking)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1000)
    return statistics.median(samples)


def section_pin_alloc() -> dict:
    torch = _torch()
    started = time.perf_counter()
    t = torch.empty(BANDWIDTH_REFERENCE_SIZE, dtype=torch.uint8, pin_memory=True)
    seconds = time.perf_counter() - started
    if not t.is_pinned():
        raise AssertionError("torch.empty(pin_memory=True) returned memory that is not pinned")
    return {"bytes": t.numel(), "seconds": round(seconds, 4)}


def section_bandwidth() -> dict:
    torch = _torch()
    rows = []
    for size in SIZES:
        reps = 20 if size <= 64 * MiB else 5
        device = torch.empty(size, dtype=torch.uint8, device="cuda")
        row: dict[str, float] = {"bytes": size}
        for kind, pinned in (("pinned", True), ("pageable", False)):
            host = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
            host.fill_(1)
            h2d = _time_copies(torch, device, host, pinned, reps)
            d2h = _time_copies(torch, host, device, pinned, reps)
            row[f"{kind}_h2d_gbs"] = round(size / h2d / 1e9, 3)
            row[f"{kind}_d2h_gbs"] = round(size / d2h / 1e9, 3)
            del host
        rows.append(row)
        del device
    # The yardstick: a bare copy_ loop at the reference size, timed on the host.
    host = torch.empty(BANDWIDTH_REFERENCE_SIZE, dtype=torch.uint8, pin_memory=True)
    device = torch.empty_like(host, device="cuda")
    device.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(10):
        device.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    bare = BANDWIDTH_REFERENCE_SIZE * 10 / (time.perf_counter() - started) / 1e9
    return {"rows": rows, "bare_copy_loop_h2d_gbs_256mib": round(bare, 3)}


def _capture(torch: types.ModuleType, fn: Callable[[], None]) -> Any:
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up outside the capture, as torch's documentation asks
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        fn()
    return graph


def capture_copy(pinned: bool, non_blocking: bool) -> Callable[[], dict]:
    """Capture ``device.copy_(host)`` in a CUDA graph; when it captures, replay must read current host data."""

    def section() -> dict:
        torch = _torch()
        host = torch.zeros(MiB, dtype=torch.uint8, pin_memory=pinned)
        device = torch.empty(MiB, dtype=torch.uint8, device="cuda")
        try:
            graph = _capture(torch, lambda: device.copy_(host, non_blocking=non_blocking))
        except Exception as exc:  # noqa: BLE001 - a refused capture is the measurement
            return {"captured": False, "error": str(exc).splitlines()[0], "kind": str(classify(str(exc)))}
        host.fill_(7)
        graph.replay()
        torch.cuda.synchronize()
        return {"captured": True, "replay_reads_current_host": bool((device == 7).all())}

    return section


def _runtime() -> tuple[Callable[..., int], Callable[[int], bytes]]:
    """The CUDA or HIP runtime library torch loaded, for the host-pointer API torch does not expose."""
    _torch()
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart" in line or "libamdhip64" in line}
    if not paths:
        raise NotApplicableError("neither libcudart nor libamdhip64 is loaded in this process")
    path = sorted(paths)[0]
    lib = ctypes.CDLL(path)
    hip = "amdhip" in path
    get = lib.hipHostGetDevicePointer if hip else lib.cudaHostGetDevicePointer
    get.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint]
    describe = lib.hipGetErrorString if hip else lib.cudaGetErrorString
    describe.restype = ctypes.c_char_p
    return get, describe


def _device_pointer(host_tensor: Tensor) -> int:
    get, describe = _runtime()
    ptr = ctypes.c_void_p()
    code = get(ctypes.byref(ptr), ctypes.c_void_p(host_tensor.data_ptr()), 0)
    if code != 0:
        raise RuntimeError(f"HostGetDevicePointer failed ({code}): {describe(code).decode()}")
    if ptr.value is None:
        raise RuntimeError("HostGetDevicePointer succeeded but gave a null pointer")
    return ptr.value


class _DeviceView:
    """A zero-copy device tensor over memory at ``ptr`` (the CUDA array interface)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def section_uva_view() -> dict:
    torch = _torch()
    host = torch.zeros(MiB, dtype=torch.uint8, pin_memory=True)
    ptr = _device_pointer(host)
    view = torch.as_tensor(_DeviceView(ptr, host.numel()), device="cuda")
    out = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    graph = _capture(torch, lambda: out.copy_(view))
    host.fill_(42)
    graph.replay()
    torch.cuda.synchronize()
    if not bool((out == 42).all()):
        raise AssertionError("a replayed graph did not see the host's update through the zero-copy view")
    return {"device_pointer_equals_host_pointer": ptr == host.data_ptr(), "replay_sees_host_updates": True}


def section_uva_pageable_refused() -> dict:
    torch = _torch()
    pageable = torch.zeros(MiB, dtype=torch.uint8)
    try:
        _device_pointer(pageable)
    except RuntimeError as exc:
        return {"refused": True, "error": str(exc)}
    raise AssertionError("the runtime handed out a device pointer for pageable memory")


def _offload_variants(torch: types.ModuleType) -> tuple[dict[str, Callable[[], None]], str]:
    """Decode-like steps over STEP_LAYERS offloaded layers, one per place the weights can live.

    Also returns why there is no UVA variant, if there is none.
    """
    n = STEP_LAYER_BYTES // 2
    x = torch.randn(n, dtype=torch.float16, device="cuda")
    staging = torch.empty(n, dtype=torch.float16, device="cuda")
    acc = torch.zeros((), dtype=torch.float32, device="cuda")
    resident = [torch.randn(n, dtype=torch.float16, device="cuda") for _ in range(STEP_LAYERS)]
    pinned = [w.cpu().pin_memory() for w in resident]
    pageable = [w.cpu() for w in resident]
    uva, uva_error = [], ""
    try:
        uva = [
            torch.as_tensor(_DeviceView(_device_pointer(w), w.numel() * 2), device="cuda").view(torch.float16)
            for w in pinned
        ]
    except (NotApplicableError, RuntimeError) as exc:
        uva_error = str(exc)

    def step(weights: list[Tensor], copy_from_host: bool, non_blocking: bool) -> Callable[[], None]:
        def run() -> None:
            for w in weights:
                src = staging.copy_(w, non_blocking=non_blocking) if copy_from_host else w
                acc.add_(torch.dot(src, x).float())

        return run

    variants = {"resident": step(resident, False, False), "pinned_copy": step(pinned, True, True)}
    if uva:
        variants["uva_zero_copy"] = step(uva, False, False)
    # Last: its capture is expected to be refused, which may leave the context unusable.
    variants["pageable_copy"] = step(pageable, True, True)
    return variants, uva_error


def section_offload_step() -> dict:
    """A decode-like step over offloaded layers: resident, pinned copy, UVA view, pageable copy; eager and graph."""
    torch = _torch()
    variants, uva_error = _offload_variants(torch)
    results: dict = {"layers": STEP_LAYERS, "layer_bytes": STEP_LAYER_BYTES}
    if uva_error:
        results["uva_zero_copy"] = {"skipped": uva_error}
    for name, fn in variants.items():
        entry: dict[str, float | str] = {"eager_ms": round(_time_fn(torch, fn) * 1000, 3)}
        try:
            graph = _capture(torch, fn)
            entry["graph_ms"] = round(_time_fn(torch, graph.replay) * 1000, 3)
        except Exception as exc:  # noqa: BLE001 - a refused capture is the measurement
            entry["graph_error"] = str(exc).splitlines()[0]
            entry["graph_error_kind"] = str(classify(str(exc)))
            torch.cuda.synchronize()
        results[name] = entry
    return results


# (mode, base arm, test arm): what pinned memory buys an offload step, and what UVA buys over a copy.
AB_PAIRS = (
    ("eager", "pageable_copy", "pinned_copy"),
    ("eager", "pinned_copy", "uva_zero_copy"),
    ("graph", "pinned_copy", "uva_zero_copy"),
)
AB_ROUNDS, AB_STEPS = 8, 16


def section_offload_step_ab() -> dict:
    """The offload step's arms, interleaved over rounds, through the benchmark's statistics (repro/bench/stats.py).

    Each round times AB_STEPS steps of every arm in turn, so the arms share the
    GPU's clock and thermal state; the pageable copy is never captured (it cannot be).
    """
    from repro.bench import stats

    torch = _torch()
    started = time.perf_counter()
    variants, uva_error = _offload_variants(torch)
    arms = {("eager", name): fn for name, fn in variants.items() if name != "resident"}
    for name in ("pinned_copy", "uva_zero_copy"):
        if name in variants:
            arms[("graph", name)] = _capture(torch, variants[name]).replay
    samples: dict[tuple[str, str], list[list[float]]] = {arm: [] for arm in arms}
    for arm_fn in arms.values():
        arm_fn()
    torch.cuda.synchronize()
    for _ in range(AB_ROUNDS):
        for arm, fn in arms.items():
            times = []
            for _ in range(AB_STEPS):
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1000)
            samples[arm].append(times)
    comparisons: list[dict[str, object]] = []
    for mode, base, test in AB_PAIRS:
        missing = (mode, base) not in samples or (mode, test) not in samples
        diff = None if missing else stats.compare(samples[(mode, base)], samples[(mode, test)])
        if diff is None:
            comparisons.append({"mode": mode, "base": base, "test": test, "skipped": uva_error or "no such arm"})
            continue
        comparisons.append(
            {
                "mode": mode,
                "base": base,
                "test": test,
                **dataclasses.asdict(diff),
                "resolved": diff.resolved,
                "verdict": stats.verdict(diff, base, test, f"offload step ({mode})"),
            }
        )
    return {
        "rounds": AB_ROUNDS,
        "steps_per_round": AB_STEPS,
        "step_ms": {
            f"{mode}/{name}": dataclasses.asdict(stats.Spread.of([x for r in rounds for x in r]))
            for (mode, name), rounds in samples.items()
        },
        "comparisons": comparisons,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _time_fn(torch: types.ModuleType, fn: Callable[[], None], reps: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


SECTIONS: dict[str, Callable[[], dict]] = {
    "pin_alloc": section_pin_alloc,
    "bandwidth": section_bandwidth,
    # One capture per process: a refused or invalidated capture can poison the context.
    "capture_pinned_non_blocking": capture_copy(pinned=True, non_blocking=True),
    "capture_pinned_blocking": capture_copy(pinned=True, non_blocking=False),
    "capture_pageable_non_blocking": capture_copy(pinned=False, non_blocking=True),
    "capture_pageable_blocking": capture_copy(pinned=False, non_blocking=False),
    "uva_view": section_uva_view,
    "uva_pageable_refused": section_uva_pageable_refused,
    "offload_step": section_offload_step,
    "offload_step_ab": section_offload_step_ab,
}
