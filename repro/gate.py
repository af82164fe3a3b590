"""Ask the installed vLLM what it decides about pinned memory under a host.

``decide`` runs in a fresh child (see ``isolation``): it presents the host,
imports vLLM, and records vLLM's own answers — nothing here re-implements a
decision. ``evaluate`` runs one child per distinct (stack, host, pin_env,
presentation) and shares the answers between the cells that depend on them:
the runner and graph mode do not change the gate, so 24 cells x 2 pin_env
values need 12 children. ``evaluate_edges`` asks the same gate under every
kernel edge (``matrix.host.edges``) in one child per stack, vLLM's caches
cleared between edges: the edges add two children, not one per edge.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import platform
import sys
import traceback
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from matrix.cells import Cell, Host, Runner, Stack
from matrix.host import reads
from matrix.host.edges import KERNEL_EDGES, READING_SAMPLES, KernelEdge
from matrix.judge.expectations import REFUSED
from matrix.plan import CellPlan, Execution
from matrix.variables import GATE_PIN_VALUES, PIN_MEMORY, V2_MODEL_RUNNER
from repro import emulation
from repro.answers import run_remembered
from repro.isolation import Outcome, run_isolated

DEFAULT_TIMEOUT = 180.0
# Imported in the parent before forking: host-independent and slow, so each child only pays for vLLM itself.
PRELOAD = ("torch", "torch._dynamo", "torch._inductor", "transformers")
# The rest of what vLLM imports from other packages (pydantic, openai, more of torch) is ~7 of a child's ~8 s
# import; finding and loading it costs the parent ~17 s, while the children share the cores: it pays where each
# core has this many children to run.
CHILDREN_PER_CORE_FOR_ALL = 3


@dataclass(frozen=True, order=True)
class GateRequest:
    stack: Stack
    host: Host
    pin_env: str  # one of GATE_PIN_VALUES
    present_host: bool  # patch uname: the real host is not the cell's host
    stub_gpu: bool  # no GPU of this stack here

    @classmethod
    def for_cell(cls, cell: Cell, pin_env: str, execution: Execution) -> GateRequest:
        return cls(
            cell.stack,
            cell.host,
            pin_env,
            present_host=execution.presents_host,
            stub_gpu=execution.stubs_gpu,
        )

    @property
    def label(self) -> str:
        how = "native" if not self.present_host else ("gate-only" if self.stub_gpu else "emulated")
        return f"{self.stack}/{self.host}/pin_env={self.pin_env} ({how})"


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message not in self.messages:
            self.messages.append(message)


def _pin_warning(messages: list[str]) -> str:
    """Classify vLLM's pin-memory warning: none, wsl (base class), wsl-kernel (kernel gate)."""
    pin = [m for m in messages if "pin_memory=False" in m]
    if not pin:
        return "none"
    return "wsl-kernel" if any("kernel" in m for m in pin) else "wsl"


def _first_module(*names: str) -> types.ModuleType | None:
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return None


def _runner_choice(env_value: str) -> str:
    from vllm.config import VllmConfig

    V2_MODEL_RUNNER.apply(os.environ, env_value)
    return runner_of(VllmConfig())


# The modules of vLLM's two GPU model runners: a release that dropped one no longer ships its module.
V1_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
V2_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"


def runner_of(config: object) -> str:
    """The model runner (v1, v2) vLLM runs for ``config`` under this environment's VLLM_USE_V2_MODEL_RUNNER, or
    ``refused`` where vLLM's own check of the environment stops the engine.

    A release that still chooses says so in ``use_v2_model_runner``. One that lost the choice (0.34.0 removed the
    V1 runner, and the property with it) has one runner module left, which is what runs, and checks the variable
    where the engine config is built: ``validate_environ`` is asked, as the engine asks it.
    """
    if hasattr(type(config), "use_v2_model_runner"):
        return "v2" if config.use_v2_model_runner else "v1"  # type: ignore[attr-defined]
    from vllm.platforms import current_platform

    validate = getattr(type(current_platform), "validate_environ", None)
    if validate is not None and V2_MODEL_RUNNER.name in os.environ:
        # Asked of the runner's variable alone, so that a refusal is of it and not of another variable.
        saved = dict(os.environ)
        os.environ.clear()
        os.environ[V2_MODEL_RUNNER.name] = saved[V2_MODEL_RUNNER.name]
        try:
            validate(False)
        except ValueError:
            return REFUSED
        finally:
            os.environ.clear()
            os.environ.update(saved)
    present = [name for name, module in (("v1", V1_RUNNER_MODULE), ("v2", V2_RUNNER_MODULE)) if _has_module(module)]
    if len(present) != 1:
        raise RuntimeError(f"vLLM's config chooses no runner and the release has runner modules {present}")
    return present[0]


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _v2_buffer() -> str:
    """Which buffer class vLLM's V2 UvaBufferPool builds.

    vLLM picks the class, then allocates it. Without a GPU the allocation
    fails; the class whose constructor reached it is the class vLLM chose.
    """
    import torch

    module = _first_module("vllm.v1.worker.gpu.buffer_utils")
    if module is None or not hasattr(module, "UvaBufferPool"):
        return "absent"
    try:
        pool = module.UvaBufferPool(4, torch.int32, max_concurrency=1)
    except RuntimeError as exc:
        if "UVA is not available" in str(exc):
            return "crash: UVA is not available"
        chosen = _constructor_at_fault(exc)
    except Exception as exc:  # noqa: BLE001 - no device to allocate on
        chosen = _constructor_at_fault(exc)
    else:
        return getattr(pool, "_buffer_cls", type(pool._uva_bufs[0])).__name__
    return chosen or "unknown"


