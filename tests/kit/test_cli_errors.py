"""A newcomer's mistakes, through the real commands: one line that says what to do, the documented status,
and nothing written or overwritten."""

import json
import re
import subprocess
import tomllib
import venv

import pytest
from builders import one_error_line
from conftest import ROOT, run_module
from packaging.requirements import Requirement

BENCH = ("bench", "--cell", "cuda-wsl2new-v2-graph", "--server", "fake")
SPLIT_FILES = ("--plan", "plan.json", "--env", "env.json")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A Python with nothing installed, as on a fresh runner."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(where, with_pip=False)
    return str(where / "bin" / "python")


def declared_dependencies() -> set[str]:
    """The names of the packages pyproject.toml declares, base and extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    return {Requirement(spec).name.lower() for spec in specs}


@pytest.mark.parametrize(
    "args",
    [
        ("repro", "--help"),
        ("repro", *BENCH),
        ("matrix", "report", "tests/corpus", "--out", "{tmp}/report"),
        ("matrix", "split", "junit.xml", *SPLIT_FILES, "--out", "{tmp}/results"),
    ],
)
def test_a_python_without_the_kits_dependencies_says_how_to_get_them(bare_python, tmp_path, args):
    module, *rest = args
    done = subprocess.run(
        [bare_python, "-m", module, *(a.format(tmp=tmp_path) for a in rest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    line = one_error_line(done)
    # Which one is named first depends on import order; it must be one the kit declares.
    missing = re.search(r"has no module '([\w.]+)'", line)
    assert missing is not None and missing[1] in declared_dependencies(), line
    assert "pip install -e '.[test]'" in line and str(ROOT / ".nox" / "tests" / "bin" / "python") in line
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def env_record(tmp_path_factory):
    path = tmp_path_factory.mktemp("env") / "env.json"
    assert run_module("matrix", "env", "--out", str(path)).returncode == 0
    return path


@pytest.fixture(scope="module")
def plan(env_record):
    path = env_record.parent / "plan.json"
    assert run_module("matrix", "plan", "--env", str(env_record), "--out", str(path)).returncode == 0
    return path


def split(raw, env, plan, out) -> subprocess.CompletedProcess:
    return run_module("matrix", "split", str(raw), "--plan", str(plan), "--env", str(env), "--out", str(out))


@pytest.mark.reads_host
def test_split_of_a_file_that_does_not_exist_refuses_and_writes_nothing(tmp_path, env_record, plan):
    done = split(tmp_path / "absent.xml", env_record, plan, tmp_path)
    line = one_error_line(done)
    assert f"{tmp_path / 'absent.xml'} does not exist: give the JUnit file pytest wrote" in line
    assert "--crashed-if-missing" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.reads_host
def test_split_of_a_truncated_file_refuses_and_writes_nothing(tmp_path, env_record, plan):
    raw = tmp_path / "junit.xml"
    raw.write_text('<testsuites><testsuite name="pytest"><testcase classname="x" name')
    out = tmp_path / "results"
    line = one_error_line(split(raw, env_record, plan, out))
    assert f"{raw} is not a JUnit file (not well-formed XML: unclosed token: line 1" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "text, says",
    [
        ("{garbage", "cannot be read (not JSON: Expecting property name"),
        ("[" * 100_000, "cannot be read (nested deeper than 64 levels)"),
        ('{"schema": 1' + "0" * 5000 + "}", "cannot be read (a number of 5001 digits (at most 100))"),
        ('["a list"]', "is not an environment record (schema wslpin-kit.env/1)"),
        ('{"schema": "something/9"}', "is not an environment record (schema wslpin-kit.env/1)"),
    ],
)
@pytest.mark.reads_host
def test_split_with_a_garbage_env_record_refuses_and_writes_nothing(tmp_path, plan, text, says):
    env, out = tmp_path / "env.json", tmp_path / "results"
    env.write_text(text)
    line = one_error_line(split(tmp_path / "junit.xml", env, plan, out))
    assert f"--env {env} {says}" in line and f"`python -m matrix env --out {env}`" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (("--rounds", "0"), "--rounds 0: give a number above 0"),
        (("--rounds", "-1"), "--rounds -1: give a number above 0"),
        (("--requests", "0"), "--requests 0: give a number above 0"),
        (("--output-len", "0"), "--output-len 0: give a number above 0"),
        (("--request-timeout", "0"), "--request-timeout 0.0: give a number above 0"),
        (("--seed", "-1"), "--seed -1: give a number 0 or more"),
        (("--max-model-len", "64"), "--max-model-len 64 is shorter than a request (--input-len + --output-len = 256)"),
        (("--concurrency", "1,0"), "--concurrency '1,0': give positive whole numbers"),
    ],
)
def test_bench_refuses_numbers_it_cannot_run_with_before_writing(tmp_path, args, says):
    (tmp_path / "bench.json").write_text("the previous run's record")
    done = run_module("repro", *BENCH, "--out", str(tmp_path), *args)
    assert says in one_error_line(done)
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]
    assert (tmp_path / "bench.json").read_text() == "the previous run's record"


@pytest.mark.parametrize("under", ["", "sub"])
def test_report_into_a_file_refuses_and_leaves_it_alone(tmp_path, under):
    existing = tmp_path / "COMPATIBILITY.md"
    existing.write_text("last week's table")
    out = existing / under if under else existing
    line = one_error_line(run_module("matrix", "report", "tests/corpus", "--out", str(out)))
    assert f"--out {out}: a file is in the way" in line and "give a directory for the four outputs" in line
    assert [p.name for p in tmp_path.iterdir()] == ["COMPATIBILITY.md"]
    assert existing.read_text() == "last week's table"


def test_nox_names_a_bad_cells_pattern_in_one_line_and_reports_it(tmp_path):
    report = tmp_path / "nox.json"
    done = run_module("nox", "--no-venv", "--report", str(report), "-s", "wsl_cuda_graph", "--", "--cells", "nope")
    output = done.stdout + done.stderr
    # nox's status for any session that did not succeed is 1; it has no other.
    assert done.returncode == 1 and "Traceback" not in output
    (line,) = [line for line in output.splitlines() if "nope" in line]
    assert line.startswith("nox > Session wsl_cuda_graph aborted: --cells: bad cell id 'nope': expected stack-host")
    (session,) = json.loads(report.read_text())["sessions"]
    assert session["result"] == "aborted" and "bad cell id 'nope'" in session["reason"]
