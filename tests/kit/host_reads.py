"""The ``reads_host`` mark, and the check that no test reads the machine without it.

The host variants of ``nox -s tests`` (``--as-host``, ``--stand-in-gpu``) run only the marked tests, so a
test whose outcome depends on the machine but lacks the mark would never meet another host. This plugin
(loaded by the kit's conftest; ``-p host_reads`` with tests/kit on the path elsewhere) names a log for the
session in ``matrix.host.reads.LOG``, which every child process inherits, and the test being run in
``matrix.host.reads.TEST``; ``matrix.host.reads.record`` appends to it at each read of the machine. After
each phase of a test, an unmarked test that read the machine, or that uses a shared fixture that did,
fails with one line saying to add the mark.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from matrix.host import reads

MARK = "reads_host"
# What the log's lines name while a fixture wider than one test sets up: every test using it depends on its reads.
_FIXTURE = "fixture "


class _Log:
    """The session's log, read on from where the last check stopped."""

    def __init__(self) -> None:
        fd, name = tempfile.mkstemp(prefix="wslpin-host-reads-", suffix=".log")
        os.close(fd)
        self.path = Path(name)
        self.offset = 0
        self.reads: dict[str, list[str]] = {}  # test id or fixture key -> what it read

    def read_on(self) -> None:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            new = log.read()
        complete = new[: new.rfind(b"\n") + 1]  # a line a child is still writing waits for the next check
        self.offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            test, _, what = line.partition("\t")
            self.reads.setdefault(test, []).append(what)


_STATE = pytest.StashKey[_Log]()


def _fixture_key(fixturedef: pytest.FixtureDef) -> str:
    return f"{_FIXTURE}{fixturedef.baseid}::{fixturedef.argname}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}: its outcome depends on the machine it runs on (uname, /proc, /dev, WSL's variables, GPU tools, "
        "vLLM without a presented host); `nox -s tests -- --as-host/--stand-in-gpu` runs only these",
    )
    log = config.stash[_STATE] = _Log()
    # Children inherit the variable; a nested run of this plugin names a log of its own.
    config.add_cleanup(log.path.unlink)
    previous = os.environ.get(reads.LOG)
    os.environ[reads.LOG] = str(log.path)
    config.add_cleanup(lambda: _restore(reads.LOG, previous))


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextlib.contextmanager
def _naming(reader: str) -> Iterator[None]:
    """Reads of the machine meanwhile, in this process and its children, are ``reader``'s."""
    previous = os.environ.get(reads.TEST)
    os.environ[reads.TEST] = reader
    try:
        yield
    finally:
        _restore(reads.TEST, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    with _naming(item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef) -> Generator[None, object, object]:
    if fixturedef.scope == "function":
        return (yield)  # its reads are its test's
    with _naming(_fixture_key(fixturedef)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    log = item.config.stash[_STATE]
    log.read_on()
    read = log.reads.pop(item.nodeid, [])
    # A shared fixture's reads count once per test using it: at its call, or at a setup that went no further.
    ends = call.when == "call" or (call.when == "setup" and not report.passed)
    shared = [key[len(_FIXTURE) :] for key in log.reads if ends and _uses(item, key)]
    if (read or shared) and item.get_closest_marker(MARK) is None and not report.failed:
        what = "; ".join(dict.fromkeys(read)) or f"through the fixture {', '.join(shared)}"
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} read the machine ({what}) without the {MARK} mark: "
            f"add @pytest.mark.{MARK} (or a module's pytestmark) so the host variants of `nox -s tests` run it"
        )
    return report


def _uses(item: pytest.Item, key: str) -> bool:
    """Whether ``item`` uses the fixture that ``key`` names (as ``_fixture_key`` wrote it)."""
    if not key.startswith(_FIXTURE):
        return False
    baseid, _, argname = key[len(_FIXTURE) :].rpartition("::")
    return argname in item.fixturenames and item.nodeid.startswith(baseid)
