"""Present a cell's host and GPU stack to vLLM in a process that has not imported it.

Two separate things, both applied before the first ``import vllm``:

- ``present_host``: vLLM's WSL checks read ``platform.uname()`` (all fields,
  release included), so patching that one function makes every gate in vLLM
  see the cell's host. Used whenever the real host is not the cell's host.
- ``stub_gpu``: on a machine without the cell's GPU, vLLM's platform modules
  cannot load. Only what needs the GPU is replaced, each stub below says why
  (compiled extensions, NVML/amdsmi device discovery, Triton's driver check);
  vLLM's own platform detection and gate code run unchanged on top.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import platform
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from matrix.cells import Host, Stack
from matrix.variables import PRESENT_HOST

EMULATED_NODE = "wslpin-emulated"
# A Radeon RX 7900 XTX: the RDNA3 card AMD supports for ROCm on WSL2.
EMULATED_GCN_ARCH = "gfx1100"
# An H200, the GPU the kit's measurements come from (Hopper, compute capability 9.0).
EMULATED_CUDA_CAPABILITY = (9, 0)


# Python imports its sitecustomize at start-up from a directory on PYTHONPATH: the hook that presents the host there.
PRESENT_HOST_HOOK = Path(__file__).resolve().parent / "bench" / "present_host"


def presenting(host: Host, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for processes that each present ``host`` to vLLM from their start: every Python process they start
    too (vLLM's API server and engine core are separate processes, and so are a test run's children)."""
    path = os.pathsep.join(filter(None, [str(PRESENT_HOST_HOOK), env.get("PYTHONPATH")]))
    return {**env, PRESENT_HOST.name: host.value, "PYTHONPATH": path}


def present_host(host: Host) -> None:
    present_uname(host.emulated_release, EMULATED_NODE)


def present_uname(release: str, node: str) -> None:
    """Show vLLM this release and node name; the other fields stay the machine's own.

    The node name is replaced too: vLLM's in_wsl() looks for "microsoft" in every field. Presented
    again, the other fields are still the machine's: each presentation keeps them.
    """
    real = platform.uname()
    fake = platform.uname_result(real.system, node, release, real.version, real.machine)
    platform.uname = lambda: fake


class _NvmlError(Exception):
    """Named like pynvml's errors: vLLM treats exceptions with 'nvml' in the class name as 'no NVIDIA GPU'."""


class NVMLError_LibraryNotFound(_NvmlError):  # noqa: N801, N818 - pynvml's own spelling
    pass


def _nvml_stub(gpus: int) -> types.ModuleType:
    """NVML answering for ``gpus`` devices (libnvidia-ml is absent without an NVIDIA driver).

    Beyond the count, only what building vLLM's engine config asks: which device, its name and compute
    capability (model and kernel modules read the capability at import, repro/engine_config.py).
    """
    nvml = types.ModuleType("pynvml")

    def init() -> None:
        if not gpus:
            raise NVMLError_LibraryNotFound("emulated: no NVIDIA GPU in this cell")

    def unsupported(name: str) -> Callable[..., NoReturn]:
        if name.startswith("__"):  # module protocol (inspect, pickle) must see a plain module
            raise AttributeError(name)

        def call(*_a: object, **_k: object) -> NoReturn:
            raise NVMLError_LibraryNotFound(f"emulated NVML has no {name}")

        return call

    vars(nvml).update(
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: gpus,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=lambda handle: "emulated NVIDIA H200",
        nvmlDeviceGetCudaComputeCapability=lambda handle: EMULATED_CUDA_CAPABILITY,
        NVMLError=_NvmlError,
        __getattr__=unsupported,
    )
    return nvml


class AmdSmiException(Exception):  # noqa: N818 - amdsmi's own name
    pass


