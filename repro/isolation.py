"""Run a function in a forked child, with a timeout, its output kept aside.

vLLM freezes what it decided about pinned memory at import time, so every
emulated host needs a process of its own. Forking from a parent that has
already imported torch (but never vLLM) gives each child a fresh vLLM import
without paying torch's import again. A child that hangs is killed; one that
dies without answering is reported with its exit status. Neither is a crash
of the kit: both are results.

A run with a budget (the offline GPU run, ``python -m repro.gpu_run``) sets
``WSLPIN_DEADLINE`` to the Unix time by which every child must have ended:
each child gets no longer than what is left, and one that would start after it
is not started and says so. The variable reaches every process of the run, so
no caller has to pass the deadline along.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from matrix.variables import DEADLINE

_LOG_TAIL = 6000
DEADLINE_VARIABLE = DEADLINE.name
# In every message about a child the deadline cut short: what it was to answer was never run to its end.
DEADLINE_CUT = "the run's deadline"
NOT_STARTED = f"not started: {DEADLINE_CUT} had passed"


def time_left(timeout: float) -> float:
    """``timeout``, or what is left before the run's deadline when that comes first (0 once it has passed)."""
    deadline = os.environ.get(DEADLINE_VARIABLE)
    if not deadline:
        return timeout
    return max(0.0, min(timeout, float(deadline) - time.time()))


def _killed(allowed: float, timeout: float, without: str) -> str:
    """Why a child was killed: its own timeout ran out, or the run's deadline came first."""
    cut = f": {DEADLINE_CUT} came first" if allowed < timeout else ""
    return f"killed after {round(allowed, 1):g} s without {without}{cut}"


@dataclass(frozen=True)
class Outcome:
    status: str  # "ok" | "error" | "timeout" | "died"
    value: Any = None
    detail: str = ""  # traceback, or why the child gave no answer
    log: str = ""  # the tail of what the child printed
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def timed_out(self) -> bool:
        return self.status == "timeout"


# Linux's prctl option by which a process asks for a signal when the thread that started it ends.
_PR_SET_PDEATHSIG = 1


@functools.cache
def _libc() -> ctypes.CDLL | None:
    # Loaded in the parent, before any fork: loading a library between fork and exec can deadlock.
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(parent: int) -> None:
    """In a child: be killed (SIGKILL) when ``parent`` ends, however it ends, SIGKILL included.

    A child holding vLLM (or an engine holding the GPU) must not outlive a session stopped from outside: a
    session's ``finally`` does not run when it is killed. Linux only; elsewhere nothing to ask.
    """
    libc = _libc()
    if libc is None or libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return
    if os.getppid() != parent:  # the parent ended before the request was made: nothing would signal us
        os._exit(1)


