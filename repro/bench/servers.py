"""One server process per arm: started, health-checked, watched and stopped by the kit.

A server that cannot start, dies, or never answers ends as a ``ServerError``
whose message is one line for a person plus the tail of the server's log.
While it serves, a sampler records the peak pinned host memory and GPU memory
of its whole process tree (vLLM's engine core is a child process).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

LOG_TAIL_LINES = 15
# Host memory that a GPU driver maps for the device is pinned memory: on Linux the
# NVIDIA driver maps it through its device files, on WSL2 through /dev/dxg.
DRIVER_MAPPINGS = re.compile(r"\s/dev/(nvidia|dxg|kfd)")


class ServerError(Exception):
    """A server that did not serve: the message says which arm, what happened and where its log is."""


@dataclass(frozen=True)
class ServerSpec:
    label: str  # the arm, as people read it: "pin=1 (round 2)"
    argv: tuple[str, ...]
    env: dict[str, str] = field(hash=False)
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in lines[-LOG_TAIL_LINES:])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def pinned_host_bytes(pid: int) -> int:
    """Page-locked (VmLck) plus driver-mapped resident memory of one process."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmLck:"):
                total += int(line.split()[1]) * 1024
        driver = False
        for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
            if line[:1].isdigit() or line[:1] in "abcdef":  # a mapping's header line
                driver = bool(DRIVER_MAPPINGS.search(line))
            elif driver and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    except OSError:
        pass  # the process ended between listing and reading
    return total


def gpu_bytes(pids: list[int]) -> int | None:
    """GPU memory held by these processes, from nvidia-smi; None where there is none to ask."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    done = subprocess.run(
        [smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    wanted = set(pids)
    total = 0
    for line in done.stdout.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and int(pid) in wanted and mib.strip().isdigit():
            total += int(mib) << 20
    return total


class MemorySampler:
    """Peak memory of a process tree, sampled in a thread while the arm runs."""

    # Seldom: nvidia-smi takes the better part of a second on WSL2, and the
    # sampler must not become load on the machine it measures.
    def __init__(self, pid: int, interval: float = 2.0) -> None:
        self.pid, self.interval = pid, interval
        self.peak_pinned_host = 0
        self.peak_gpu: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        tree = process_tree(self.pid)
        self.peak_pinned_host = max(self.peak_pinned_host, sum(pinned_host_bytes(p) for p in tree))
        gpu = gpu_bytes(tree)
        if gpu is not None:
            self.peak_gpu = max(self.peak_gpu or 0, gpu)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Server:
    spec: ServerSpec
    process: subprocess.Popen

    def gone(self) -> str | None:
        """Why the server is no longer there, or None while it runs."""
        try:
            # A server that just crashed may not have been reaped yet when its clients notice.
            code = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None
        return f"the server for {self.spec.label} died (exit code {code}); last lines of {self.spec.log}:\n" + log_tail(
            self.spec.log
        )


def _stop(process: subprocess.Popen, grace: float = 30) -> None:
    if process.poll() is not None:
        return
    # The whole group: vLLM's API server leaves an engine-core child holding the GPU otherwise.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def serving(spec: ServerSpec, start_timeout: float) -> Iterator[Server]:
    """A running, healthy server for the block; stopped (with its children) when the block ends."""
    if port_in_use(spec.port):
        raise ServerError(
            f"port {spec.port} on 127.0.0.1 is already in use, so {spec.label} cannot listen there; "
            "stop what holds it or leave --port out to let the kit pick a free one"
        )
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    with open(spec.log, "wb") as log:
        process = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=spec.env,
            start_new_session=True,
        )
    server = Server(spec, process)
    try:
        deadline = time.monotonic() + start_timeout
        while not _healthy(spec.base_url):
            if process.poll() is not None:
                raise ServerError(
                    f"the server for {spec.label} exited with code {process.returncode} before it was ready; "
                    f"last lines of {spec.log}:\n{log_tail(spec.log)}"
                )
            if time.monotonic() > deadline:
                raise ServerError(
                    f"the server for {spec.label} did not answer {spec.base_url}/health within {start_timeout:.0f} s "
                    f"(raise --start-timeout if it is still compiling); last lines of {spec.log}:\n{log_tail(spec.log)}"
                )
            time.sleep(0.2)
        yield server
    finally:
        _stop(process)


def python_module(module: str, *args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", module, *args)
