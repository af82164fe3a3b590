"""A compat.json in the shape ``nox -s report`` publishes, small and predictable, for the doctor's tests.

Each advice names its cell and release, so a test sees which the doctor answered from.
"""

from __future__ import annotations

import json
from pathlib import Path

from matrix.cells import CELLS
from matrix.questions import Question
from matrix.text.words import COMPAT_SCHEMA

# Newest first, as the report writes them; each with another way of naming its default runner (per model class;
# 0.25.1 as a matrix made before the kit asked per model wrote it, a default_runner of no model).
DEFAULT_RUNNERS = {"0.33.0": {"dense": "v2", "moe": "v2"}, "0.30.0": {"dense": "v1", "moe": "v2"}, "0.25.1": None}


def _verdict(cell_id: str, vllm: str, question: str) -> dict:
    opt_in = question == "offload_with_graphs" and cell_id.startswith("cuda-wsl2new")
    return {
        "verdict": "needs-opt-in" if opt_in else "works",
        "level": "emulated" if opt_in else "native",
        "advice": f"{question} advice for {cell_id} at {vllm}",
        "why": "because",
        "issues": [],
    }


def compat_document() -> dict:
    versions = []
    for vllm, runner in DEFAULT_RUNNERS.items():
        cells = [
            {
                "id": cell.id,
                "stack": cell.stack.value,
                "host": cell.host.value,
                "runner": cell.runner.value,
                "mode": cell.mode.value,
                "status": "pass",
                "issues": [],
                "command": f'nox -s "{cell.session}" -- --vllm {vllm}',
                "evidence": [f"predicted: vLLM {vllm}'s own code decides, without a GPU (gate-only) (2026-12-01)"],
                "verdicts": {q.value: _verdict(cell.id, vllm, q.value) for q in Question},
                "answer": "one sentence",
            }
            for cell in CELLS
        ]
        said = {"default_runner": runner["dense"], "default_runners": runner} if runner else {"default_runner": None}
        versions.append({"vllm": vllm, **said, "cells": cells})
    return {
        "schema": COMPAT_SCHEMA,
        "kit_commit": "abc",
        "generated_at": "2026-12-01T00:00:00+00:00",
        "versions": versions,
    }


def write_compat(path: Path) -> Path:
    path.write_text(json.dumps(compat_document()))
    return path