def _constructor_at_fault(exc: BaseException) -> str | None:
    chosen = None
    tb = exc.__traceback__
    while tb is not None:
        this = tb.tb_frame.f_locals.get("self")
        if this is not None and type(this).__module__.startswith("vllm."):
            chosen = type(this).__name__
        tb = tb.tb_next
    return chosen


# The function the V2 runner would call to install the CPU-weight offloader (0.28.0 added the call).
OFFLOADER_FACTORY = "create_offloader"


def _v2_offloader() -> bool | str:
    """Whether the V2 model runner installs vLLM's CPU-weight offloader: read from the release's own source.

    Running it would need a GPU (the runner loads the model onto the device before it offloads), so this is the
    one gate value read, not run: compiled, not imported, the runner's module calls ``create_offloader`` or not.
    Without that call ``cpu_offload_gb`` is accepted and nothing is offloaded.
    """
    try:
        spec = importlib.util.find_spec(V2_RUNNER_MODULE)
    except ModuleNotFoundError:
        spec = None
    if spec is None or spec.loader is None or not hasattr(spec.loader, "get_source"):
        return "absent"
    source = spec.loader.get_source(V2_RUNNER_MODULE)
    codes = [compile(source, spec.origin or V2_RUNNER_MODULE, "exec")]
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return OFFLOADER_FACTORY in names


def _offload_path() -> str:
    """The path vLLM's CPU weight offloader takes for ``cpu_offload_gb=1``."""
    base = _first_module("vllm.model_executor.offloader.base")
    if base is None:
        return "absent"
    from vllm.config import OffloadConfig

    config = OffloadConfig()
    config.uva.cpu_offload_gb = 1
    offloader = base.create_offloader(config)
    if getattr(offloader, "uva_offloading", False):
        return "uva"
    return "pinned-copy" if getattr(offloader, "pin_memory", False) else "pageable-copy"


def decide(request: GateRequest) -> dict:
    """In a fresh process: present the host, import vLLM, record what it decides."""
    PIN_MEMORY.apply(os.environ, request.pin_env)
    if request.present_host:
        emulation.present_host(request.host)
    else:
        reads.record("gate child: vLLM sees this machine's uname")
    if request.stub_gpu:
        emulation.stub_gpu(request.stack)

    capture = _Capture()
    answer: dict = {"imports": False, "errors": {}}
    try:
        import vllm.logger  # noqa: F401 - configures vLLM's logger; attach after it

        logging.getLogger("vllm").addHandler(capture)
        import vllm
        import vllm.platforms

        platform = vllm.platforms.current_platform
        import vllm.utils.torch_utils as torch_utils
    except BaseException:  # noqa: BLE001 - an import failure under a host is a finding
        answer["import_error"] = traceback.format_exc()
        answer["warnings"] = capture.messages
        return answer

    answer["imports"] = True
    answer["vllm_version"] = getattr(vllm, "__version__", "unknown")
    answer["platform_class"] = f"{type(platform).__module__}.{type(platform).__qualname__}"
    answer["pin_memory_constant"] = getattr(torch_utils, "PIN_MEMORY", None)
    # Older releases keep these in vllm.utils, which every release has.
    utils = _first_module("vllm.utils.platform_utils") or importlib.import_module("vllm.utils")
    probes = {
        "platform_pin": lambda: type(platform).is_pin_memory_available(),
        "pin": lambda: utils.is_pin_memory_available(),
        "uva": lambda: utils.is_uva_available(),
        "runner_v1": lambda: _runner_choice(Runner.V1.env_value),
        "runner_v2": lambda: _runner_choice(Runner.V2.env_value),
        "v2_buffer": _v2_buffer,
        "offload_path": _offload_path,
        "v2_offloader": _v2_offloader,
    }
    for key, probe in probes.items():
        try:
            answer[key] = probe()
        except BaseException:  # noqa: BLE001 - recorded per value, the rest still runs
            answer["errors"][key] = traceback.format_exc()
    answer["warnings"] = capture.messages
    answer["warning"] = _pin_warning(capture.messages)
    return answer


