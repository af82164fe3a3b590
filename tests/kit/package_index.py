"""A package index of the kit's tests: a PEP 503 simple index of empty vLLM wheels, served on loopback.

pip only lists the index's file names when asked for versions, so an empty file per release is a whole index to it.
``pip_environment`` points the real pip at it and at nothing of this machine's pip configuration.
"""

from __future__ import annotations

import contextlib
import ensurepip
import functools
import http.server
import os
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from conftest import ROOT, on_loopback

from matrix.store import release_index
from matrix.store.history_archive import COMMITTED_HISTORY


def covered() -> list[str]:
    """The releases the published matrix covers: the kit's committed history's, oldest first."""
    return list(release_index.covered(ROOT / COMMITTED_HISTORY))


def write_index(root: Path, versions: Iterable[str]) -> Path:
    """``root/simple/vllm/``: one link to an empty wheel per version (a local version's ``+`` in its name)."""
    project = root / "simple" / "vllm"
    project.mkdir(parents=True)
    names = [f"vllm-{version}-py3-none-any.whl" for version in versions]
    for name in names:
        (project / name).write_bytes(b"")
    links = "".join(f'<a href="{name.replace("+", "%2B")}">{name}</a>\n' for name in names)
    (project / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return root / "simple"


def served(directory: Path) -> contextlib.AbstractContextManager[str]:
    """``directory`` over HTTP on loopback for the block: its URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    return on_loopback(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def refusing_url() -> str:
    """A loopback URL nothing listens on: the port was free a moment ago, and is closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple/"


def pip_path() -> str:
    """What puts the real pip in this Python's reach: nothing where it has its own, else ensurepip's bundled wheel
    (the tests' venv is uv's, which has no pip; pip runs from its wheel as get-pip runs it)."""
    if release_index.has_pip():
        return ""
    wheels = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    if not wheels:
        pytest.skip("this Python has no pip and its ensurepip bundles none")
    return str(wheels[-1])


def run_releases(index_url: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m matrix releases`` from the kit's root, its pip asking ``index_url`` only."""
    argv = [sys.executable, "-m", "matrix", "releases", *args]
    env = pip_environment(index_url)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def pip_environment(index_url: str) -> dict[str, str]:
    """This process's environment with pip asking ``index_url`` only: no PIP_* of this machine, no config file,
    no retries (an index that refuses is one answer, not five)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": index_url, "PIP_RETRIES": "0"}
    path = pip_path()
    if path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
    return env


def point_pip_at(monkeypatch: pytest.MonkeyPatch, index_url: str) -> None:
    """This process's pip, as ``pip_environment`` points a child's: for a session the test runs in-process."""
    env = pip_environment(index_url)
    for name in [name for name in os.environ if name not in env]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if pip_path():
        monkeypatch.syspath_prepend(pip_path())
