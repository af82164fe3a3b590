"""The compatibility matrix: four axes, 24 cells, and their ids.

This is the only place the cells are defined. nox, the workflows and the table
derive them from here.
"""

from __future__ import annotations

import enum
import fnmatch
import itertools
from typing import TYPE_CHECKING, NamedTuple

from matrix.errors import MatrixError
from matrix.variables import V2_MODEL_RUNNER

if TYPE_CHECKING:
    from typing import Self


class StrEnum(str, enum.Enum):
    """``enum.StrEnum`` (3.11) on Python 3.8+ (matrix/__main__.py says why): str() and format() give the value."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)


class Axis(StrEnum):
    """An axis value: the string used in ids and nox sessions, ordered the way the matrix is written."""

    # Definition order, not str's alphabetical order, so cells sort the way the matrix is written
    # (Cell's comparisons, a tuple's, use all four operators).
    def _rank(self) -> int:
        return list(type(self)).index(self)

    def __lt__(self, other: object) -> bool:
        return self._rank() < other._rank() if type(other) is type(self) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self._rank() <= other._rank() if type(other) is type(self) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self._rank() > other._rank() if type(other) is type(self) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self._rank() >= other._rank() if type(other) is type(self) else NotImplemented

    @classmethod
    def parse(cls, text: str) -> Self:
        try:
            return cls(text)
        except ValueError:
            valid = ", ".join(v.value for v in cls)
            raise MatrixError(f"unknown {cls.__name__.lower()} {text!r}; valid values: {valid}") from None


class Stack(Axis):
    CUDA = "cuda"
    ROCM = "rocm"


# The first WSL2 kernel with (limited) pinned-memory support; vLLM gates on it
# since 0.24.0 (PR #41496) and the matrix splits WSL2 hosts at the same line.
WSL2_PIN_KERNEL = (4, 19, 121)


class Host(Axis):
    LINUX = "linux"
    WSL2OLD = "wsl2old"
    WSL2NEW = "wsl2new"

    @property
    def is_wsl(self) -> bool:
        return self is not Host.LINUX

    @property
    def emulated_release(self) -> str:
        """The ``uname -r`` this host presents when emulated.

        Real releases of each kind: 4.19.104 shipped with the first WSL2 builds
        (below the gate); 6.6.87.2 is a current WSL2 kernel.
        """
        return {
            Host.LINUX: "6.8.0-45-generic",
            Host.WSL2OLD: "4.19.104-microsoft-standard",
            Host.WSL2NEW: "6.6.87.2-microsoft-standard-WSL2",
        }[self]

    @property
    def label(self) -> str:
        """The self-hosted runner label for this host: never one GitHub gives a runner by default (every runner
        on Linux, WSL2's included, carries ``linux``), so that a WSL2 runner never takes a native-Linux job."""
        return {
            Host.LINUX: "native-linux",
            Host.WSL2OLD: "wsl2-kernel-old",
            Host.WSL2NEW: "wsl2-kernel-new",
        }[self]


class Runner(Axis):
    V1 = "v1"
    V2 = "v2"

    @property
    def env_value(self) -> str:
        """``V2_MODEL_RUNNER``'s value for this runner."""
        return "1" if self is Runner.V2 else "0"


class Mode(Axis):
    GRAPH = "graph"
    EAGER = "eager"


class ModelClass(Axis):
    """Not an axis of the matrix: what vLLM's default runner also depends on (before 0.29.0 it kept MoE models
    on the V1 runner), so a release's default is asked per model class."""

    DENSE = "dense"
    MOE = "moe"


AXES: tuple[type[Axis], ...] = (Stack, Host, Runner, Mode)


# A NamedTuple, not a dataclass: the doctor imports this module, and importing dataclasses would cost its start 5 ms.
# As a tuple it sorts by its axes in order, as the matrix is written (Axis's comparisons).
class Cell(NamedTuple):
    stack: Stack
    host: Host
    runner: Runner
    mode: Mode

    # The report asks for it for every case of every release (1.2M calls in one profile): joined, not formatted.
    @property
    def id(self) -> str:
        return "-".join(self)

    @property
    def session_params(self) -> str:
        """The parameters of the nox session that runs this cell, as the noxfile names them (its ``id``)."""
        return f"{self.stack}, {self.host}, {self.runner}, {self.mode}"

    @property
    def session(self) -> str:
        """The nox session id that runs this cell."""
        return f"cell({self.session_params})"

    def __str__(self) -> str:
        return self.id

    @classmethod
    def parse(cls, text: str) -> Cell:
        parts = text.strip().split("-")
        if len(parts) != len(AXES):
            raise MatrixError(
                f"bad cell id {text!r}: expected stack-host-runner-mode, e.g. cuda-wsl2new-v2-graph; {_valid_values()}"
            )
        stack, host, runner, mode = parts
        return cls(Stack.parse(stack), Host.parse(host), Runner.parse(runner), Mode.parse(mode))

    def env(self) -> dict[str, str]:
        """Environment variables the cell sets for vLLM."""
        return {V2_MODEL_RUNNER.name: self.runner.env_value}


CELLS: tuple[Cell, ...] = tuple(itertools.starmap(Cell, itertools.product(Stack, Host, Runner, Mode)))


def _valid_values() -> str:
    return "; ".join(f"{axis.__name__.lower()}: {'|'.join(v.value for v in axis)}" for axis in AXES)


def select(pattern: str | None) -> list[Cell]:
    """Cells matching a pattern: comma-separated ids or globs (``cuda-wsl2*-*-graph``).

    A pattern that matches no cell is an error, so a typo never runs nothing.
    """
    if pattern is None or pattern.strip() in ("", "all", "*"):
        return list(CELLS)
    chosen: list[Cell] = []
    for part in (p.strip() for p in pattern.split(",")):
        if not part:
            raise MatrixError(f"bad cell pattern {pattern!r}: empty item between commas")
        if not any(ch in part for ch in "*?["):
            hits = [Cell.parse(part)]
        else:
            hits = [c for c in CELLS if fnmatch.fnmatchcase(c.id, part)]
            if not hits:
                raise MatrixError(
                    f"cell pattern {part!r} matches no cell; ids look like cuda-wsl2new-v2-graph ({_valid_values()})"
                )
        chosen.extend(c for c in hits if c not in chosen)
    return chosen