# What a kernel edge is asked: the gate's own answers. The rest follows from them, as the cell's gate tests show.
EDGE_KEYS = ("platform_pin", "pin", "warning")


@dataclass(frozen=True, order=True)
class EdgeRequest:
    """Every kernel edge under one stack's platform class, asked in one child."""

    stack: Stack
    stub_gpu: bool  # no GPU of this stack here
    edges: tuple[KernelEdge, ...] = KERNEL_EDGES
    samples: tuple[tuple[str, str], ...] = READING_SAMPLES  # (release, node) vLLM's reading is asked of

    @classmethod
    def for_cell(cls, cell: Cell, execution: Execution) -> EdgeRequest:
        return cls(cell.stack, stub_gpu=execution.stubs_gpu)


# functools.cache and lru_cache both wrap a function in this type.
_CACHED_FUNCTION = type(functools.cache(lambda: None))


def _forget_vllm_caches() -> None:
    """Clear every cached function of vLLM's loaded modules (in_wsl, the kernel version, is_pin_memory_available,
    warning_once's): what a fresh process would not know yet, whichever release names them how."""
    for name, module in list(sys.modules.items()):
        if module is None or name.partition(".")[0] != "vllm":
            continue
        for value in list(vars(module).values()):
            if isinstance(value, _CACHED_FUNCTION) and value.__module__.partition(".")[0] == "vllm":
                value.cache_clear()


def _raised(probe: Callable[[], object]) -> object:
    """The probe's answer, or ``raises: <type>``: an exception is what vLLM decided under that uname."""
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - recorded, judged against the rule like any answer
        return f"raises: {type(exc).__name__}"


def _readings(platform_class: type, samples: Iterable[tuple[str, str]]) -> list[dict]:
    """vLLM's own reading of each (release, node): ``in_wsl()`` and the stack's ``_get_wsl_kernel_version()``
    (``absent`` in a release without that function), with every uname field as presented."""
    interface = importlib.import_module("vllm.platforms.interface")
    kernel_version = getattr(sys.modules[platform_class.__module__], "_get_wsl_kernel_version", None)
    found = []
    for release, node in samples:
        emulation.present_uname(release, node)
        _forget_vllm_caches()
        version = _raised(kernel_version) if kernel_version else "absent"
        found.append(
            {
                "uname": list(platform.uname()),
                "in_wsl": _raised(interface.in_wsl),
                "kernel": list(version) if isinstance(version, tuple) else version,
            }
        )
    return found


def decide_edges(request: EdgeRequest) -> dict:
    """In a fresh process: import vLLM once, then ask its gate under each edge and ``pin_env`` value.

    Answers keyed by (edge name, pin_env), and vLLM's reading of every sample uname under ``readings``; or
    ``import_error``.
    """
    if request.stub_gpu:
        emulation.stub_gpu(request.stack)
        # Stubbed, the platform vLLM detects does not depend on the host: import it as native Linux,
        # where every release imports (0.25 did not on WSL, which the cell's own import test reports).
        # With the GPU really here, vLLM detects it under the machine's own uname.
        emulation.present_host(Host.LINUX)
    capture = _Capture()
    try:
        import vllm.logger  # noqa: F401 - configures vLLM's logger; attach after it

        logging.getLogger("vllm").addHandler(capture)
        import vllm.platforms

        platform = type(vllm.platforms.current_platform)
        utils = _first_module("vllm.utils.platform_utils") or importlib.import_module("vllm.utils")
    except BaseException:  # noqa: BLE001 - reported by the edge tests, judged by the cell's import test
        return {"import_error": traceback.format_exc()}
    answers: dict = {"readings": _readings(platform, request.samples)}
    distro = os.environ.get("WSL_DISTRO_NAME")
    for edge in request.edges:
        for pin_env in GATE_PIN_VALUES:
            emulation.present_uname(edge.release, edge.node)
            PIN_MEMORY.apply(os.environ, pin_env)
            # WSL's variable as the edge has it; the others see the process's own (none, or an emulated host's).
            os.environ.pop("WSL_DISTRO_NAME", None)
            if edge.wsl_distro or distro is not None:
                os.environ["WSL_DISTRO_NAME"] = "wslpin-edge" if edge.wsl_distro else str(distro)
            _forget_vllm_caches()
            capture.messages.clear()
            answer = {
                "platform_pin": _raised(platform.is_pin_memory_available),
                "pin": _raised(utils.is_pin_memory_available),
            }
            answers[edge.name, pin_env] = {
                **answer,
                "warning": _pin_warning(capture.messages),
                "warnings": list(capture.messages),
            }
    return answers


