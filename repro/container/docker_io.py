"""The Docker engine's side of a container run: client, image, create, start, follow, and why it ended.

The one module that talks to an engine (the ``docker`` SDK, imported where it is used so that
the rest of the kit loads without it). Everything that goes wrong (no engine, no image, no
device, the timeout, the OOM killer) comes back as a ``ContainerError`` with one line.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.container.errors import ContainerError
from repro.container.spec import ContainerSpec


@dataclass(frozen=True)
class Ran:
    """What came back from the engine."""

    image_digest: str
    exit_code: int | None  # None: killed by the kit, at the timeout or for ``overfilled``
    oom_killed: bool
    overfilled: str = ""  # what the container wrote past its writable mounts' bounds


def exit_reason(ran: Ran, timeout: float, log: Path) -> str:
    """Why a container left no result the kit takes, in one line."""
    if ran.overfilled:
        return f"the container wrote {ran.overfilled} into its scratch directory: killed and removed (log: {log})"
    if ran.exit_code is None:
        # What it left after its own end was not reached is no result (pytest's lines are in the log).
        return f"timed out after {timeout:g} s: the container was killed and removed (log: {log})"
    if ran.oom_killed:
        return f"the container was killed by the out-of-memory killer (exit {ran.exit_code}; log: {log})"
    return f"the container exited {ran.exit_code} without a JUnit file (log: {log})"


def _engine_where(environ: Mapping[str, str]) -> str:
    return environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _client(environ: Mapping[str, str]) -> Any:
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


def _image(client: Any, name: str) -> Any:
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


def _digest(image: Any) -> str:
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
            # Nor any privilege: with no capability, root in the image cannot make a device node in the host's
            # scratch, and no setuid file gives a process in it more than it started with.
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
        )
        try:
            _start(container, spec.image)
            return Ran(_digest(image), *_follow(container, log, timeout, spec))
        finally:
            container.remove(force=True)
    except docker.errors.DockerException as exc:
        raise ContainerError(f"the Docker engine failed: {_last_line(exc)}") from None
    finally:
        client.close()


def _start(container: Any, image: str) -> None:
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


# How often the kit looks at the clock and at what the container has written.
WATCH_INTERVAL = 0.2


def _usage(directories: tuple[str, ...], limit: int, entries: int) -> str:
    """What the container wrote past ``limit`` bytes (disk used) or ``entries`` names, or "" within both."""
    used, seen = 0, 0
    pending = list(directories)
    while pending:
        try:
            listing = list(os.scandir(pending.pop()))
        except OSError:
            continue  # removed meanwhile, or not the container's to list: nothing the host must hold
        for entry in listing:
            seen += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            used += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            if used > limit:
                return f"more than {limit / 2**20:g} MiB"
            if seen > entries:
                return f"more than {entries:,} files"
    return ""


def _follow(container: Any, log: Path, timeout: float, spec: ContainerSpec) -> tuple[int | None, bool, str]:
    """Stream the container's output until it exits; kill it at ``timeout``, or once it writes past its bounds."""
    import docker

    done = threading.Event()
    overfilled: list[str] = []
    killed = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not done.wait(min(WATCH_INTERVAL, max(0.0, deadline - time.monotonic()))):
            over = _usage(spec.writable, spec.writable_limit, spec.writable_entries)
            if over or time.monotonic() >= deadline:
                try:
                    container.kill()
                except docker.errors.APIError:
                    return  # it exited on its own meanwhile: not killed
                overfilled.append(over)
                killed.set()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with log.open("wb") as out:
            for chunk in container.logs(stream=True, follow=True):
                out.write(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        code = container.wait()["StatusCode"]
    finally:
        done.set()
        # The kill ends the log stream before ``killed`` is set: wait for the
        # watcher so a kill is never read as an exit of 137.
        watcher.join()
    container.reload()
    oom = bool(container.attrs["State"].get("OOMKilled"))
    return (None if killed.is_set() else code), oom, (overfilled[0] if killed.is_set() else "")
