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
from matrix.host import reads
from matrix.variables import FLASHINFER_SAMPLER
from repro import emulation

if TYPE_CHECKING:
    import torch

PROMPTS = ([1, 17, 42, 99, 123, 7, 256, 311], [1, 300, 301, 302, 55])
MAX_TOKENS = 16


def offload_stats(model: torch.nn.Module) -> dict:
    """Where the model's parameters live, by vLLM's own account.

    A UVA-offloaded parameter is a device tensor over pinned host memory: nothing about the
    tensor tells it from device memory, so only vLLM's marker counts it. The offloader vLLM
    registered says how many bytes it moved. Where a release has neither, ``offloaded_bytes``
    is None and no judgement is made (``repro.offload.EngineResult.offload_proven``).
    """
    if not hasattr(model, "parameters") and hasattr(model, "unwrap"):
        model = model.unwrap()  # a runner's CUDA-graph wrapper around the module
    return {**parameter_stats(model), **offloader_stats(_registered_offloader())}


def parameter_stats(model: torch.nn.Module) -> dict[str, int]:
    """Parameters vLLM marked as UVA views (``_vllm_is_uva_offloaded``), left on the CPU, or kept on the device."""
    stats = {"params": 0, "on_cpu": 0, "pinned_cpu": 0, "uva": 0, "device_weight_bytes": 0}
    for p in model.parameters():
        stats["params"] += 1
        if getattr(p, "_vllm_is_uva_offloaded", False):
            stats["uva"] += 1
        elif p.device.type == "cpu":
            stats["on_cpu"] += 1
            stats["pinned_cpu"] += int(p.is_pinned())
        else:
            stats["device_weight_bytes"] += p.numel() * p.element_size()
    return stats


def _registered_offloader() -> object | None:
    try:
        from vllm.model_executor.offloader.base import get_offloader
    except ImportError:
        return None  # a release without an offloader registry
    return get_offloader()


def offloader_stats(offloader: object | None) -> dict[str, str | int | None]:
    """The offloader vLLM registered and the bytes it moved: 0 for the no-op one, None where it keeps no count."""
    if offloader is None:
        return {"offloader": None, "offloaded_bytes": None}
    name = type(offloader).__name__
    # 0.26.0's V2 runner never registers an offloader: the no-op default stays, and it moves nothing.
    moved = 0 if name == "NoopOffloader" else getattr(offloader, "cpu_offload_bytes", None)
    return {"offloader": name, "offloaded_bytes": moved}


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
    else:
        reads.record("engine child: vLLM sees this machine's uname")
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
