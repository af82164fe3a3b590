"""A Docker engine and a small image with vLLM, made here, for ``nox -s docker_smoke``.

This machine has no systemd and no Docker Hub: the engine is Debian's ``dockerd``,
started with all its state in a temporary directory and stopped by its PID; the
image is Debian bookworm from ``debootstrap`` (the machine's own apt mirror) with the
gate-only install in its system Python, loaded with ``docker import``.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

SUITE = "bookworm"  # its python3 is 3.11: the wheels installed into it are the session's (cp311)
DEFAULT_SOCKET = "/var/run/docker.sock"
APT_SOURCES = Path("/etc/apt")


def engine_answers(docker_host: str) -> bool:
    """Whether a Docker engine listens on this ``unix://`` address (the only kind this session starts)."""
    path = docker_host.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(2)
        try:
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b"OK" in sock.recv(4096)
        except OSError:
            return False


def existing_engine(environ: dict[str, str]) -> str | None:
    """DOCKER_HOST or the default socket, where an engine answers."""
    where = environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    return where if where.startswith("unix://") and engine_answers(where) else None


def apt_install(*packages: str, run: Callable[..., object]) -> None:
    """Debian packages whose commands are missing (root only: the CI machine is root)."""
    wanted = {"docker.io": "dockerd", "debootstrap": "debootstrap"}
    missing = [p for p in packages if shutil.which(wanted[p]) is None]
    if missing:
        run("apt-get", "update", "-qq")
        run("apt-get", "install", "-y", "-qq", *missing, env={"DEBIAN_FRONTEND": "noninteractive"}, silent=True)


@contextlib.contextmanager
def private_engine(state: Path, log: Path, wait_s: float = 60) -> Iterator[str]:
    """``dockerd`` with its data, exec root, socket and pidfile under ``state``; stopped by its PID on exit.

    No bridge and no iptables rules: the containers run without a network, and the
    host's firewall and links stay as they were.
    """
    sock = state / "docker.sock"
    argv = [
        "dockerd",
        f"--data-root={state / 'data'}",
        f"--exec-root={state / 'exec'}",
        f"--pidfile={state / 'docker.pid'}",
        f"--host=unix://{sock}",
        "--bridge=none",
        "--iptables=false",
    ]
    with log.open("wb") as out:
        daemon = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + wait_s
        while not engine_answers(f"unix://{sock}"):
            if daemon.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"dockerd did not answer on {sock} (see {log}): " + " | ".join(tail))
            time.sleep(0.5)
        yield f"unix://{sock}"
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        _unmount_below(state)


def _unmount_below(path: Path) -> None:
    """Unmount what dockerd left mounted in its state: after a host-network container, its
    namespace (exec/netns/default) stays mounted and the directory cannot be deleted."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{path}/")), reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False)


def debian_mirror(apt: Path = APT_SOURCES) -> str:
    """The Debian archive this machine's apt uses (never a hard-coded host)."""
    lines = (apt / "sources.list").read_text().splitlines() if (apt / "sources.list").exists() else []
    for line in lines:
        parts = line.split("#")[0].split()
        if parts[:1] == ["deb"]:
            uri = next(p for p in parts[1:] if not p.startswith("["))
            if not uri.rstrip("/").endswith("-security"):
                return uri
    for sources in sorted((apt / "sources.list.d").glob("*.sources")):
        for stanza in sources.read_text().split("\n\n"):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.MULTILINE))
            if fields.get("Types", "").split()[:1] == ["deb"] and "URIs" in fields:
                uri = fields["URIs"].split()[0]
                if not uri.rstrip("/").endswith("-security"):
                    return uri
    raise RuntimeError(f"no Debian archive in {apt}/sources.list or {apt}/sources.list.d/*.sources")


def image_cache(environ: Mapping[str, str], name: str) -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/wslpin-kit/images/<name>``: outside any clone, so a fresh one reuses it."""
    base = Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "wslpin-kit" / "images" / name


def rootfs_key(*recipe: str) -> str:
    """The name of a rootfs made of ``recipe``, this module's code and the mirror: a change of any makes another."""
    made_by = inspect.getsource(rootfs_tarball)
    return hashlib.sha256("\n".join((SUITE, debian_mirror(), made_by, *recipe)).encode()).hexdigest()[:12]


def rootfs_tarball(
    cache: Path,
    key: str,
    run: Callable[..., object],
    packages: tuple[str, ...] = ("python3",),
    install: Callable[[Path], None] | None = None,
) -> Path:
    """``cache/rootfs-<key>.tar``: debootstrap's minimal bookworm with ``packages``, plus ``install(site_packages)``.

    Made once per key and kept; making one removes the others of ``cache`` (a tarball is GBs, and an old key's
    is never asked for again).
    """
    tarball = cache / f"rootfs-{key}.tar"
    if tarball.exists():
        return tarball
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".rootfs-") as tmp:
        root = Path(tmp) / "root"
        include = f"--include={','.join(packages)}"
        run("debootstrap", "--variant=minbase", include, SUITE, str(root), debian_mirror(), silent=True)
        if install is not None:
            # Debian's python3 reads /usr/local/lib/python3.X/dist-packages: vLLM in the image's
            # system Python, the way vllm/vllm-openai has it.
            site = root / "usr/local/lib/python3.11/dist-packages"
            install(site)
            linked = next((f for f in site.rglob("*") if f.is_file() and f.stat().st_nlink > 1), None)
            if linked is not None:
                raise RuntimeError(f"{linked} is a hard link: the rootfs must hold copies (set UV_LINK_MODE=copy)")
        partial = cache / f".rootfs-{key}.tar.partial"
        run("tar", "-C", str(root), "-cf", str(partial), ".")
        partial.rename(tarball)
    for other in cache.glob("rootfs-*.tar"):
        if other != tarball:
            other.unlink()
    return tarball


def load_image(docker_host: str, tarball: Path, tag: str, run: Callable[..., object]) -> str:
    """``docker import`` the rootfs as ``tag`` unless the engine already has it."""
    inspect = ["docker", "--host", docker_host, "image", "inspect", tag]
    if subprocess.run(inspect, capture_output=True, check=False).returncode != 0:
        run("docker", "--host", docker_host, "import", str(tarball), tag)
    return tag
