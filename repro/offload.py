"""The offload-with-graph reproduction: vLLM's engine with ``cpu_offload_gb`` in a cell.

Each run is a fresh process (``repro.engine``) with a timeout. A cell's case
is an offloaded run and a reference run without offload, under the same host,
runner, graph mode and ``VLLM_WSL2_ENABLE_PIN_MEMORY``. The minimal form runs
the same offload with vLLM's own switches that take pinned memory and UVA
away (``VLLM_WEIGHT_OFFLOADING_DISABLE_*``): WSL2's failure on any Linux GPU.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from matrix.cells import Cell
from matrix.variables import (
    OFFLOAD_DISABLE_PIN_MEMORY,
    OFFLOAD_DISABLE_UVA,
    PIN_MEMORY,
    V1_MULTIPROCESSING,
)
from repro.failures import FailureKind, classify
from repro.isolation import run_json_child

DEFAULT_TIMEOUT = 600.0
MINIMAL_FORM_ENV = {OFFLOAD_DISABLE_UVA.name: "1", OFFLOAD_DISABLE_PIN_MEMORY.name: "1"}


@dataclass(frozen=True, order=True)
class EngineRun:
    cell: Cell
    pin_env: str  # one of GATE_PIN_VALUES
    offload: bool  # cpu_offload_gb=1, or 0 for the reference
    present_host: bool  # the machine is not the cell's host: show vLLM the cell's uname
    minimal: bool = False

    @property
    def label(self) -> str:
        parts = [self.cell.id, f"pin_env={self.pin_env}", "offload" if self.offload else "reference"]
        return " ".join(parts + ["minimal-form"] * self.minimal)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k not in MINIMAL_FORM_ENV}
        # In-process engine: the patched uname and the sampler fix must reach it.
        env |= {V1_MULTIPROCESSING.name: "0", **self.cell.env()}
        PIN_MEMORY.apply(env, self.pin_env)
        if self.minimal:
            env |= MINIMAL_FORM_ENV
        return env

    def reference(self) -> EngineRun:
        return EngineRun(self.cell, self.pin_env, False, self.present_host, self.minimal)


@dataclass(frozen=True)
class EngineResult:
    run: EngineRun
    status: str  # "ok" | "failed" | "timeout"
    tokens: list[list[int]] = field(default_factory=list)
    offload: dict = field(default_factory=dict)
    message: str = ""  # the raw error text, kept for the JUnit failure
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def failure(self) -> FailureKind | None:
        if self.ok:
            return None
        return FailureKind.TIMEOUT if self.status == "timeout" else classify(self.message)

    @property
    def outcome(self) -> str:
        """``works`` or the failure kind: the value expectations.toml's ``repro`` key speaks of."""
        return "works" if self.ok else str(self.failure)

    @property
    def offload_path(self) -> str:
        """The path vLLM's offloader really took, in the gate's vocabulary."""
        stats = self.offload
        if stats.get("uva"):
            return "uva"
        if stats.get("pinned_cpu"):
            return "pinned-copy"
        if stats.get("on_cpu"):
            return "pageable-copy"
        return "none"

    @property
    def offloaded(self) -> int:
        """Parameters vLLM marked as UVA views or left on the CPU."""
        return self.offload.get("uva", 0) + self.offload.get("on_cpu", 0)

    @property
    def offload_proven(self) -> bool | None:
        """Whether weights left device memory, by vLLM's own account; None where it gives none.

        Offloaded parameters, or bytes the offloader counts, prove it; the offloader's count of
        zero disproves it. Nothing else is an answer: an unmarked UVA view looks like device memory.
        """
        moved = self.offload.get("offloaded_bytes")
        if self.offloaded or moved:
            return True
        return False if moved == 0 else None


def run_engine(run: EngineRun, model: Path, timeout: float = DEFAULT_TIMEOUT) -> EngineResult:
    spec = {
        "model": str(model),
        "host": run.cell.host.value,
        "mode": run.cell.mode.value,
        "offload": run.offload,
        "present_host": run.present_host,
    }
    child = run_json_child(
        [sys.executable, "-m", "repro.engine", json.dumps(spec)], env=run.env(dict(os.environ)), timeout=timeout
    )
    seconds = child.run.seconds
    if child.answer is None:
        return EngineResult(
            run, "timeout" if child.run.timed_out else "failed", message=child.no_answer, seconds=seconds
        )
    answer = child.answer
    message = answer.get("error", "") or answer.get("offload_error", "")
    if message:
        message += "\n--- process output (tail) ---\n" + child.run.output
    return EngineResult(run, answer["status"], answer.get("tokens", []), answer.get("offload", {}), message, seconds)


def run_engines(runs: list[EngineRun], model: Path, timeout: float = DEFAULT_TIMEOUT, jobs: int = 4) -> dict:
    """Each distinct run once, ``jobs`` engines at a time on the one GPU."""
    unique = sorted(set(runs))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda r: run_engine(r, model, timeout), unique))
    return dict(zip(unique, results, strict=True))
