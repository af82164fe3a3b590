"""How this machine runs a cell: native, emulated, gate-only, or misrouted.

A session decides that once and writes it as ``plan.json`` beside ``env.json``
(``python -m matrix plan --env env.json --out plan.json``); pytest, the split and the
container runner read that file, so every case and every suite of a run carry the same
execution. Deciding is pure; reading the machine is matrix.commands.here's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matrix.cells import Cell, Host, StrEnum, select
from matrix.errors import MatrixError
from matrix.host.classify import DetectedHost
from matrix.host.record import EnvironmentRecord
from matrix.io.records import read_record
from matrix.questions import Level

PLAN_SCHEMA = "wslpin-kit.plan/1"


class Execution(StrEnum):
    NATIVE = "native"  # the machine is the cell's host, GPU stack included
    EMULATED = "emulated"  # real GPU stack; WSL2 host presented to vLLM by a patched uname
    GATE_ONLY = "gate-only"  # no usable GPU for the cell: gate tests only
    MISROUTED = "misrouted"  # a runner claimed the cell natively, but is not its host

    @property
    def uses_gpu(self) -> bool:
        return self in (Execution.NATIVE, Execution.EMULATED)

    @property
    def presents_host(self) -> bool:
        """vLLM is shown the cell's uname: this machine is not the cell's host."""
        return self is not Execution.NATIVE

    @property
    def stubs_gpu(self) -> bool:
        """vLLM is shown a stand-in for the cell's GPU: there is none of its stack here."""
        return not self.uses_gpu

    @property
    def level(self) -> Level:
        """How a verdict resting on this execution's results is known."""
        levels = {Execution.GATE_ONLY: Level.PREDICTED, Execution.EMULATED: Level.EMULATED}
        return Level.NATIVE if self is Execution.NATIVE else levels.get(self, Level.NONE)

    @property
    def strength(self) -> int:
        """Which result a cell rests on where it has several: the lowest. A runner that found itself misrouted
        outranks a prediction: it was meant to run the cell, and the cell must show that it did not."""
        order = (Execution.NATIVE, Execution.EMULATED, Execution.MISROUTED, Execution.GATE_ONLY)
        return order.index(self)


@dataclass(frozen=True)
class CellPlan:
    cell: Cell
    execution: Execution
    reason: str

    def require_gpu(self, doing: str, instead: str) -> None:
        """Refuse in one line to ``doing`` what needs the cell's GPU where there is none for it."""
        if not self.execution.uses_gpu:
            raise MatrixError(f"{self.cell} cannot {doing} here: {self.execution} ({self.reason}); {instead}")

    def as_dict(self) -> dict[str, str]:
        return {
            "cell": self.cell.id,
            "session": self.cell.session,
            "execution": self.execution.value,
            "reason": self.reason,
        }


def plan_cell(cell: Cell, here: DetectedHost, require_native: bool = False) -> CellPlan:
    """Decide how ``here`` runs ``cell``.

    Emulation only goes from native Linux to WSL2: on Linux the GPU can really
    pin, so vLLM's WSL2 gate (fed a WSL2 uname) is the only thing that differs.
    A WSL2 host cannot stand in for Linux or for the other WSL2 kernel.
    """
    where = f"this machine is {here.host}" + (f" with {here.stack}" if here.stack else "")
    if here.stack is None:
        execution, reason = Execution.GATE_ONLY, here.stack_reason
    elif here.stack is not cell.stack:
        execution, reason = Execution.GATE_ONLY, f"cell needs {cell.stack}; {where}"
    elif here.host is cell.host:
        execution, reason = Execution.NATIVE, f"{where}: the cell's own host"
    elif here.host is Host.LINUX:
        execution = Execution.EMULATED
        reason = f"{where}; vLLM sees uname release {cell.host.emulated_release!r}"
    else:
        execution, reason = Execution.GATE_ONLY, f"{where}; it cannot stand in for {cell.host}"
    if require_native and execution is not Execution.NATIVE:
        return CellPlan(cell, Execution.MISROUTED, f"runner claims {cell.id} natively, but {where}")
    return CellPlan(cell, execution, reason)


def plan_cells(cells: Iterable[Cell], here: DetectedHost, require_native: bool = False) -> list[CellPlan]:
    return [plan_cell(cell, here, require_native) for cell in cells]


@dataclass(frozen=True)
class Plan:
    """A session's decision for each of its cells, and what it was decided from."""

    cells: tuple[CellPlan, ...]
    here: DetectedHost
    env_hash: str  # the hash of the environment record it was computed from; "" when detected live

    @classmethod
    def for_host(
        cls, cells: Iterable[Cell], here: DetectedHost, env_hash: str = "", require_native: bool = False
    ) -> Plan:
        return cls(tuple(plan_cells(cells, here, require_native)), here, env_hash)

    @classmethod
    def from_record(cls, cells: Iterable[Cell], record: EnvironmentRecord, require_native: bool = False) -> Plan:
        """The plan for the machine an environment record (``python -m matrix env``) describes."""
        return cls.for_host(cells, record.detected, record.env_hash, require_native)

    @property
    def uses_gpu(self) -> bool:
        return any(plan.execution.uses_gpu for plan in self.cells)

    def select(self, pattern: str | None) -> list[CellPlan]:
        """The plans of the cells ``pattern`` names (None: every cell planned); a cell not planned is an error."""
        if pattern is None:
            return list(self.cells)
        planned = {plan.cell: plan for plan in self.cells}
        wanted = select(pattern)
        missing = [cell.id for cell in wanted if cell not in planned]
        if missing:
            raise MatrixError(
                f"the plan has no {', '.join(missing)} (it plans {', '.join(p.cell.id for p in self.cells)}): "
                f"write one that does with `python -m matrix plan --cells {pattern} --out PLAN`"
            )
        return [planned[cell] for cell in wanted]

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": PLAN_SCHEMA,
            "env_hash": self.env_hash,
            "host": self.here.to_json(),
            "cells": [plan.as_dict() for plan in self.cells],
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=2) + "\n")


def load_plan(path: Path) -> Plan:
    """The plan ``python -m matrix plan --out`` wrote, or one line saying how to write it."""
    again = f"write it with `python -m matrix plan --cells CELLS --env ENV.json --out {path}`"
    record = read_record(path, PLAN_SCHEMA, f"plan {path}", "a plan record", again)
    try:
        here = DetectedHost.from_json(record["host"])
        cells = tuple(
            CellPlan(Cell.parse(entry["cell"]), Execution(entry["execution"]), str(entry["reason"]))
            for entry in record["cells"]
        )
        return Plan(cells, here, str(record["env_hash"]))
    except (KeyError, TypeError, ValueError, AttributeError, MatrixError) as exc:
        raise MatrixError(f"plan {path} is a damaged plan record ({type(exc).__name__}: {exc}): {again}") from None


def cell_pytest_args(pattern: str, junitxml: str, probe_out: str, plan: str) -> list[str]:
    """What a cell session passes pytest, on the host or inside an image (before any tests or options of its own).

    xunit1 keeps the properties each case carries (cell, gate key, observed value), which the split reads.
    """
    return [
        *("--cells", pattern, "-o", "junit_family=xunit1"),
        f"--plan={plan}",
        f"--junitxml={junitxml}",
        f"--probe-out={probe_out}",
        *("-q", "-rfEX"),
    ]
