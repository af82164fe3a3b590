"""How this machine runs a cell: native, emulated, gate-only, or misrouted."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from matrix.cells import Cell, Host
from matrix.errors import MatrixError
from matrix.host.classify import DetectedHost


class Execution(enum.StrEnum):
    NATIVE = "native"  # the machine is the cell's host, GPU stack included
    EMULATED = "emulated"  # real GPU stack; WSL2 host presented to vLLM by a patched uname
    GATE_ONLY = "gate-only"  # no usable GPU for the cell: gate tests only
    MISROUTED = "misrouted"  # a runner claimed the cell natively, but is not its host

    @property
    def uses_gpu(self) -> bool:
        return self in (Execution.NATIVE, Execution.EMULATED)


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


def plan_cells(cells: list[Cell], here: DetectedHost, require_native: bool = False) -> list[CellPlan]:
    return [plan_cell(cell, here, require_native) for cell in cells]


def cell_pytest_args(pattern: str, junitxml: str, probe_out: str) -> list[str]:
    """What a cell session passes pytest, on the host or inside an image (before any tests or options of its own).

    xunit1 keeps the properties each case carries (cell, gate key, observed value), which the split reads.
    """
    return [
        *("--cells", pattern, "-o", "junit_family=xunit1"),
        f"--junitxml={junitxml}",
        f"--probe-out={probe_out}",
        *("-q", "-rfEX"),
    ]
