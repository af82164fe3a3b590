"""Run cells inside a container image: the image brings vLLM and torch, the kit brings its tests.

``container_spec`` is a pure function of the cells' plans, the host, the paths and the
environment: what to mount, which GPU devices, which variables. ``run_in_image`` is the
one place that talks to a Docker engine (the ``docker`` SDK). Everything that goes wrong
there (no engine, no image, no device, the timeout, the OOM killer) comes back as one
line, and each cell's ``<cell-id>.xml`` then says it crashed, and why: a failure is a
result, never a traceback. The files go to ``results/<vLLM>/<group>@<image>/``
(matrix.layout), the image's own vLLM release, or ``unknown`` when it never reported it.

The container runs what a cell session runs (``matrix env``, then pytest on tests/cell);
the JUnit split runs here on the host, because only the host knows the image's digest
and the kit's commit (an image has no git), and because a container that never started
needs its results written all the same, by the same code (``write_cell_results``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import tomllib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from matrix.cells import Cell, Host, Stack
from matrix.host import classify, facts
from matrix.host.classify import DetectedHost
from matrix.host.facts import kit_commit, runner_name
from matrix.junit import RunInfo, write_cell_results
from matrix.layout import run_dir
from matrix.plan import CellPlan, cell_pytest_args, plan_cells

KIT_ROOT = Path(__file__).resolve().parent.parent
KIT = "/kit"
RESULTS = "/results"
DEPS = "/opt/wslpin-kit-deps"
WSL_DIR = "/usr/lib/wsl"
DEFAULT_TIMEOUT = 3600.0
# What pytest runs in the container unless told otherwise: the cell's tests, as a cell session runs them.
CELL_TESTS = ("tests/cell",)


class ContainerError(Exception):
    """Why the container gave no results, in one line for a person."""


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


def scratch_dir(results: Path, name: str) -> Path:
    """Where the container leaves its raw JUnit, environment record and probe metrics, until the split."""
    return results / f"{name}.container"


def _gpu(stack: Stack, host: Host) -> dict:
    """How the GPU of ``stack`` reaches a container on ``host``."""
    if stack is Stack.CUDA:
        # The NVIDIA runtime mounts the driver, and on WSL2 (Docker Desktop included)
        # /dev/dxg and /usr/lib/wsl/lib too.
        return {"gpu_request": True}
    if not host.is_wsl:
        return {"devices": ("/dev/kfd", "/dev/dri"), "group_add": ("video",)}
    # ROCm on WSL2 has no /dev/kfd: HSA reaches the GPU through /dev/dxg and WSL's driver libraries.
    return {
        "devices": ("/dev/dxg",),
        "mounts": (Mount(WSL_DIR, WSL_DIR, read_only=True),),
        "environment": (("HSA_ENABLE_DXG_DETECTION", "1"),),
    }


def container_spec(
    plans: list[CellPlan],
    here: DetectedHost,
    image: str,
    name: str,
    results: Path,
    deps: Path,
    environ: Mapping[str, str],
    user: str,
    pytest_args: tuple[str, ...] = CELL_TESTS,
) -> ContainerSpec:
    """The container that runs ``plans``' cells in ``image`` on ``here``: no Docker needed to compute it."""
    pattern = ",".join(plan.cell.id for plan in plans)
    raw = f"{RESULTS}/{scratch_dir(results, name).name}"
    script = f"python3 -m matrix env --out {raw}/env.json && exec " + shlex.join(
        [
            *("python3", "-m", "pytest"),
            # The kit is mounted read-only; the tiny model is built in the container.
            "--model-cache=/tmp/wslpin-kit-build",
            *cell_pytest_args(pattern, f"{raw}/junit.xml", f"{raw}/{name}.probe.json"),
            *pytest_args,
        ]
    )
    gpu = _gpu(here.stack, here.host) if any(plan.execution.uses_gpu for plan in plans) else {}
    cell_env: dict[str, str] = {}
    for plan in plans:
        cell_env |= plan.cell.env()
    environment = {
        **{k: v for k, v in environ.items() if k.startswith("VLLM_")},
        **cell_env,
        # The image's own site-packages keep vLLM and torch; the kit and its few pure-Python
        # dependencies come first on the path.
        "PYTHONPATH": f"{KIT}:{DEPS}",
        "PYTHONDONTWRITEBYTECODE": "1",
        # The container runs as the host's user (so results stay theirs), who has no home in the image.
        "HOME": "/tmp",
        **dict(gpu.get("environment", ())),
    }
    return ContainerSpec(
        image=image,
        command=("sh", "-c", script),
        mounts=(
            Mount(str(KIT_ROOT), KIT, read_only=True),
            Mount(str(deps), DEPS, read_only=True),
            Mount(str(results), RESULTS, read_only=False),
            *gpu.get("mounts", ()),
        ),
        environment=tuple(sorted(environment.items())),
        workdir=KIT,
        user=user,
        devices=gpu.get("devices", ()),
        gpu_request=gpu.get("gpu_request", False),
        group_add=gpu.get("group_add", ()),
    )


