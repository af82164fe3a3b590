"""The container that runs a plan's cells in an image: a pure function of the plan, the paths and the environment.

What to mount, which GPU devices, which variables, which command. No Docker here: the
spec is computed, and tested, on any machine.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from matrix.cells import Host, Stack
from matrix.plan import Plan, cell_pytest_args

KIT_ROOT = Path(__file__).resolve().parents[2]
KIT = "/kit"
# The one directory the container may write: the host's private scratch, never its results tree.
SCRATCH = "/scratch"
DEPS = "/opt/wslpin-kit-deps"
WSL_DIR = "/usr/lib/wsl"
# What pytest runs in the container unless told otherwise: the cell's tests, as a cell session runs them.
CELL_TESTS = ("tests/cell",)
PLAN_FILE = "plan.json"
# The most the container may leave in its scratch (a cell leaves a JUnit file and two small records): past it, the
# container is killed. The scratch is the host's disk, which no engine setting bounds on every host.
SCRATCH_LIMIT = 256 * 2**20
SCRATCH_ENTRIES = 10_000


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    command: tuple[str, ...]
    mounts: tuple[Mount, ...]
    environment: tuple[tuple[str, str], ...]
    workdir: str
    user: str
    devices: tuple[str, ...] = ()  # host device paths, exposed at the same path
    gpu_request: bool = False  # `docker run --gpus all`
    group_add: tuple[str, ...] = ()
    writable_limit: int = SCRATCH_LIMIT  # bytes, over every writable mount
    writable_entries: int = SCRATCH_ENTRIES

    @property
    def writable(self) -> tuple[str, ...]:
        """The host directories the container may write."""
        return tuple(m.source for m in self.mounts if not m.read_only)


@dataclass(frozen=True)
class _GpuExposure:
    devices: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    gpu_request: bool = False
    group_add: tuple[str, ...] = ()


def _gpu(stack: Stack, host: Host) -> _GpuExposure:
    """How the GPU of ``stack`` reaches a container on ``host``."""
    if stack is Stack.CUDA:
        # The NVIDIA runtime mounts the driver, and on WSL2 (Docker Desktop included)
        # /dev/dxg and /usr/lib/wsl/lib too.
        return _GpuExposure(gpu_request=True)
    if not host.is_wsl:
        return _GpuExposure(devices=("/dev/kfd", "/dev/dri"), group_add=("video",))
    # ROCm on WSL2 has no /dev/kfd: HSA reaches the GPU through /dev/dxg and WSL's driver libraries.
    return _GpuExposure(
        devices=("/dev/dxg",),
        mounts=(Mount(WSL_DIR, WSL_DIR, read_only=True),),
        environment=(("HSA_ENABLE_DXG_DETECTION", "1"),),
    )


def container_spec(
    plan: Plan,
    image: str,
    name: str,
    scratch: Path,
    deps: Path,
    environ: Mapping[str, str],
    user: str,
    pytest_args: tuple[str, ...] = CELL_TESTS,
) -> ContainerSpec:
    """The container that runs ``plan``'s cells in ``image``: no Docker needed to compute it.

    The plan is the host's: pytest inside reads it from ``scratch`` (``PLAN_FILE``), so the
    container never plans again from what it sees of the machine. ``scratch`` is the only
    writable mount, and the host reads what is left there as untrusted (repro.container.run):
    an image that could write into the results tree could plant links the host then writes through.
    """
    pattern = ",".join(cell_plan.cell.id for cell_plan in plan.cells)
    script = f"python3 -m matrix env --out {SCRATCH}/env.json && exec " + shlex.join(
        [
            # The kit is mounted read-only: no cache of pytest's there, and the tiny model built in the container.
            *("python3", "-m", "pytest", "-p", "no:cacheprovider"),
            "--model-cache=/tmp/wslpin-kit-build",
            *cell_pytest_args(
                pattern, f"{SCRATCH}/junit.xml", f"{SCRATCH}/{name}.probe.json", f"{SCRATCH}/{PLAN_FILE}"
            ),
            *pytest_args,
        ]
    )
    stack = plan.here.stack
    gpu = _gpu(stack, plan.here.host) if plan.uses_gpu and stack is not None else _GpuExposure()
    cell_env: dict[str, str] = {}
    for cell_plan in plan.cells:
        cell_env |= cell_plan.cell.env()
    environment = {
        **{k: v for k, v in environ.items() if k.startswith("VLLM_")},
        **cell_env,
        # The image's own site-packages keep vLLM and torch; the kit and its few pure-Python
        # dependencies come first on the path.
        "PYTHONPATH": f"{KIT}:{DEPS}",
        "PYTHONDONTWRITEBYTECODE": "1",
        # The container runs as the host's user (so results stay theirs), who has no home in the image.
        "HOME": "/tmp",
        **dict(gpu.environment),
    }
    return ContainerSpec(
        image=image,
        command=("sh", "-c", script),
        mounts=(
            Mount(str(KIT_ROOT), KIT, read_only=True),
            Mount(str(deps), DEPS, read_only=True),
            Mount(str(scratch), SCRATCH, read_only=False),
            *gpu.mounts,
        ),
        environment=tuple(sorted(environment.items())),
        workdir=KIT,
        user=user,
        devices=gpu.devices,
        gpu_request=gpu.gpu_request,
        group_add=gpu.group_add,
    )
