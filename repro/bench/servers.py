"""One server process per arm: started, health-checked, watched and stopped by the kit.

A server that cannot start, dies, or never answers ends as a ``ServerError``
whose message is one line for a person plus the tail of the server's log.
Each server is the leader of its own process group (vLLM's API server starts
an engine-core child, which starts workers): stopping a server means stopping
that whole group and waiting until none of it is left. While it serves, a
sampler records the peak memory of the group.

The bench's servers never outlive it: SIGTERM, SIGHUP (a CI cancel, a closed
terminal) and SIGINT become a ``Cancelled`` exception in the bench, which
stops the running server on its way out.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from matrix.host import reads

LOG_TAIL_LINES = 15
CANCEL_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# What a group gets after SIGTERM before SIGKILL: vLLM's API server shuts its engine down gracefully.
STOP_GRACE_S = 30.0
# A GPU's memory in use may wander this much while nothing of the bench runs (a desktop on WSL2).
GPU_MEMORY_SLACK = 256 << 20
GPU_RELEASE_TIMEOUT_S = 120.0


class ServerError(Exception):
    """A server that did not serve: the message says which arm, what happened and where its log is."""


class Cancelled(KeyboardInterrupt):
    """The bench was told to stop by a signal: its servers are stopped, what it measured is kept.

    A KeyboardInterrupt, like SIGINT's own: asyncio lets only those (and SystemExit) out of
    its callbacks, so a signal that lands while the client's event loop runs still stops the bench.
    """


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


class _NotFollowed(urllib.request.HTTPRedirectHandler):
    """A redirect is the server's answer (an HTTPError), never a request sent to wherever it points."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NotFollowed)


def ask(url: str, timeout: float, method: str = "GET") -> int:
    """The server's HTTP status for one request to ``url``, redirects not followed; OSError if it gives none."""
    with _OPENER.open(urllib.request.Request(url, method=method), timeout=timeout) as response:
        return response.status


def _healthy(url: str) -> bool:
    try:
        return ask(f"{url}/health", timeout=2) == 200
    except (urllib.error.URLError, OSError):
        return False


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group, from /proc (zombies are gone: they hold nothing)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name in parentheses may hold spaces: the fields start after its last ")".
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended between listing and reading
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


@dataclass(frozen=True)
class ProcessMemory:
    rss: int  # resident bytes
    pinned: int  # page-locked (mlock) plus pinned (pin_user_pages) bytes


def process_memory(pid: int) -> ProcessMemory:
    """One process's memory from /proc/<pid>/status.

    Its counters are read without the process's memory-map lock (unlike smaps or
    maps, which walk every mapping under it and would stall the engine's own
    allocations while the benchmark measures their latency).
    """
    values = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmLck", "VmPin"):
                values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass  # the process ended between listing and reading
    return ProcessMemory(values.get("VmRSS", 0), values.get("VmLck", 0) + values.get("VmPin", 0))


def gpu_bytes(pids: list[int]) -> int | None:
    """GPU memory held by these processes, from nvidia-smi; None where there is none to ask."""
    reads.record("gpu_bytes: nvidia-smi")
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
    """Peak memory of a server's process group, sampled in a thread while the arm runs."""

    # Seldom: nvidia-smi takes the better part of a second on WSL2, and the
    # sampler must not become load on the machine it measures.
    def __init__(self, pgid: int, interval: float = 2.0) -> None:
        self.pgid, self.interval = pgid, interval
        self.peak_rss = 0
        self.peak_pinned_host = 0
        self.peak_gpu: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        members = group_members(self.pgid)
        memory = [process_memory(pid) for pid in members]
        self.peak_rss = max(self.peak_rss, sum(m.rss for m in memory))
        self.peak_pinned_host = max(self.peak_pinned_host, sum(m.pinned for m in memory))
        gpu = gpu_bytes(members)
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


GpuMemoryReader = Callable[[], int]


def gpu_memory_reader() -> tuple[GpuMemoryReader | None, str]:
    """A reader of the memory in use on every GPU (NVML), or None and why there is none.

    nvidia-ml-py's binding (the bench extra), not vLLM's copy of it: importing that would import
    vLLM and torch into the bench's own process.
    """
    reads.record("gpu_memory_reader: NVML")
    try:
        import pynvml
    except ImportError:
        return None, "not checked: pynvml (nvidia-ml-py) is not importable in the bench's Python"
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as exc:
        return None, f"not checked: NVML did not answer ({exc})"

    def used() -> int:
        try:
            return sum(int(pynvml.nvmlDeviceGetMemoryInfo(h).used) for h in handles)
        except pynvml.NVMLError as exc:
            raise ServerError(f"NVML stopped answering while the bench waited for GPU memory: {exc}") from None

    return used, f"checked with NVML on {len(handles)} GPU(s)"