def _amdsmi_stub() -> types.ModuleType:
    """amdsmi answering for one RDNA3 GPU (libamd_smi.so exists only with a ROCm driver)."""
    smi = types.ModuleType("amdsmi")
    handle = object()

    def unsupported(name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():  # enums and classes imported by name at module load
            return types.SimpleNamespace()

        def call(*_a: object, **_k: object) -> NoReturn:
            raise AmdSmiException(f"emulated amdsmi has no {name}")

        return call

    vars(smi).update(
        AmdSmiException=AmdSmiException,
        amdsmi_init=lambda *a: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: [handle],
        amdsmi_get_gpu_asic_info=lambda h: {
            "target_graphics_version": EMULATED_GCN_ARCH,
            "market_name": "emulated Radeon RX 7900 XTX",
        },
        __getattr__=unsupported,
    )
    return smi


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves stand-in modules through the normal import system, parents included."""

    def __init__(self, modules: dict[str, types.ModuleType]) -> None:
        self.modules = modules

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name in self.modules:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.modules[spec.name]

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _triton_sees_a_gpu(stack: Stack) -> None:
    """Triton is real; only its driver's question "is a GPU there?" is answered for the cell.

    vLLM enables Triton, and with it the V2 model runner, only when exactly one of
    Triton's GPU drivers is active, which needs a device.
    """
    try:
        from triton.backends import backends
    except ImportError:  # no Triton installed: vLLM decides as on a host without it
        return
    wanted = "nvidia" if stack is Stack.CUDA else "amd"
    for name, backend in backends.items():
        if backend.driver is not None and name in ("nvidia", "amd"):
            backend.driver.is_active = staticmethod(lambda active=(name == wanted): active)


class _KernelQueries:
    """``torch.ops._C`` without vLLM's compiled kernels: their support queries answer "no", nothing else runs.

    Some modules ask at import whether a kernel suits the device (``cutlass_scaled_mm_supports_fp8``);
    the stubbed extension registers no ops, so torch would raise instead. Any other op still raises:
    no kernel runs without the GPU.
    """

    def __init__(self, ops: object) -> None:
        self._ops = ops

    def __getattr__(self, name: str) -> object:
        if "support" in name:
            return lambda *_a, **_k: False
        return getattr(self._ops, name)


def _kernel_queries_unsupported() -> None:
    import torch

    torch.ops._C = _KernelQueries(torch.ops._C)  # torch.ops keeps namespaces as attributes


# Device discovery outside vLLM's package: NVML for CUDA (older releases import the pynvml package; newer ones
# vendor it as vllm.third_party.pynvml), amdsmi for ROCm.
DISCOVERY_MODULES = ("pynvml", "amdsmi")


def replaced(module: str) -> bool:
    """Whether ``stub_gpu`` may stand in for this module, so it must not be imported before it runs."""
    top = module.partition(".")[0]
    return top.startswith("vllm") or top in DISCOVERY_MODULES


def stub_gpu(stack: Stack) -> None:
    # vLLM's compiled extensions link against libcuda/libamdhip64: they cannot
    # load here. Their ops are never called by the gate code, nor by building the engine config.
    extensions = ("_C", "_C_stable_libtorch", "_rocm_C", "vllm_flash_attn._vllm_fa2_C", "vllm_flash_attn._vllm_fa3_C")
    stubs = {f"vllm.{name}": types.ModuleType(f"vllm.{name}") for name in extensions}
    nvml = _nvml_stub(1 if stack is Stack.CUDA else 0)
    stubs["pynvml"] = stubs["vllm.third_party.pynvml"] = nvml
    if stack is Stack.ROCM:
        stubs["amdsmi"] = _amdsmi_stub()
    else:
        # None in sys.modules is how Python blocks an import (typeshed does not allow it).
        sys.modules["amdsmi"] = None  # type: ignore[assignment]  # a real amdsmi would find no GPU
    sys.meta_path.insert(0, _StubFinder(stubs))
    _triton_sees_a_gpu(stack)
    _kernel_queries_unsupported()
    if stack is Stack.ROCM:
        import torch

        # Older rocm.py reads the GCN arch from the device properties at import.
        torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(
            gcnArchName=EMULATED_GCN_ARCH,
            name="emulated Radeon RX 7900 XTX",
            total_memory=24 << 30,
            major=11,
            minor=0,
            multi_processor_count=48,
        )
