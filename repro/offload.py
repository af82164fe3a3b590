"""The offload-with-graph reproduction: vLLM's engine with ``cpu_offload_gb`` in a cell.

Each run is a fresh process (``repro.engine``) with a timeout and a compile
cache of its own. A cell's case is an offloaded run and a reference run without
offload, under the same host, runner, graph mode and
``VLLM_WSL2_ENABLE_PIN_MEMORY``. The minimal form runs the same offload with
vLLM's own switches that take pinned memory and UVA away
(``VLLM_WEIGHT_OFFLOADING_DISABLE_*``): WSL2's failure on any Linux GPU.

Runs whose inputs to vLLM are identical are one engine run, shared by the
cells that ask for it (``run_engines``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from matrix.cells import Cell, Host, Mode
from matrix.host.facts import vllm_info
from matrix.plan import CellPlan
from matrix.variables import (
    CACHE_ROOT,
    GATE_PIN_VALUES,
    OFFLOAD_DISABLE_PIN_MEMORY,
    OFFLOAD_DISABLE_UVA,
    PIN_MEMORY,
    V1_MULTIPROCESSING,
)
from repro.failures import FailureKind, classify
from repro.isolation import run_json_child

DEFAULT_TIMEOUT = 600.0
MINIMAL_FORM_ENV = {OFFLOAD_DISABLE_UVA.name: "1", OFFLOAD_DISABLE_PIN_MEMORY.name: "1"}
# vLLM caches compiled models under this root, keyed on nothing about WSL2 or pinned memory
# (0.26.0): an emulated WSL2 run could load its native twin's artifact, skip the Dynamo
# tracing that fails there, and fail for another reason. Each run gets a root of its own.


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

    def spec(self, model: Path) -> dict:
        """What the engine child is told (``repro.engine``)."""
        return {
            "model": str(model),
            "host": self.cell.host.value,
            "mode": self.cell.mode.value,
            "offload": self.offload,
            "present_host": self.present_host,
        }

    def inputs(self, model: Path, base: dict[str, str], pin_env_read: bool) -> tuple:
        """Everything vLLM gets from this run: its spec and environment, less the pin variable where it is not read.

        Two runs with equal inputs are the same experiment, whatever cells asked for them.
        """
        env = self.env(base)
        if not pin_env_read:
            env.pop(PIN_MEMORY.name, None)
        return json.dumps(self.spec(model), sort_keys=True), tuple(sorted(env.items()))


def run_of(plan: CellPlan, pin_env: str, offload: bool = True, minimal: bool = False) -> EngineRun:
    """The engine run a cell's plan makes of one reproduction case: vLLM shown the cell's uname where the plan
    emulates its host."""
    return EngineRun(plan.cell, pin_env, offload, plan.execution.presents_host, minimal)


def runs_for(plans: Iterable[CellPlan]) -> list[EngineRun]:
    """Every engine run the reproduction asks for in the cells its plans give a GPU: per pin value the offload
    run and its reference, and on native Linux the minimal form (vLLM's own switches), whose own variables
    take pinned memory away, so it needs no reference."""
    runs = []
    for plan in plans:
        if not plan.execution.uses_gpu:
            continue
        for pin_env in GATE_PIN_VALUES:
            run = run_of(plan, pin_env)
            runs += [run, run.reference()]
            if plan.cell.host is Host.LINUX:  # so the plan is native: emulation only presents WSL2
                runs.append(run_of(plan, pin_env, minimal=True))
    return runs


def pin_env_read_by(vllm_version: str | None) -> Callable[[Cell], bool]:
    """Whether ``VLLM_WSL2_ENABLE_PIN_MEMORY`` can change what vLLM does in a cell, per matrix/judge/expectations.toml.

    The rules are the one place that says what vLLM's gate decides for each pin value, and the gate
    tests of the same run check them against vLLM itself. Where they expect the same gate values for
    every pin value (native Linux; an old WSL2 kernel under CUDA, which says no before reading the
    variable), nothing vLLM decides depends on it. Without a vLLM release to look the rules up for,
    it may.
    """
    # Here, not at the top: `python -m repro --help` must work on a Python without packaging.
    from matrix.judge.expectations import GATE_KEYS, expected_values, load_rules

    if vllm_version is None:
        return lambda cell: True
    rules = load_rules()

    def gate(cell: Cell, pin_env: str) -> dict[str, object]:
        return {k: e.value for k, e in expected_values(rules, cell, vllm_version, pin_env).items() if k in GATE_KEYS}

    def read(cell: Cell) -> bool:
        first, *rest = (gate(cell, pin_env) for pin_env in GATE_PIN_VALUES)
        return any(other != first for other in rest)

    return read


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
    with tempfile.TemporaryDirectory(prefix="wslpin-engine-") as own:
        env = run.env(dict(os.environ)) | {CACHE_ROOT.name: os.path.join(own, "vllm-cache")}
        child = run_json_child(
            [sys.executable, "-m", "repro.engine", json.dumps(run.spec(model))], env=env, timeout=timeout
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


def share(
    runs: Iterable[EngineRun], model: Path, base: dict[str, str], pin_env_read: Callable[[Cell], bool]
) -> list[list[EngineRun]]:
    """``runs`` grouped by their inputs to vLLM, in the order first asked for: one engine run per group."""
    groups: dict[tuple, list[EngineRun]] = {}
    for run in dict.fromkeys(runs):
        groups.setdefault(run.inputs(model, base, pin_env_read(run.cell)), []).append(run)
    return list(groups.values())


def run_engines(runs: list[EngineRun], model: Path, timeout: float = DEFAULT_TIMEOUT, jobs: int = 4) -> dict:
    """Each distinct run once, ``jobs`` engines at a time on the one GPU.

    Runs with the same inputs to vLLM (``share``) get the result of one engine run, whose
    ``run`` names the one that was started.
    """
    info = vllm_info()
    groups = share(runs, model, dict(os.environ), pin_env_read_by(info["version"] if info else None))
    # Graph-mode engines compile and capture, the longest runs: started first, all end sooner.
    groups.sort(key=lambda group: group[0].cell.mode is not Mode.GRAPH)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda group: run_engine(group[0], model, timeout), groups))
    return {run: result for group, result in zip(groups, results, strict=True) for run in group}
