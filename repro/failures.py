"""Why a reproduction failed, in a fixed vocabulary, from the error text it left.

The patterns are the messages vLLM, torch and the CUDA/HIP runtimes print for
each failure (see docs/research/vllm-pinned-memory.md and the issue
threads it cites). Order matters: the first kind whose pattern matches wins,
so the specific kinds come before the general ones.
"""

from __future__ import annotations

import enum
import re


class FailureKind(enum.StrEnum):
    UVA_NOT_AVAILABLE = "uva-not-available"
    PAGEABLE_COPY_IN_CAPTURE = "pageable-copy-in-capture"
    CAPTURE_INVALIDATED = "capture-invalidated"
    DYNAMO_UNSUPPORTED = "dynamo-unsupported"
    PINNED_MEMORY_LIMIT = "pinned-memory-limit"
    OUT_OF_MEMORY = "out-of-memory"
    TIMEOUT = "timeout"
    OTHER = "other"


_PATTERNS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE | re.DOTALL))
    for kind, pattern in (
        # vllm/v1/worker/gpu/buffer_utils.py, V2 runner without pinned memory (0.24-0.29)
        (FailureKind.UVA_NOT_AVAILABLE, r"UVA is not available"),
        # torch refusing a pageable host copy inside torch.cuda.graph(...)
        (
            FailureKind.PAGEABLE_COPY_IN_CAPTURE,
            r"Cannot copy between CPU and (CUDA|HIP) tensors during (CUDA|HIP) graph capture",
        ),
        # a synchronous copy or sync call broke the capture
        (
            FailureKind.CAPTURE_INVALIDATED,
            r"StreamCaptureInvalidated|stream capture (was )?invalidated|"
            r"operation not permitted when stream is capturing|StreamCaptureUnsupported",
        ),
        # torch.compile tracing the offloader's forward wrapper (#37883)
        (FailureKind.DYNAMO_UNSUPPORTED, r"torch\._dynamo\.exc\.Unsupported|Failed to trace builtin operator"),
        # WDDM's cap on page-locked memory (~50% of RAM) hit while pinning: the host
        # allocator's call is in the traceback a few lines before the error.
        (
            FailureKind.PINNED_MEMORY_LIMIT,
            r"(pin_memory\(|cudaHostAlloc|cudaHostRegister|hipHostMalloc|hipHostRegister|CachingHostAllocator)"
            r".{0,600}?(out of memory|ErrorMemoryAllocation)",
        ),
        (
            FailureKind.OUT_OF_MEMORY,
            r"OutOfMemoryError|(CUDA|HIP) out of memory|CUDA error: out of memory|hipErrorOutOfMemory|"
            r"No available memory for the cache blocks",
        ),
        (FailureKind.TIMEOUT, r"\btimed out\b|killed after \d+"),
    )
)


def classify(text: str) -> FailureKind:
    """The first kind whose message appears in ``text``; OTHER if none does."""
    for kind, pattern in _PATTERNS:
        if pattern.search(text or ""):
            return kind
    return FailureKind.OTHER


def torch_at_fault(traceback_text: str) -> bool:
    """Whether an import failure ends in torch: its exception names torch, or its last frame is torch's.

    Under a torch other than the one a vLLM release pins, such a failure says nothing about vLLM.
    """
    lines = [line for line in (traceback_text or "").strip().splitlines() if line.strip()]
    if not lines:
        return False
    frames = [line for line in lines if line.lstrip().startswith('File "')]
    last_frame_in_torch = bool(frames) and re.search(r"[/\\]torch[/\\]", frames[-1]) is not None
    return last_frame_in_torch or re.search(r"\btorch\b", lines[-1]) is not None


def exception_text(traceback_text: str) -> str:
    """The exception a traceback ends in, on one line: its type and message, not the frames above it.

    Multi-line messages are kept (pydantic puts the reason on the second line), less pydantic's link line.
    """
    lines = (traceback_text or "").strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line[:1] not in ("", " ", "\t")]
    tail = lines[starts[-1] :] if starts else lines[-1:]
    return " ".join(line.strip() for line in tail if not line.strip().startswith("For further information"))