@dataclass(frozen=True)
class GpuRelease:
    """How a stopped server's GPU memory came back before the next arm started."""

    seconds: float
    above_baseline: int  # bytes still in use beyond the baseline when the wait ended

    @property
    def returned(self) -> bool:
        return self.above_baseline <= GPU_MEMORY_SLACK


def wait_for_gpu_memory(
    read: GpuMemoryReader,
    baseline: int,
    timeout: float = GPU_RELEASE_TIMEOUT_S,
    interval: float = 0.5,
) -> GpuRelease:
    """Wait until the GPUs hold no more than ``baseline`` (plus a slack) again, or ``timeout`` passes."""
    started = time.monotonic()
    while True:
        above = max(0, read() - baseline)
        waited = time.monotonic() - started
        if above <= GPU_MEMORY_SLACK or waited >= timeout:
            return GpuRelease(round(waited, 2), above)
        time.sleep(interval)


@dataclass
class Server:
    spec: ServerSpec
    process: subprocess.Popen
    start_s: float = 0.0  # from the start of its process to its first healthy answer

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


PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_the_bench() -> None:
    """In a server's process before it runs: the kernel sends it SIGTERM if the bench dies without a word.

    For a SIGKILL, which no handler sees; vLLM's API server then takes its engine down with it.
    """
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_gone(process: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process.poll() is None or group_members(process.pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def stop_group(process: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
    """Stop a server's whole process group and wait until none of it is left.

    The leader may be gone already while its engine core still holds the GPU, so
    the group is always signalled and waited for, never only the leader.
    """
    with _signals_deferred():
        _signal_group(process.pid, signal.SIGTERM)
        if not _group_gone(process, grace):
            _signal_group(process.pid, signal.SIGKILL)
            _group_gone(process, grace)
        process.wait()


SignalHandler = Callable[[int, FrameType | None], Any] | int | None


def _restore(handlers: dict[signal.Signals, SignalHandler]) -> None:
    for sig, handler in handlers.items():
        # None: a handler Python did not install; the default is the honest way back.
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)


class Cancellation:
    """Set by a cancelling signal. Raised as ``Cancelled`` where the signal lands, and checked again
    where the bench would go on, for the rare place that swallows what a signal raises (a C
    extension's import, say)."""

    def __init__(self) -> None:
        self.reason = ""

    def requested(self) -> bool:
        return bool(self.reason)

    def check(self) -> None:
        if self.reason:
            raise Cancelled(self.reason)


@contextlib.contextmanager
def cancelled_by_signals() -> Iterator[Cancellation]:
    """Within the block, SIGTERM, SIGHUP and SIGINT raise ``Cancelled`` (main thread only, as Python allows)."""
    cancellation = Cancellation()

    def cancel(signum: int, frame: FrameType | None) -> None:
        cancellation.reason = f"the benchmark was stopped by {signal.Signals(signum).name}"
        raise Cancelled(cancellation.reason)

    if threading.current_thread() is not threading.main_thread():
        yield cancellation
        return
    previous = {sig: signal.signal(sig, cancel) for sig in CANCEL_SIGNALS}
    try:
        yield cancellation
    finally:
        _restore(previous)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold back the cancelling signals while a server is started or stopped, then deliver them.

    A ``Cancelled`` raised halfway through starting or stopping would leave a server
    that nobody stops: it is raised once the block is done instead.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in CANCEL_SIGNALS}
    try:
        yield
    finally:
        _restore(previous)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


@contextlib.contextmanager
def serving(spec: ServerSpec, start_timeout: float) -> Iterator[Server]:
    """A running, healthy server for the block; its whole process group stopped when the block ends."""
    if port_in_use(spec.port):
        raise ServerError(
            f"port {spec.port} on 127.0.0.1 is already in use, so {spec.label} cannot listen there; "
            "stop what holds it or leave --port out to let the kit pick a free one"
        )
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    process = None
    try:
        with _signals_deferred(), open(spec.log, "wb") as log:
            started = time.monotonic()
            process = subprocess.Popen(
                spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=spec.env,
                start_new_session=True,
                # Safe here: no other thread of the bench runs while a server starts.
                preexec_fn=_die_with_the_bench,
            )
        deadline = started + start_timeout
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
        yield Server(spec, process, round(time.monotonic() - started, 2))
    finally:
        if process is not None:
            stop_group(process)


def python_module(module: str, *args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", module, *args)
