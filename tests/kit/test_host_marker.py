"""The reads_host mark: a test that reads the machine without it fails, and the host variants run only the marked.

The check runs in a pytest run of its own (the kit's plugin, ``-p host_reads``) over a few tests written here;
the variants' selection is the noxfile's own, through ``nox -s tests --no-install`` (the session's venv exists
wherever this suite runs through nox).
"""

from __future__ import annotations

import os
from xml.etree import ElementTree

import pytest
from conftest import ROOT, run_module

TESTS = """
import subprocess
import sys

import pytest

from matrix.host.facts import collect_facts


def test_unmarked_reader():
    collect_facts()


@pytest.mark.reads_host
def test_marked_reader():
    collect_facts()


def test_not_a_reader():
    assert sum([1, 2]) == 3


def test_reader_in_a_nested_pytest_run(tmp_path):
    # Like a kit test that runs tests/cell: the inner run has no plugin, its own PYTEST_CURRENT_TEST.
    (tmp_path / "test_inner.py").write_text("from matrix.host.facts import collect_facts\\n"
                                            "def test_inner():\\n    collect_facts()\\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)])
    assert done.returncode == 0


@pytest.fixture(scope="module")
def facts():
    return collect_facts()


def test_first_through_a_shared_fixture(facts):
    assert facts.uname


def test_second_through_a_shared_fixture(facts):
    assert facts.uname
"""


@pytest.fixture(scope="module", params=[(), ("-n", "2", "--dist", "loadfile")], ids=["one process", "workers"])
def outcomes(request, tmp_path_factory) -> dict[str, str]:
    """Each test of TESTS -> "passed", or what its failure or error says; run with the kit's plugin, in one
    process and in pytest-xdist's workers as `nox -s tests` runs the suite."""
    tmp = tmp_path_factory.mktemp("marker")
    (tmp / "pytest.ini").write_text("[pytest]\n")  # this directory is the run's root, not the kit's
    (tmp / "test_probe.py").write_text(TESTS)
    path = os.pathsep.join([str(ROOT / "tests" / "kit"), str(ROOT)])
    junit = tmp / "junit.xml"
    run_module(
        "pytest",
        "-p",
        "host_reads",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *request.param,
        str(tmp),
        env={"PYTHONPATH": path},
    )
    found = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        found[case.get("name")] = "passed" if problem is None else problem.get("message", "")
    return found


def test_an_unmarked_test_that_reads_the_machine_fails_saying_to_add_the_mark(outcomes):
    assert outcomes["test_unmarked_reader"] == (
        "test_probe.py::test_unmarked_reader read the machine (collect_facts: uname, environment, /proc, /dev, "
        "GPU and WSL tools, torch and vLLM metadata) without the reads_host mark: add @pytest.mark.reads_host "
        "(or a module's pytestmark) so the host variants of `nox -s tests` run it"
    )


def test_a_marked_reader_and_an_unmarked_test_that_reads_nothing_pass(outcomes):
    assert outcomes["test_marked_reader"] == outcomes["test_not_a_reader"] == "passed"


def test_a_read_in_a_nested_pytest_run_is_the_outer_tests(outcomes):
    assert outcomes["test_reader_in_a_nested_pytest_run"].startswith(
        "test_probe.py::test_reader_in_a_nested_pytest_run read the machine (collect_facts"
    )


def test_every_test_using_a_shared_fixture_that_read_the_machine_fails(outcomes):
    for test in ("test_first_through_a_shared_fixture", "test_second_through_a_shared_fixture"):
        assert outcomes[test].startswith(
            f"test_probe.py::{test} read the machine (through the fixture test_probe.py::facts) without the"
        )


HOSTINFO = "tests/kit/test_hostinfo.py"


def _collected(*args: str) -> set[str]:
    """The test ids ``nox -s tests -- ARGS --collect-only -q`` collects (the venv as it is: nothing installed)."""
    done = run_module("nox", "-s", "tests", "--no-install", "--", *args, "--collect-only", "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_host_variants_collect_only_the_marked_tests_unless_told_otherwise():
    marked = _collected("--as-host", "wsl2new")
    every = _collected("--stand-in-gpu", "-m", "")  # the user's own -m selects instead of the variant's
    assert f"{HOSTINFO}::test_env_command_on_this_machine" in marked  # a reader of the machine, marked
    assert f"{HOSTINFO}::test_gpu_stack_from_device_evidence" in every - marked  # facts the test writes
    assert marked < every
