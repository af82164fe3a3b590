"""The fork-and-wait runner every gate evaluation goes through, with real child processes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from repro.isolation import run_isolated


def square(x):
    print(f"working on {x}")
    return x * x


def boom(_):
    raise RuntimeError("vLLM said no")


def hang(_):
    time.sleep(600)


def die(_):
    os._exit(7)


def test_answers_come_back_in_order_with_the_childs_output():
    outcomes = run_isolated(square, [3, 1, 2], timeout=60, jobs=2)
    assert [o.value for o in outcomes] == [9, 1, 4]
    assert all(o.ok for o in outcomes)
    assert "working on 3" in outcomes[0].log


def test_an_exception_is_a_result_with_its_traceback():
    (outcome,) = run_isolated(boom, [None], timeout=60)
    assert outcome.status == "error"
    assert "RuntimeError: vLLM said no" in outcome.detail


def test_a_hanging_child_is_killed_and_recorded_as_timeout():
    (outcome,) = run_isolated(hang, [None], timeout=1)
    assert outcome.status == "timeout"
    assert "killed after 1 s" in outcome.detail


def test_a_child_that_dies_silently_is_reported():
    (outcome,) = run_isolated(die, [None], timeout=60)
    assert outcome.status == "died"
    assert "status 7" in outcome.detail


# A session that waits on its children: an engine child through run_command, a gate child through run_isolated.
# Each child writes its pid, then sleeps far past the test.
SESSION = """
import os, sys, time
from repro.isolation import run_command, run_isolated
pids = sys.argv[2]
def sleeper(_):
    open(os.path.join(pids, "forked"), "w").write(str(os.getpid()))
    time.sleep(600)
if sys.argv[1] == "command":
    child = "import os, time; open(os.path.join(%r, 'command'), 'w').write(str(os.getpid())); time.sleep(600)" % pids
    run_command([sys.executable, "-c", child], dict(os.environ), timeout=600)
else:
    run_isolated(sleeper, [None], timeout=600)
"""


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has ended: where no init reaps it, it stays listed)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", ["command", "forked"])
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_a_child_never_outlives_its_session_however_it_is_stopped(tmp_path, how, stop):
    # Before, the engine's and probe's children survived a SIGTERM or SIGKILL of the session (a hung vLLM
    # engine would have kept the GPU): a killed session runs no cleanup of its own.
    session = subprocess.Popen([sys.executable, "-c", SESSION, how, str(tmp_path)], cwd=ROOT)
    pid_file = tmp_path / how
    for _ in range(600):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    child = int(pid_file.read_text())
    assert running(child)
    session.send_signal(stop)
    session.wait(timeout=60)
    for _ in range(100):
        if not running(child):
            break
        time.sleep(0.1)
    assert not running(child)
