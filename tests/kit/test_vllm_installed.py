"""``--vllm installed``: a session against the vLLM and torch of the Python that runs it, installing nothing.

Real nox on a copy of the kit's tree, with ``--no-venv`` as a runner with vLLM preinstalled runs it;
this venv (vLLM 0.33.0 gate-only, CPU torch) is that Python.
"""

import json
import os
import sys
from pathlib import Path

import pytest
from builders import kit_as_sent
from conftest import require_gate_only

from matrix.host.facts import torch_info, vllm_info

# Every test here reads the machine: its outcome is the host's (the host variants run them).
pytestmark = pytest.mark.reads_host

CELL = "cuda-linux-v1-graph"


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    return kit_as_sent(tmp_path_factory.mktemp("installed") / "kit")


def nox(kit: Path, python: str, *args: str):
    """``nox ARGS`` in ``kit`` with ``python`` as the ``python`` on PATH."""
    import subprocess

    bin_dir = kit.parent / f"bin-{Path(python).parent.parent.name}"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {python} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "nox", *args], cwd=kit, env=env, capture_output=True, text=True, timeout=900, check=False
    )


def test_a_session_runs_against_the_installed_vllm_and_installs_nothing(kit):
    require_gate_only(CELL)
    done = nox(kit, sys.executable, "--no-venv", "-s", "gate", "--", "--vllm", "installed", "--cells", CELL)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "pip install" not in output
    release, torch = vllm_info()["version"], torch_info()["version"]
    assert f"vLLM {release} and torch {torch} of " in output and "(nothing installed)" in output
    results = kit / "results" / release / "gate"
    record = json.loads((results / f"{CELL}.env.json").read_text())
    assert record["packages"]["vllm"]["version"] == release and record["packages"]["torch"]["version"] == torch
    assert (results / f"{CELL}.xml").exists()


def test_installed_needs_no_venv_and_no_venv_needs_installed(kit):
    done = nox(kit, sys.executable, "-s", "gate", "--", "--vllm", "installed")
    assert done.returncode == 1 and "nox --no-venv -s 'gate' -- --vllm installed" in done.stderr
    done = nox(kit, sys.executable, "--no-venv", "-s", "gate")
    assert done.returncode == 1 and "add `-- --vllm installed`" in done.stderr


def test_a_python_without_vllm_is_refused_in_one_line(kit):
    # The interpreter this venv was made from: the standard library alone, no vLLM.
    bare = os.path.join(sys.base_prefix, "bin", "python3")
    done = nox(kit, bare, "--no-venv", "-s", "gate", "--", "--vllm", "installed", "--cells", CELL)
    assert done.returncode == 1 and "has no vLLM; run nox from the environment that has it" in done.stderr
