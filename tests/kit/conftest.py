from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import host_reads
import pytest

from matrix.cells import select
from matrix.commands.here import detected_plan
from matrix.releases import VLLM_VERSION
from matrix.store.history_archive import read_committed
from repro.answers import CACHE_VARIABLE

ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "browser: opens a page in Debian's Chromium (skipped with the reason where it is not installed); "
        "`nox -s tests -- -m browser` runs only these, where .ci/run has installed it",
    )
    config.addinivalue_line(
        "markers", "needs_vllm: runs vLLM (skipped with the reason where it is not installed: `nox -s tests` has it)"
    )
    # The shared builders' asserts say what they compared, as a test module's do (rewritten as the tests import them).
    pytest.register_assert_rewrite("builders")
    _keep_answers(config)
    host_reads.pytest_configure(config)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Found, never imported: importing vLLM here would put it (and torch) in every test's process.
    if item.get_closest_marker("needs_vllm") and importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vLLM installed (nox -s tests installs it)")


def _keep_answers(config: pytest.Config) -> None:
    """vLLM's answers shared by every test and every process they start (repro/answers.py says why it is safe).

    Set before any test runs, so that nested pytest and nox runs inherit it; a directory the caller named
    already is kept, and its answers with it.

    The answers last one session; vLLM's model-info cache lasts as a user's does, between sessions: each entry is
    keyed by the hash of the model module it describes and written whole, so a session after another reads the
    architectures the first had vLLM inspect (~5 s of CPU each) instead of inspecting them again.
    """
    if not os.environ.get(CACHE_VARIABLE):
        answers = Path(tempfile.mkdtemp(prefix="wslpin-answers-"))
        os.environ[CACHE_VARIABLE] = str(answers)
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(CACHE_VARIABLE), ignore_errors=True))
        user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        model_infos = user_cache / "wslpin-kit" / "vllm-modelinfos"
        model_infos.mkdir(parents=True, exist_ok=True)
        # Where repro.engine_config's children find vLLM's cache root (repro.answers.kept_directory).
        (answers / "vllm-cache-root").mkdir()
        (answers / "vllm-cache-root" / "modelinfos").symlink_to(model_infos, target_is_directory=True)


def committed_history(out: Path) -> Path:
    """The committed history (docs/evidence/history.tar.xz) laid out as `nox -s publish` lays it in results/history/:
    read by the kit's own reader (tarfile's extraction filters are newer than Debian 12's Python)."""
    for release, files in read_committed(ROOT / "docs" / "evidence" / "history.tar.xz").items():
        (out / release).mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (out / release / name).write_bytes(data)
    return out


def run_module(
    module: str, *args: str, env: dict | None = None, timeout: float = 600, stdin: str | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` from the kit's root, as a person would."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def on_loopback(server: socketserver.TCPServer) -> Iterator[str]:
    """``server`` (bound to 127.0.0.1) answering in a thread for the block: its URL, without a trailing slash."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def require_gate_only(cells: str | None) -> None:
    """Skip a test that needs ``cells`` (ids or globs; None: all) to find no GPU of theirs on this machine."""
    for plan in detected_plan(select(cells)).cells:
        if plan.execution.uses_gpu:
            pytest.skip(f"needs {plan.cell} gate-only, but it runs {plan.execution} here ({plan.reason})")


@pytest.fixture
def cli():
    return lambda *args, **kw: run_module("matrix", *args, **kw)


@pytest.fixture(scope="session")
def nox_listing() -> str:
    """``nox -l --json``: the noxfile's own account of its sessions."""
    done = run_module("nox", "-l", "--json")
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- The reads_host mark (issue 21) ---------------------------------------------------------------------
# The host variants of `nox -s tests` run only the tests marked reads_host; the plugin's hooks, imported into
# this conftest so pytest registers them (its pytest_configure is called from this one's: a conftest has one),
# fail a test that reads the machine without the mark. They live in a
# module of their own so that test_host_marker.py can load them into a pytest run of its own (`-p host_reads`).
from host_reads import (  # noqa: E402, F401
    pytest_fixture_setup,
    pytest_runtest_makereport,
    pytest_runtest_protocol,
)

# A CUDA machine's environment record as the kit wrote it (the offline GPU run's, on an H200).
GPU_MACHINE = json.loads((ROOT / "docs/evidence/gpu-runs/h200-vllm-0.26.0-2026-12-04/env.json").read_text())


def gpu_machine(host: str, vllm: str = VLLM_VERSION) -> dict:
    """That record moved to ``host`` and ``vllm``: faked where it says WSL2, which does not exist here (an envelope
    that contradicts itself, or a record that shows no GPU ran, is never believed)."""
    wsl = host.startswith("wsl")
    record = json.loads(json.dumps(GPU_MACHINE))
    record["packages"]["vllm"]["version"] = vllm
    record["host"]["detected"] = host
    record["wsl"]["is_wsl"] = record["gpu"]["dev_dxg"] = wsl
    record["gpu"]["devices"] = [{"name": "RTX 4090 (faked for the test)", "driver": "581.57"}]
    if wsl:
        record["gpu"]["tools"]["nvidia-smi"] = "/usr/lib/wsl/lib/nvidia-smi"
    return record