def _child(fn: Callable[[Any], Any], arg: Any, conn: Connection, log_path: str, parent: int) -> None:
    die_with_parent(parent)
    # vLLM logs to stdout; keep the child's output in a file the parent reads back.
    fd = os.open(log_path, os.O_WRONLY | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    # The parent's sys.stdout may be a capture object (pytest): write to the fds.
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    try:
        conn.send(("ok", fn(arg)))
    except BaseException:  # noqa: BLE001 - everything the child hits is a result
        conn.send(("error", traceback.format_exc()))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        conn.close()


def run_isolated(
    fn: Callable[[Any], Any],
    args: Sequence[Any],
    timeout: float,
    jobs: int | None = None,
) -> list[Outcome]:
    """Run ``fn(arg)`` for each arg in its own forked child, ``jobs`` at a time."""
    ctx = multiprocessing.get_context("fork")
    _libc()
    jobs = max(1, jobs or os.cpu_count() or 1)
    pending = list(enumerate(args))
    running: dict[int, tuple] = {}
    results: dict[int, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="wslpin-") as tmp:
        while pending or running:
            while pending and len(running) < jobs:
                index, arg = pending.pop(0)
                allowed = time_left(timeout)
                if allowed <= 0:
                    results[index] = Outcome("timeout", detail=NOT_STARTED)
                    continue
                log_path = os.path.join(tmp, f"{index}.log")
                open(log_path, "w").close()
                receiver, sender = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(fn, arg, sender, log_path, os.getpid()), daemon=True)
                proc.start()
                sender.close()
                running[index] = (proc, receiver, log_path, time.monotonic(), allowed)
            for index, (proc, receiver, log_path, started, allowed) in list(running.items()):
                elapsed = time.monotonic() - started
                if receiver.poll(0.05):
                    try:
                        kind, payload = receiver.recv()
                    except EOFError:
                        kind, payload = None, None
                    proc.join(timeout=10)
                    if kind == "ok":
                        outcome = Outcome("ok", value=payload)
                    elif kind == "error":
                        outcome = Outcome("error", detail=payload)
                    else:
                        outcome = Outcome("died", detail=_exit_reason(proc))
                elif elapsed > allowed:
                    proc.kill()
                    proc.join()
                    outcome = Outcome("timeout", detail=_killed(allowed, timeout, "an answer"))
                elif not proc.is_alive() and not receiver.poll(0):
                    outcome = Outcome("died", detail=_exit_reason(proc))
                else:
                    continue
                with open(log_path, errors="replace") as f:
                    log = f.read()[-_LOG_TAIL:]
                receiver.close()
                results[index] = Outcome(outcome.status, outcome.value, outcome.detail, log, round(elapsed, 2))
                del running[index]
    return [results[i] for i in range(len(args))]


def _exit_reason(proc: multiprocessing.process.BaseProcess) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        return f"child died from signal {signal.Signals(-code).name}"
    return f"child exited with status {code} without an answer"


@dataclass(frozen=True)
class CommandOutcome:
    returncode: int | None  # None: killed by the timeout
    output: str  # the tail of stdout and stderr together
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


@dataclass(frozen=True)
class ChildAnswer:
    """What a child that writes its answer as JSON left behind."""

    answer: dict | None  # None: it wrote nothing (timed out, or died first)
    run: CommandOutcome

    @property
    def no_answer(self) -> str:
        """Why there is no answer, for a person."""
        if self.run.timed_out:
            return self.run.output
        return f"exited {self.run.returncode} without a result\n{self.run.output}"


def run_json_child(argv: Sequence[str], env: dict[str, str], timeout: float) -> ChildAnswer:
    """Run ``argv + [RESULT.json]`` as a fresh process and read the JSON it wrote there."""
    with tempfile.TemporaryDirectory(prefix="wslpin-child-") as tmp:
        result = os.path.join(tmp, "result.json")
        done = run_command([*argv, result], env, timeout)
        try:
            with open(result) as f:
                return ChildAnswer(json.load(f), done)
        except (FileNotFoundError, json.JSONDecodeError):
            # Nothing written, or a result cut off mid-write by the kill: no answer either way.
            return ChildAnswer(None, done)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended by itself meanwhile
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_command(argv: Sequence[str], env: dict[str, str], timeout: float) -> CommandOutcome:
    """Run a fresh process (CUDA cannot be forked), killing its whole group after ``timeout``."""
    allowed = time_left(timeout)
    if allowed <= 0:
        return CommandOutcome(None, NOT_STARTED, 0.0)
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        parent = os.getpid()
        _libc()
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            # Between fork and exec: the kernel keeps the request across exec.
            preexec_fn=lambda: die_with_parent(parent),
        )
        try:
            code: int | None = proc.wait(timeout=allowed)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
        except BaseException:
            # Interrupted (a run stopped from outside): the child is in a session of its own and would outlive us.
            _kill_group(proc)
            raise
        out.seek(0)
        text = out.read().decode(errors="replace")[-_LOG_TAIL:]
    if code is None:
        text += "\n" + _killed(allowed, timeout, "finishing")
    return CommandOutcome(code, text, round(time.monotonic() - started, 2))
