"""Which runner may speak for which cells: the plan job's matrix, read back by the report.

A result file says what ran it (its envelope's ``execution``), but any runner can write any
envelope. In CI each runner job uploads its results as one artifact, named in the plan
(``python -m matrix plan --format runners``), and download-artifact puts each artifact in a
directory of that name; so the directory a file came from says which runner wrote it. A
native or emulated (or misrouted) result counts only from the artifact of the runner the plan
gave its cell to; anything else claiming one is a *suspect* result, shown but never evidence.
Gate-only predictions need no GPU and may come from anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from matrix.cells import Cell
from matrix.envelope import Envelope
from matrix.errors import MatrixError
from matrix.io.json_input import RUNNERS, read_json_input
from matrix.plan import Execution


@dataclass(frozen=True, slots=True)
class Suspect:
    """A result claiming a run its artifact's runner may not speak for: kept out of every cell."""

    path: str
    artifact: str  # the directory it came from under the inputs; "" when none
    cell: str
    execution: str
    vllm: str
    testcases: int
    contradiction: str = ""  # how its envelope contradicts itself; empty: only its artifact is not the cell's runner


@dataclass(frozen=True, slots=True)
class NotPlanned:
    """A runner kind the plan gave no job (none of its runners online): its cells rest on predictions."""

    name: str
    cells: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Claims:
    """The cells each runner's artifact may claim, and the directories the artifacts were downloaded into."""

    cells: Mapping[str, frozenset[Cell]]  # artifact name -> the cells its runner runs
    roots: tuple[Path, ...]
    not_planned: tuple[NotPlanned, ...] = ()

    @property
    def runners(self) -> dict[Cell, str]:
        """Cell -> the artifact whose native result it needs."""
        return {cell: artifact for artifact, cells in self.cells.items() for cell in cells}

    def artifact(self, path: str) -> str:
        """The artifact a file came from: its first directory under an input directory."""
        for root in self.roots:
            try:
                parts = Path(path).relative_to(root).parts
            except ValueError:
                continue
            if len(parts) > 1:
                return parts[0]
        return ""

    def suspect(self, path: str, envelope: Envelope, testcases: int) -> Suspect | None:
        execution = envelope.execution
        if execution in (None, Execution.GATE_ONLY):
            return None
        artifact = self.artifact(path)
        if envelope.cell in self.cells.get(artifact, frozenset()):
            return None
        return Suspect(path, artifact, envelope.cell.id, execution.value, envelope.vllm_version, testcases)


def load_claims(path: str, inputs: list[str]) -> Claims:
    """The plan job's jobs (``plan --format runners``, or the matrix of ``--format github``) as claims over the
    input directories, with the kinds it did not plan; one line if not."""
    data = read_json_input(Path(path), RUNNERS)
    try:
        cells = {job["artifact"]: frozenset(Cell.parse(c) for c in job["cells"]) for job in data["include"]}
        not_planned = tuple(
            NotPlanned(kind["name"], tuple(Cell.parse(c).id for c in kind["cells"]), kind["reason"])
            for kind in data.get("not_planned", ())
        )
    except MatrixError as exc:
        raise MatrixError(f"--runners {path} names a cell the kit does not have ({exc}): {RUNNERS.instead}") from None
    return Claims(cells, tuple(Path(item) for item in inputs if Path(item).is_dir()), not_planned)
