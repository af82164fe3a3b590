"""The set-up asked about (this machine, or flags over it) and the published answer for it: pure decisions.

Each choice keeps where it came from, so the answer can say what it assumed and how to ask otherwise.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic, TypeVar

from matrix.cells import Cell, Host, Mode, Runner, Stack
from matrix.doctor.published import REGENERATE, CellEntry, Published, Release, release_number
from matrix.errors import MatrixError
from matrix.host.classify import HostFacts, classify_host, classify_stack
from matrix.variables import PIN_MEMORY, V2_MODEL_RUNNER

T = TypeVar("T")


class Source(enum.Enum):
    FLAG = "flag"  # a command-line flag
    MACHINE = "machine"  # read from this machine
    VARIABLE = "variable"  # VLLM_USE_V2_MODEL_RUNNER
    MATRIX = "matrix"  # the published matrix: the release's default runner
    DEFAULT = "default"  # vLLM's own default
    ASSUMED = "assumed"  # nothing says: the doctor's guess


@dataclass(frozen=True)
class Chosen(Generic[T]):
    value: T
    source: Source


@dataclass(frozen=True)
class Asked:
    """The flags: each None where the machine is to be read instead."""

    kernel: str | None = None
    stack: Stack | None = None
    vllm: str | None = None
    runner: Runner | None = None
    mode: Mode | None = None


@dataclass(frozen=True)
class SetUp:
    kernel: Chosen[str]  # a uname release
    host: Host
    stack: Chosen[Stack]
    stack_reason: str  # how detection found the stack; empty for --stack
    installed_vllm: str | None
    vllm: Chosen[str] | None  # None: neither asked nor installed
    runner: Chosen[Runner] | None  # None: the release's default decides
    mode: Chosen[Mode]
    pin_memory: str | None  # PIN_MEMORY's value here; None when unset


def _runner_variable(environ: dict[str, str]) -> Runner | None:
    value = environ.get(V2_MODEL_RUNNER.name)
    if value is None:
        return None
    if value not in ("0", "1"):
        raise MatrixError(f"{V2_MODEL_RUNNER.name}={value!r} is neither 0 (V1) nor 1 (V2): unset it or pass --runner")
    return Runner.V2 if value == "1" else Runner.V1


def set_up(facts: HostFacts, asked: Asked) -> SetUp:
    """The set-up: each flag given, else what ``facts`` say; one line when no GPU stack is known."""
    if asked.kernel is not None:
        # The release alone decides, as in vLLM: "microsoft" in it is WSL2, anything else native Linux.
        kernel, host = Chosen(asked.kernel, Source.FLAG), classify_host(HostFacts(uname={"release": asked.kernel}))
    else:
        kernel, host = Chosen(facts.uname.get("release", ""), Source.MACHINE), classify_host(facts)
    if asked.stack is not None:
        stack, reason = Chosen(asked.stack, Source.FLAG), ""
    else:
        detected, reason = classify_stack(facts)
        if detected is None:
            # Still say what was read: the kernel's side of the gate answers half the question already.
            raise MatrixError(
                f"kernel {kernel.value or '?'} ({host.value}), but no GPU stack found here ({reason}): "
                "pass --stack cuda or --stack rocm"
            )
        stack = Chosen(detected, Source.MACHINE)
    installed = (facts.vllm or {}).get("version")
    if asked.vllm is not None:
        vllm: Chosen[str] | None = Chosen(asked.vllm, Source.FLAG)
    else:
        vllm = Chosen(installed, Source.MACHINE) if installed else None
    runner_variable = _runner_variable(facts.environ)
    if asked.runner is not None:
        runner: Chosen[Runner] | None = Chosen(asked.runner, Source.FLAG)
    else:
        runner = Chosen(runner_variable, Source.VARIABLE) if runner_variable else None
    return SetUp(
        kernel=kernel,
        host=host,
        stack=stack,
        stack_reason=reason,
        installed_vllm=installed,
        vllm=vllm,
        runner=runner,
        mode=Chosen(asked.mode, Source.FLAG) if asked.mode else Chosen(Mode.GRAPH, Source.DEFAULT),
        pin_memory=facts.environ.get(PIN_MEMORY.name),
    )


@dataclass(frozen=True)
class Answer:
    setup: SetUp
    matrix: str  # the file's name in messages
    release: Release
    nearest_older: bool  # the matrix lacks the asked release: the release is the nearest older one
    runner: Chosen[Runner]
    entry: CellEntry

    @property
    def cell(self) -> Cell:
        return self.entry.cell

    @property
    def opted_in(self) -> bool:
        """Whether PIN_MEMORY is already 1 here, as a needs-opt-in verdict asks."""
        return self.setup.pin_memory == "1"


def _release(setup: SetUp, published: Published) -> tuple[Release, bool]:
    """The release asked about, else the nearest older one (True), else the newest when nothing was asked."""
    if setup.vllm is None:
        return published.releases[0], False
    asked = release_number(setup.vllm.value)
    if asked is None:
        raise MatrixError(f"vLLM {setup.vllm.value!r} is not a release number: give one like 0.33.0 with --vllm")
    older = [r for r in published.releases if r.number <= asked]
    if not older:
        oldest = published.releases[-1].vllm
        raise MatrixError(
            f"vLLM {setup.vllm.value} is older than every release in {published.name} (the oldest is {oldest}): "
            f"upgrade vLLM, or ask about one with --vllm {oldest} or later"
        )
    return older[0], older[0].number != asked


def answer(setup: SetUp, published: Published) -> Answer:
    """The published cell and release for ``setup``; one line when the matrix has no cell for it."""
    release, nearest_older = _release(setup, published)
    if setup.runner is not None:
        runner = setup.runner
    elif release.default_runner is not None:
        runner = Chosen(release.default_runner, Source.MATRIX)
    else:
        runner = Chosen(Runner.V2, Source.ASSUMED)
    cell = Cell(setup.stack.value, setup.host, runner.value, setup.mode.value)
    entry = release.entry(cell)
    if entry is None:
        raise MatrixError(f"{published.name} has no cell {cell} for vLLM {release.vllm}: {REGENERATE}")
    return Answer(setup, published.name, release, nearest_older, runner, entry)
