"""The doctor, ``env`` and ``plan`` on the system Pythons that people and self-hosted runners have: 3.8 and later;
the other commands and ``python -m repro`` there, and the doctor on 3.7 and 2.7, each refused in one line naming
the Python needed.

Ubuntu 20.04 ships Python 3.8 and 22.04 ships 3.10, the distributions most WSL2 users run, and a runner's
first step (``plan --require native --misrouted-out``) runs on its system Python before any venv exists. Each
command runs here as a process of that Python from the kit's root, with ``-E -s -S``: no PYTHONPATH, no user
site, no site-packages at all, so only the standard library and the kit itself can be imported. A version not
installed here is skipped, naming it; the Python running the tests counts for its own version, so that
"standard library only" is checked on any machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple
from xml.etree import ElementTree

import pytest
from builders import clean_env
from conftest import ROOT

from matrix import __version__
from matrix.cells import CELLS
from matrix.host.classify import ENV_SCHEMA
from matrix.plan import PLAN_SCHEMA
from matrix.questions import Question

VERSIONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13")
# No PYTHONPATH (-E), no user site (-s), no site module, hence no site-packages (-S); no bytecode left in the kit (-B).
STDLIB_ONLY = ("-E", "-s", "-S", "-B")
KERNEL = "5.15.167.4-microsoft-standard-WSL2"
ASKED = ("--kernel", KERNEL, "--stack", "cuda", "--vllm", "0.33.0", "--runner", "v2", "--mode", "graph")
ASKED_CELL = "cuda-wsl2new-v2-graph"

_SAYS_VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"
_CAN_IMPORT = (
    "import importlib.util, json, sys\n"
    "print(json.dumps({'packages_dirs': [p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))],"
    " 'packaging': importlib.util.find_spec('packaging') is not None}))\n"
)


def _is(python: str, version: str) -> bool:
    """Whether ``python`` runs (a pyenv shim for a version not selected does not) and is ``version``."""
    try:
        done = subprocess.run([python, "-c", _SAYS_VERSION], capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def find_python(version: str) -> str | None:
    """A Python ``version`` here: this one, a ``pythonX.Y`` on PATH, else pyenv's newest ``X.Y.*``."""
    candidates = [sys.executable, shutil.which(f"python{version}")]
    installed = pyenv_root().glob(f"versions/{version}.*/bin/python")
    candidates += sorted((str(p) for p in installed), key=lambda p: [int(n) for n in re.findall(r"\d+", p)])[::-1]
    return next((c for c in candidates if c and _is(c, version)), None)


class Python(NamedTuple):
    version: str  # "3.10"
    path: str


def python_or_skip(version: str) -> str:
    """A Python ``version`` here, or the test skipped, naming where it was looked for."""
    found = find_python(version)
    if found is None:
        pytest.skip(
            f"no Python {version} here: no python{version} on PATH that runs, no {pyenv_root()}/versions/{version}.*"
        )
    return found


@pytest.fixture(scope="module", params=VERSIONS)
def python(request) -> Python:
    version = request.param
    found = python_or_skip(version)
    done = subprocess.run([found, *STDLIB_ONLY, "-c", _CAN_IMPORT], capture_output=True, text=True, check=True)
    # The premise: nothing installed can be imported, so only the standard library can make the commands work.
    assert json.loads(done.stdout) == {"packages_dirs": [], "packaging": False}, done.stdout
    return Python(version, found)


def matrix(python: Python, *args: str) -> subprocess.CompletedProcess:
    return bare_module(python, "matrix", *args)


