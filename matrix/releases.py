"""The vLLM releases the kit runs: the one place they are set."""

# Every session uses this release unless told otherwise (`-- --vllm X`).
VLLM_VERSION = "0.33.0"

# `nox -s history` by default: every release, patch releases included, from the one
# before VLLM_WSL2_ENABLE_PIN_MEMORY appeared (0.24.0, #41496) on. VLLM_VERSION stays the
# sessions' default after a newer release is covered until the kit's own tests run on it.
HISTORY_VERSIONS = (
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    VLLM_VERSION,
    "0.34.0",
)

# A run whose environment record names no vLLM: a container that crashed before reporting its own.
UNKNOWN_RELEASE = "unknown"
