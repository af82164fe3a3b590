"""The child process of one reproduction run: ``python -m repro.engine SPEC_JSON RESULT.json``.

It presents the cell's host (when emulated) before vLLM is imported, starts
vLLM's engine in this process on the tiny model, generates greedily from fixed
token ids, and records where the model's parameters ended up. Everything it
learns goes to RESULT.json; a crash leaves its traceback there too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from matrix.cells import Host
from matrix.variables import FLASHINFER_SAMPLER
from repro import emulation

if TYPE_CHECKING:
    import torch

PROMPTS = ([1, 17, 42, 99, 123, 7, 256, 311], [1, 300, 301, 302, 55])
MAX_TOKENS = 16


def _allocator_segments() -> list[tuple[int, int]]:
    import torch

    return [(s["address"], s["address"] + s["total_size"]) for s in torch.cuda.memory_snapshot()]


def offload_stats(model: torch.nn.Module) -> dict:
    """Where the model's parameters live, as vLLM left them.

    A UVA-offloaded parameter is a device tensor whose memory is pinned host
    memory: it is not inside any block of torch's CUDA allocator. vLLM marks
    them too (``_vllm_is_uva_offloaded``), but not in every release.
    """
    if not hasattr(model, "parameters") and hasattr(model, "unwrap"):
        model = model.unwrap()  # a runner's CUDA-graph wrapper around the module
    segments = _allocator_segments()

    def device_owned(p: torch.Tensor) -> bool:
        return any(lo <= p.data_ptr() < hi for lo, hi in segments)

    stats = {"params": 0, "on_cpu": 0, "pinned_cpu": 0, "uva": 0, "device_weight_bytes": 0}
    for p in model.parameters():
        stats["params"] += 1
        if p.device.type == "cpu":
            stats["on_cpu"] += 1
            stats["pinned_cpu"] += int(p.is_pinned())
        elif getattr(p, "_vllm_is_uva_offloaded", False) or not device_owned(p):
            stats["uva"] += 1
        else:
            stats["device_weight_bytes"] += p.numel() * p.element_size()
    return stats


def _without_missing_flashinfer() -> None:
    # Some vLLM builds (the GPU tool's stripped 0.26.0) ship no FlashInfer, yet the sampler
    # imports it to ask whether it may use it, unless the variable says no first (0.26.0's
    # flashinfer_sampler_supported reads it before that import). vLLM reads it when the
    # sampler is built, so this engine's own environment still has time to say it.
    if importlib.util.find_spec("flashinfer") is None:
        FLASHINFER_SAMPLER.apply(os.environ, "0")


def engine_kwargs(spec: dict) -> dict:
    """The keyword arguments of vLLM's ``LLM`` for one run: the one place they are written."""
    return dict(
        model=spec["model"],
        cpu_offload_gb=1 if spec["offload"] else 0,
        enforce_eager=spec["mode"] == "eager",
        # Triton attention exists on CUDA and ROCm alike, so every cell runs the same kernels.
        attention_backend="TRITON_ATTN",
        dtype="float16",
        max_model_len=256,
        seed=0,
        # Small and fixed: memory profiling is skipped, so engines can share a GPU.
        gpu_memory_utilization=0.05,
        kv_cache_memory_bytes=256 << 20,
    )


def run(spec: dict) -> dict:
    if spec["present_host"]:
        emulation.present_host(Host(spec["host"]))
    started = time.monotonic()
    result: dict = {"status": "failed"}
    try:
        import torch
        from vllm import LLM, SamplingParams

        _without_missing_flashinfer()
        llm = LLM(**engine_kwargs(spec))
        result["started_s"] = round(time.monotonic() - started, 2)
        try:
            result["offload"] = llm.apply_model(offload_stats)[0]
        except Exception:  # noqa: BLE001 - the run still counts; the offload check will say why it cannot judge
            result["offload_error"] = traceback.format_exc()
        outputs = llm.generate(
            [{"prompt_token_ids": list(p)} for p in PROMPTS],
            SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True),
        )
        result["tokens"] = [list(o.outputs[0].token_ids) for o in outputs]
        result["memory_allocated"] = torch.cuda.memory_allocated()
        result["status"] = "ok"
    except BaseException:  # noqa: BLE001 - a crash under this cell is the result
        result["error"] = traceback.format_exc()
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def main(argv: list[str]) -> NoReturn:
    spec, result_path = argv
    result = run(json.loads(spec))
    # Whole or not at all: the parent may kill this process at any moment.
    partial = Path(f"{result_path}.partial")
    partial.write_text(json.dumps(result, indent=2, default=str))
    os.replace(partial, result_path)
    # The result is safe: leave without vLLM's teardown (engine threads, atexit hooks, the CUDA
    # context), which can hang until the parent's timeout and cost the run that much.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