def _cell_requirements() -> list[Requirement]:
    project = tomllib.loads((KIT_ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["cell"]]]


def stage_dependencies(build: Path) -> Path:
    """Copy the kit's cell dependencies, and theirs, from this environment into a directory for the image.

    An image brings its own Python (vllm/vllm-openai: 3.12) and may have no network, so
    nothing is installed there: these packages are pure Python and work on any Python the
    kit supports. The directory is named by their versions and reused.
    """
    dists: dict[str, metadata.Distribution] = {}
    todo = _cell_requirements()
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in dists:
            continue
        try:
            dist = dists[key] = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise ContainerError(
                f"{req.name} is not installed in this Python: install the kit with `pip install -e '.[cell,container]'`"
            ) from None
        if "Root-Is-Purelib: true" not in (dist.read_text("WHEEL") or ""):
            raise ContainerError(f"{req.name} is not a pure-Python wheel here, so it cannot be mounted into an image")
        todo += [Requirement(r) for r in dist.requires or []]
    stamp = ",".join(sorted(f"{k}=={d.version}" for k, d in dists.items()))
    dest = build / "container-deps" / hashlib.sha256(stamp.encode()).hexdigest()[:12]
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".staging-"))
    for dist in dists.values():
        for file in dist.files or []:
            # Scripts live outside site-packages (../../bin); compiled bytecode is the image's business.
            if file.parts[0] == ".." or file.suffix == ".pyc":
                continue
            target = staging / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dist.locate_file(file), target)
    staging.chmod(0o755)  # mkdtemp's 0700 would hide it from a container user other than ours
    staging.rename(dest)
    return dest


@dataclass(frozen=True)
class Ran:
    """What came back from the engine."""

    image_digest: str
    exit_code: int | None  # None: killed by the timeout
    oom_killed: bool


def exit_reason(ran: Ran, timeout: float, log: Path) -> str:
    """Why a container left no JUnit file, in one line."""
    if ran.exit_code is None:
        return f"timed out after {timeout:g} s: the container was killed and removed (log: {log})"
    if ran.oom_killed:
        return f"the container was killed by the out-of-memory killer (exit {ran.exit_code}; log: {log})"
    return f"the container exited {ran.exit_code} without a JUnit file (log: {log})"


def _engine_where(environ: Mapping[str, str]) -> str:
    return environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _client(environ: Mapping[str, str]):
    import docker

    try:
        return docker.from_env(environment=dict(environ))
    except docker.errors.DockerException as exc:
        raise ContainerError(
            f"no Docker engine answers at {_engine_where(environ)} ({_last_line(exc)}): "
            "start Docker (Docker Desktop: enable WSL integration for this distro) or set DOCKER_HOST"
        ) from None


def _last_line(exc: Exception) -> str:
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


def _image(client, name: str):
    import docker

    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        pass
    print(f"{name} is not present here: pulling it", file=sys.stderr, flush=True)
    try:
        return client.images.pull(name)
    except docker.errors.DockerException as exc:
        raise ContainerError(
            f"image {name} is not present and could not be pulled ({_last_line(exc)}): "
            f"`docker pull {name}` where a registry is reachable, or build it, then run again"
        ) from None


def _digest(image) -> str:
    # A pulled image has a registry digest; one built or imported here only has its id.
    return (image.attrs.get("RepoDigests") or [image.id])[0]


def run_spec(spec: ContainerSpec, log: Path, timeout: float, environ: Mapping[str, str]) -> Ran:
    """Run ``spec``, its output streamed to ``log`` and to stdout; raises ContainerError with the reason."""
    import docker

    missing = [path for path in (*spec.devices, *(m.source for m in spec.mounts)) if not os.path.exists(path)]
    if missing:
        raise ContainerError(
            f"{', '.join(missing)} not present on this host: the cell needs this GPU's devices; "
            "check the driver (python3 -m matrix env) or run the cell where the GPU is"
        )
    client = _client(environ)
    try:
        image = _image(client, spec.image)
        container = client.containers.create(
            spec.image,
            list(spec.command),
            name=f"wslpin-{uuid.uuid4().hex[:12]}",
            labels={"wslpin-kit": "cell"},
            environment=dict(spec.environment),
            working_dir=spec.workdir,
            user=spec.user,
            mounts=[docker.types.Mount(m.target, m.source, type="bind", read_only=m.read_only) for m in spec.mounts],
            devices=[f"{d}:{d}:rwm" for d in spec.devices],
            device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if spec.gpu_request else [],
            group_add=list(spec.group_add),
            # A cell never needs a network (the tiny model is built locally); none proves it.
            network_mode="none",
        )
        try:
            _start(container, spec.image)
            return Ran(_digest(image), *_follow(container, log, timeout))
        finally:
            container.remove(force=True)
    except docker.errors.DockerException as exc:
        raise ContainerError(f"the Docker engine failed: {_last_line(exc)}") from None
    finally:
        client.close()


