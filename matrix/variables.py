"""Every environment variable the kit sets for vLLM, and its own, once: its name, what it does, the values it sets.

The kit reads them back where it stands in for vLLM (the benchmark's test server), and where the doctor
says what vLLM will make of the values a user has set (``vllm_reads``).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import NamedTuple

# Not a value vLLM reads: the variable is absent from the environment, vLLM's default.
UNSET = "unset"

# The opt-in: VLLM_WSL2_ENABLE_PIN_MEMORY's value that asks for pinned memory.
OPT_IN = "1"
# What each cell's gate and reproduction tests compare (the JUnit ``pin_env`` property): vLLM's
# default and the opt-in.
GATE_PIN_VALUES = (UNSET, OPT_IN)
# What the benchmark's arms may set: an explicit "0" as well.
BENCH_PIN_VALUES = (UNSET, "0", "1")


# A NamedTuple, not a dataclass: the doctor imports this module, and importing dataclasses would cost its start 5 ms.
class Variable(NamedTuple):
    name: str
    does: str
    # Every value the kit sets; UNSET removes the variable. (): a value the run computes (a directory of its own, a
    # host cell's name: matrix.cells imports this module, so it cannot list them here).
    values: tuple[str, ...]
    since: str | None = None  # the first vLLM release that reads it; None: every release the kit runs

    def apply(self, environ: MutableMapping[str, str], value: str) -> None:
        """Set ``value`` in ``environ``, or remove the variable for UNSET."""
        if self.values and value not in self.values:
            raise ValueError(f"the kit never sets {self.name}={value!r}; it sets {self.values}")
        if value == UNSET:
            environ.pop(self.name, None)
        else:
            environ[self.name] = value


def vllm_reads(value: str) -> bool | None:
    """What vLLM makes of ``value`` in PIN_MEMORY or V2_MODEL_RUNNER: ``bool(int(value))``, as its envs.py reads both.

    So ``" 1"``, ``"01"`` and ``"2"`` are on, ``"0"`` is off, and None where ``int`` raises ValueError
    (``"true"``, ``"yes"``, ``""``): vLLM stops with that error at start-up, when its engine reads every variable.
    """
    try:
        return bool(int(value))
    except ValueError:
        return None


PIN_MEMORY = Variable(
    "VLLM_WSL2_ENABLE_PIN_MEMORY",
    "1 lets vLLM pin host memory on a WSL2 kernel at or above 4.19.121 (vLLM 0.24.0+, #41496)",
    BENCH_PIN_VALUES,
    since="0.24.0",
)
V2_MODEL_RUNNER = Variable(
    "VLLM_USE_V2_MODEL_RUNNER",
    "1 selects vLLM's V2 model runner, 0 the V1 runner (each cell's runner axis); unset, vLLM's config chooses "
    "(the gate asks which)",
    ("0", "1", UNSET),
)
V1_MULTIPROCESSING = Variable(
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "0 keeps the engine in the calling process, so the patched uname and the sampler fix reach it",
    ("0",),
)
OFFLOAD_DISABLE_UVA = Variable(
    "VLLM_WEIGHT_OFFLOADING_DISABLE_UVA",
    "1 keeps the CPU weight offloader off UVA (with OFFLOAD_DISABLE_PIN_MEMORY: WSL2's fallback on any Linux GPU)",
    ("1",),
)
OFFLOAD_DISABLE_PIN_MEMORY = Variable(
    "VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY",
    "1 keeps the CPU weight offloader off pinned memory (with OFFLOAD_DISABLE_UVA: WSL2's fallback on any Linux GPU)",
    ("1",),
)
FLASHINFER_SAMPLER = Variable(
    "VLLM_USE_FLASHINFER_SAMPLER",
    "0 keeps vLLM's sampler from importing FlashInfer to ask whether it may use it, where FlashInfer is not installed",
    ("0",),
)
# What the kit sets for a vLLM engine it starts on this machine (the CPU engine, the benchmark's servers).
NO_USAGE_STATS = Variable("VLLM_NO_USAGE_STATS", "1: no usage report leaves the machine", ("1",))
HOST_IP = Variable(
    "VLLM_HOST_IP", "the address vLLM gives itself, so that it finds none by asking the network", ("127.0.0.1",)
)
CACHE_ROOT = Variable(
    "VLLM_CACHE_ROOT",
    "where vLLM keeps its compile caches and what it found about a model: a directory of the run's own",
    (),
)

# The kit's own: a WSL2 host cell every Python process started from this environment presents to vLLM, through
# the start-up hook in repro/bench/present_host (repro.emulation.presenting).
PRESENT_HOST = Variable(
    "WSLPIN_PRESENT_HOST",
    "the WSL2 host cell whose uname each Python process shows vLLM",
    (),
)

# The kit's own: the offline GPU run's engine bench (repro/engine_bench.py) times a stand-in instead of vLLM's engine,
# so that its planning, processes, deadline, statistics and record run where there is no GPU; its record says so.
BENCH_ENGINE = Variable(
    "WSLPIN_BENCH_ENGINE",
    "stand-in: the offline GPU run's engine bench times a stand-in generate instead of vLLM's engine",
    ("stand-in",),
)

# The kit's own settings of its own processes, read where they act.
DEADLINE = Variable(
    "WSLPIN_DEADLINE",
    "the Unix time by which every vLLM child of a run must have ended (repro/isolation.py)",
    (),
)
ANSWER_CACHE = Variable(
    "WSLPIN_ANSWER_CACHE",
    "a directory where vLLM's answers under a presented host are kept for this environment (repro/answers.py)",
    (),
)
HISTORY_CACHE = Variable(
    "WSLPIN_HISTORY_CACHE",
    "where the history keeps each release's results by key, instead of ~/.cache/wslpin-kit/history",
    (),
)
HOST_READS = Variable(
    "WSLPIN_HOST_READS",
    "a file where every read of the machine is logged, for the test session's check (matrix/host/reads.py)",
    (),
)
HOST_READS_TEST = Variable(
    "WSLPIN_HOST_READS_TEST",
    "the test that a logged read of the machine belongs to (tests/kit/host_reads.py sets it)",
    (),
)
RUNNER_KINDS = Variable(
    "WSLPIN_RUNNER_KINDS",
    "the runner kinds online (a repository variable): the plan gives cells to those only; empty: all",
    (),
)
TORCH_INDEX = Variable(
    "WSLPIN_TORCH_INDEX",
    "a mirror of PyTorch's CPU wheel index (a URL), for a machine that cannot reach PyTorch's own (tools/installs.py)",
    (),
)
SMOKE_IMAGE = Variable(
    "WSLPIN_SMOKE_IMAGE",
    "the image nox -s docker_smoke built, for its test to run a cell in",
    (),
)
