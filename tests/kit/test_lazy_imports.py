"""``python -m repro probe`` and ``offload-graph`` start where the kit's report and CI packages are missing.

An offline GPU machine has torch, transformers and vLLM but not junitparser, defusedxml, docker
or nox. A ``sitecustomize`` on PYTHONPATH makes those four missing in every child, as they are there.
``python -m matrix doctor`` goes further: it answers where nothing but the standard library exists.
"""

import os
import subprocess
import sys

import pytest
from compat_file import write_compat
from conftest import ROOT, run_module

MISSING = ("junitparser", "defusedxml", "docker", "nox")

SITECUSTOMIZE = f"""
import importlib.abc
import sys

MISSING = {MISSING!r}


class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in MISSING:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Missing())
"""


@pytest.fixture
def without_them(tmp_path) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {"PYTHONPATH": str(tmp_path)}


def test_the_packages_really_are_missing_there(without_them):
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        print(name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *MISSING],
        cwd=ROOT,
        env={**os.environ, **without_them},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.split() == list(MISSING), done.stderr


@pytest.mark.parametrize("command", ["probe", "offload-graph"])
def test_the_gpu_commands_start_without_them(without_them, command):
    done = run_module("repro", command, "--help", env=without_them)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m repro {command}")


@pytest.mark.reads_host
def test_the_probe_runs_without_them(without_them):
    # Here without a GPU its sections are skipped with the reason; the imports a real run makes are the same.
    done = run_module("repro", "probe", "--sections", "pin_alloc", env=without_them)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pin_alloc ")


STDLIB_ONLY = """
import importlib.abc
import sys


class StdlibOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in sys.stdlib_module_names and top != "matrix":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, StdlibOnly())
"""


@pytest.mark.reads_host
def test_the_doctor_answers_with_nothing_but_the_standard_library_and_the_kit(tmp_path):
    # A fresh clone with the system Python: every other package is missing, whatever this Python has.
    (tmp_path / "sitecustomize.py").write_text(STDLIB_ONLY)
    compat = write_compat(tmp_path / "compat.json")
    done = run_module("matrix", "doctor", "--stack", "cuda", "--matrix", str(compat), env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "check it here: nox -s" in done.stdout


# Written into a `sitecustomize` on PYTHONPATH: every module the process imported, when it ends.
IMPORTED = """
import atexit
import sys


def _write():
    with open({out!r}, "w") as out:
        out.write("\\n".join(sorted(sys.modules)))


atexit.register(_write)
"""
# What only --matrix URL needs (the network), and what reading package metadata through importlib would bring.
FETCHING = ("urllib.request", "http.client", "ssl", "socket", "queue")
METADATA = ("importlib.metadata", "email", "zipfile", "csv")
ASKED = ("--stack", "cuda", "--kernel", "5.15.167.4-microsoft-standard-WSL2", "--vllm", "0.33.0")


def imported(tmp_path, *args: str) -> set[str]:
    """The modules ``python -m matrix ARGS`` (``-c pass`` without ARGS) imports, read from the process itself."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    out = tmp_path / "modules.txt"
    (hook / "sitecustomize.py").write_text(IMPORTED.format(out=str(out)))
    command = ["-m", "matrix", *args] if args else ["-c", "pass"]
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(hook)},
        capture_output=True,
        text=True,
    )
    assert out.exists(), done.stderr
    return set(out.read_text().split())


@pytest.mark.reads_host
def test_the_doctor_imports_the_network_and_package_metadata_only_for_the_flags_that_need_them(tmp_path):
    bare = imported(tmp_path)  # what this interpreter's own start imports is no cost of the doctor's
    answering = imported(tmp_path, "doctor", *ASKED) - bare
    assert "matrix.doctor.answer" in answering
    assert not answering & {*FETCHING, *METADATA}, sorted(answering & {*FETCHING, *METADATA})
    # Neither does another machine's set-up, read from a file, nor its own this machine's env record.
    assert not {"matrix.doctor.collected", "matrix.host.record"} & answering
    # Asked for a URL (nothing listens on the discard port), the doctor brings the network in, and only then.
    fetching = imported(tmp_path, "doctor", *ASKED, "--matrix", "http://127.0.0.1:9/compat.json") - bare
    assert {"urllib.request", "http.client"} <= fetching