def bare_module(python: Python, module: str, *args: str) -> subprocess.CompletedProcess:
    """``python -E -s -S -B -m MODULE ARGS`` from the kit's root, without the variables the doctor reads."""
    return subprocess.run(
        [python.path, *STDLIB_ONLY, "-m", module, *args],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def succeeded(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.reads_host
def test_the_doctor_answers_for_the_set_up_asked(python):
    text = succeeded(matrix(python, "doctor", *ASKED))
    assert f"kernel     {KERNEL}: WSL2 kernel ≥ 4.19.121 (--kernel)" in text
    assert f"cell       {ASKED_CELL}, vLLM " in text
    got = json.loads(succeeded(matrix(python, "doctor", "--json", *ASKED)))
    assert got["cell"] == ASKED_CELL
    assert got["asked"]["kernel"] == KERNEL and got["asked"]["host"] == "wsl2new"
    assert (got["asked"]["stack"], got["asked"]["runner"], got["asked"]["mode"]) == ("cuda", "v2", "graph")
    assert set(got["verdicts"]) == {q.value for q in Question}
    for question, verdict in got["verdicts"].items():
        assert verdict in text, f"the text answer lacks {question}'s verdict {verdict}"


def test_the_commands_say_the_kits_version(python):
    assert succeeded(matrix(python, "--version")) == f"python -m matrix {__version__}\n"
    assert succeeded(matrix(python, "doctor", "--version")) == f"python -m matrix doctor {__version__}\n"


@pytest.mark.reads_host
def test_env_writes_the_record_and_plan_plans_every_cell_from_it(python, tmp_path):
    env_file, plan_file = tmp_path / "env.json", tmp_path / "plan.json"
    done = matrix(python, "env", "--out", str(env_file))
    succeeded(done)
    record = json.loads(env_file.read_text())
    assert record["schema"] == ENV_SCHEMA and record["env_hash"] in done.stderr
    assert record["python"]["version"].startswith(f"{python.version}.") and record["host"]["detected"]
    text = succeeded(matrix(python, "plan", "--cells", "all", "--env", str(env_file), "--out", str(plan_file)))
    assert [line.split()[0] for line in text.splitlines()] == [cell.id for cell in CELLS]
    plan = json.loads(plan_file.read_text())
    assert plan["schema"] == PLAN_SCHEMA and plan["env_hash"] == record["env_hash"]
    assert [entry["cell"] for entry in plan["cells"]] == [cell.id for cell in CELLS]


@pytest.mark.parametrize("args", [("report", "results", "--out", "build"), ("summary",), ("releases",)])
def test_the_other_commands_name_the_python_they_need_in_one_line(python, args):
    if python.version in ("3.11", "3.12", "3.13"):
        pytest.skip(f"Python {python.version} runs every command (with the kit's dependencies installed)")
    done = matrix(python, *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"error: `python -m matrix {args[0]}` needs Python 3.11 or later, and this Python")
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_python_m_repro_names_the_python_it_needs_in_one_line(python):
    if python.version in ("3.11", "3.12", "3.13"):
        pytest.skip(f"Python {python.version} runs `python -m repro` (with vLLM installed)")
    done = bare_module(python, "repro", "gate", "--cells", "all")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: `python -m repro` needs Python 3.11 or later, and this Python"), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize("version", ["3.7", "2.7"])
def test_a_python_older_than_3_8_is_told_which_the_doctor_needs_in_one_line(version):
    done = matrix(Python(version, python_or_skip(version)), "doctor")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: the kit needs Python 3.8 or later (the doctor"), done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.reads_host
def test_a_runners_first_step_writes_a_result_for_each_cell_it_refuses(python, tmp_path):
    env_file, out = tmp_path / "env.json", tmp_path / "misrouted"
    succeeded(matrix(python, "env", "--out", str(env_file)))
    args = ("--cells", "all", "--env", str(env_file), "--require", "native", "--format", "json")
    done = matrix(python, "plan", *args, "--misrouted-out", str(out))
    assert done.returncode in (0, 3), done.stderr
    planned = json.loads(done.stdout)
    assert [entry["cell"] for entry in planned] == [cell.id for cell in CELLS]
    refused = {entry["cell"] for entry in planned if entry["execution"] == "misrouted"}
    # Exit 3 when the runner is not every cell's host, as the workflow's step expects.
    assert done.returncode == (3 if refused else 0), done.stderr
    assert {path.name for path in out.glob("*")} == {f"{cell}.xml" for cell in refused}
    for cell in refused:
        suite = ElementTree.parse(out / f"{cell}.xml").getroot().find("testsuite")
        assert suite is not None and suite.get("name") == cell
        properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert (properties["cell_id"], properties["execution"]) == (cell, "misrouted")