def _start(container, image: str) -> None:
    import docker

    try:
        container.start()
    except docker.errors.DockerException as exc:
        text = _last_line(exc)
        if "capabilities: [[gpu]]" in text:
            raise ContainerError(
                f"the Docker engine cannot give the container a GPU ({text}): install the NVIDIA "
                "Container Toolkit (Linux) or use Docker Desktop's WSL2 backend with a current NVIDIA driver"
            ) from None
        raise ContainerError(f"the Docker engine refused to start {image}: {text}") from None


def _follow(container, log: Path, timeout: float) -> tuple[int | None, bool]:
    """Stream the container's output until it exits, or kill it at ``timeout``."""
    import docker

    fired = threading.Event()

    def kill() -> None:
        try:
            container.kill()
            fired.set()
        except docker.errors.APIError:
            pass  # it exited on its own meanwhile: not a timeout

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        with log.open("wb") as out:
            for chunk in container.logs(stream=True, follow=True):
                out.write(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        code = container.wait()["StatusCode"]
    finally:
        timer.cancel()
    container.reload()
    return (None if fired.is_set() else code), bool(container.attrs["State"].get("OOMKilled"))


@dataclass(frozen=True)
class Outcome:
    written: list[Path]
    crashed: str  # "" when the container left its results


def _crashed_record() -> dict:
    """The record of a container that left none: the host it crashed on, without the host's packages.

    The packages were the image's, which never said which: the host's vLLM (a reused nox
    environment has one) must not pass for them and file the crash under a release it never ran.
    """
    record = {**facts.collect_environment(), "packages": {"torch": None, "vllm": None}}
    return {**record, "env_hash": classify.environment_hash(record)}


def run_in_image(
    cells: list[Cell],
    image: str,
    results: Path,
    group: str = "cell",
    timeout: float = DEFAULT_TIMEOUT,
    pytest_args: tuple[str, ...] = CELL_TESTS,
    environ: Mapping[str, str] | None = None,
    here: DetectedHost | None = None,
) -> Outcome:
    """Run ``cells`` inside ``image`` and write ``<cell-id>.xml`` for each, crashed or not.

    The files go to ``results/<vLLM>/<group>@<image>/``. ``here`` is detected when not given;
    tests describe a GPU host this machine cannot be.
    """
    environ = dict(os.environ if environ is None else environ)
    here = here or classify.detect(facts.collect_facts())
    name = cells[0].id if len(cells) == 1 else "container"
    results = results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    scratch = scratch_dir(results, name)
    log, probe_out = f"{name}.container.log", f"{name}.probe.json"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    ran, crashed = None, ""
    try:
        spec = container_spec(
            plan_cells(cells, here),
            here,
            image,
            name,
            results,
            stage_dependencies(KIT_ROOT / "build"),
            environ,
            f"{os.getuid()}:{os.getgid()}",
            pytest_args,
        )
        ran = run_spec(spec, scratch / log, timeout, environ)
    except ContainerError as exc:
        crashed = str(exc)
    try:
        env_file = scratch / "env.json"
        record = json.loads(env_file.read_text()) if env_file.exists() else _crashed_record()
        out = run_dir(results, record, group, image)
        if ran is not None and not (scratch / "junit.xml").exists():
            crashed = exit_reason(ran, timeout, out / log)
        digest = ran.image_digest if ran is not None else ""
        run = RunInfo(record, kit_commit(), runner_name(), started, image=image, image_digest=digest)
        plans = plan_cells(cells, classify.detected_from_record(record))
        if crashed:
            written = write_cell_results(plans, None, run, out, raw_missing=f"crashed in {image}: {crashed}")
        else:
            written = write_cell_results(plans, scratch / "junit.xml", run, out)
        for kept in (log, probe_out):
            # A file this run did not write must not stay beside its results as if it had.
            (out / kept).unlink(missing_ok=True)
            if (scratch / kept).exists():
                (scratch / kept).replace(out / kept)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Outcome(written, crashed)
