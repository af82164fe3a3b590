"""The failure classifier, against the error texts recorded in docs/research/vllm-pinned-memory.md
(measured with vLLM 0.26.0 and torch 2.11 on an H200) and the runtimes' own error names."""

import pytest

from repro.failures import FailureKind, classify, exception_text

DYNAMO = """Traceback (most recent call last):
  File "vllm/v1/engine/core.py", line 112, in __init__
    num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(vllm_config)
  File "torch/_dynamo/symbolic_convert.py", line 1204, in call_function
torch._dynamo.exc.Unsupported: Failed to trace builtin operator
  Explanation: Dynamo does not know how to trace builtin operator `setattr` with argument types
  ['OrderedDict', 'str', 'OrderedDict'] (has_kwarg False)
"""

PAGEABLE_CAPTURE = """  File "vllm/model_executor/offloader/uva.py", line 133, in forward
    v.to(device, non_blocking=True)
RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor
is pinned. Please use a pinned CPU tensor or avoid non-blocking copies during capture.
"""

CAPTURE_INVALIDATED = """torch.AcceleratorError: CUDA error: operation failed due to a previous error during capture
Search for `cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com/cuda/cuda-runtime-api/ for more information.
CUDA kernel errors might be asynchronously reported at some other API call.
"""

UVA = """  File "vllm/v1/worker/gpu/buffer_utils.py", line 33, in __init__
    raise RuntimeError("UVA is not available")
RuntimeError: UVA is not available
"""

GPU_OOM = """torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity
of 23.99 GiB of which 1.10 GiB is free."""

PINNED_CAP = """  File "vllm/model_executor/offloader/uva.py", line 116, in _maybe_offload_to_cpu
    cpu_data = cpu_data.pin_memory()
               ^^^^^^^^^^^^^^^^^^^^^
RuntimeError: CUDA error: out of memory
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
"""

# vLLM's own WSL warning mentions pinned memory; with a plain GPU OOM after it, the OOM is what happened.
WARNING_THEN_OOM = """WARNING [cuda.py:401] Using CPU weight offloading with CUDA graphs on WSL requires pinned
(page-locked) memory ... WDDM enforces a hard system-wide cap of roughly 50% of physical RAM on pinned memory.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."""


@pytest.mark.parametrize(
    "text, kind",
    [
        (DYNAMO, FailureKind.DYNAMO_UNSUPPORTED),
        (PAGEABLE_CAPTURE, FailureKind.PAGEABLE_COPY_IN_CAPTURE),
        (PAGEABLE_CAPTURE.replace("CUDA", "HIP"), FailureKind.PAGEABLE_COPY_IN_CAPTURE),
        (CAPTURE_INVALIDATED, FailureKind.CAPTURE_INVALIDATED),
        (
            "cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing",
            FailureKind.CAPTURE_INVALIDATED,
        ),
        (UVA, FailureKind.UVA_NOT_AVAILABLE),
        (GPU_OOM, FailureKind.OUT_OF_MEMORY),
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
            FailureKind.OUT_OF_MEMORY,
        ),
        (PINNED_CAP, FailureKind.PINNED_MEMORY_LIMIT),
        (WARNING_THEN_OOM, FailureKind.OUT_OF_MEMORY),
        ("engine run killed after 600 s without finishing", FailureKind.TIMEOUT),
        ("KeyError: 'model.layers.0.self_attn.qkv_proj.weight'", FailureKind.OTHER),
        ("", FailureKind.OTHER),
    ],
)
def test_each_failure_gets_its_kind(text, kind):
    assert classify(text) is kind


def test_the_uva_crash_wins_over_what_follows_it():
    # A V2 start-up crash prints the UVA error and later an engine-core failure: the cause comes first.
    assert classify(UVA + "\nRuntimeError: Engine core initialization failed.") is FailureKind.UVA_NOT_AVAILABLE


def test_exception_text_is_the_exception_not_the_frames():
    pydantic = (
        "Traceback (most recent call last):\n"
        '  File "arg_utils.py", line 1639, in create_model_config\n'
        "    return ModelConfig(\n"
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, Model architectures ['X'] are not supported for now. [type=value_error]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n"
    )
    assert exception_text(pydantic) == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig "
        "Value error, Model architectures ['X'] are not supported for now. [type=value_error]"
    )
    assert (
        exception_text("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'") == "KeyError: 'x'"
    )
    assert exception_text("") == ""
