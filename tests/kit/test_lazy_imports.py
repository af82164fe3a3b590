"""``python -m repro probe`` and ``offload-graph`` start where the kit's report and CI packages are missing.

An offline GPU machine has torch, transformers and vLLM but not junitparser, defusedxml, docker
or nox. A ``sitecustomize`` on PYTHONPATH makes those four missing in every child, as they are there.
"""

import os
import subprocess
import sys

import pytest
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


def test_the_probe_runs_without_them(without_them):
    # Here without a GPU its sections are skipped with the reason; the imports a real run makes are the same.
    done = run_module("repro", "probe", "--sections", "pin_alloc", env=without_them)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pin_alloc ")