def edge_requests_for(plans: Iterable[CellPlan]) -> list[EdgeRequest]:
    return sorted({EdgeRequest.for_cell(p.cell, p.execution) for p in plans})


def evaluate_edges(requests: list[EdgeRequest], timeout: float = DEFAULT_TIMEOUT) -> dict[EdgeRequest, Outcome]:
    unique = sorted(set(requests))
    stand_in = all(r.stub_gpu for r in unique)
    outcomes = run_remembered("gate.decide_edges", decide_edges, unique, timeout, before=lambda n: preload(n, stand_in))
    return dict(zip(unique, outcomes, strict=True))


def _imported_with_vllm(_: object) -> list[str]:
    """In a fresh child: the modules of other packages that importing vLLM's gate and engine arguments loads.

    Under the stand-ins a gate-only child has (native Linux, a CUDA GPU), under which every release imports.
    """
    emulation.present_host(Host.LINUX)
    emulation.stub_gpu(Stack.CUDA)
    before = set(sys.modules)
    import vllm.platforms

    vllm.platforms.current_platform  # noqa: B018 - resolving the platform imports its module
    import vllm.engine.arg_utils  # noqa: F401
    import vllm.utils.torch_utils  # noqa: F401

    return [
        name
        for name, module in list(sys.modules.items())
        if name not in before and module is not None and not emulation.replaced(name)
    ]


def preload(children: int, stand_in_gpu: bool) -> None:
    """Import in this process what the ``children`` about to be forked would import alike.

    ``PRELOAD`` always. Where every child stands in for the GPU (``stand_in_gpu``) and there are enough of them
    (``CHILDREN_PER_CORE_FOR_ALL``), also what a child under that stand-in imports from other packages
    (``_preload``).
    """
    cores = os.cpu_count() or 1
    _preload(stand_in_gpu and children >= CHILDREN_PER_CORE_FOR_ALL * cores)


@functools.cache
def _preload(all_of_vllms: bool) -> None:
    """``PRELOAD``, and with ``all_of_vllms`` what a child under the GPU's stand-in imports from other packages.

    Such a module reads nothing a presentation changes at import (vLLM reads the uname when it decides, and what
    stands in for the GPU replaces vLLM's own modules and those ``emulation.replaced`` names, which are left
    out), so a child forked after it gets the module it would have imported, loaded already. Not where a child
    uses a real GPU: a module that touched the device at import would leave CUDA initialised in the parent, and
    a forked child cannot use it then. Where the asking child fails (a release that does not import as native
    Linux), only ``PRELOAD`` is imported.
    """
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if not all_of_vllms:
        return
    (outcome,) = run_isolated(_imported_with_vllm, [None], timeout=DEFAULT_TIMEOUT)
    for name in outcome.value if outcome.ok else ():
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a child imports it then, as it would have anyway
            pass


def requests_for(plans: Iterable[CellPlan]) -> list[GateRequest]:
    """The distinct host evaluations the planned cells need, for both ``pin_env`` values."""
    return sorted({GateRequest.for_cell(p.cell, pin_env, p.execution) for p in plans for pin_env in GATE_PIN_VALUES})


def evaluate(
    requests: list[GateRequest], timeout: float = DEFAULT_TIMEOUT, jobs: int | None = None
) -> dict[GateRequest, Outcome]:
    unique = sorted(set(requests))
    stand_in = all(r.stub_gpu for r in unique)
    outcomes = run_remembered("gate.decide", decide, unique, timeout, jobs, before=lambda n: preload(n, stand_in))
    return dict(zip(unique, outcomes, strict=True))
