"""The envelope: the provenance a cell's JUnit suite carries, as one typed record.

On the wire it is a suite's ``<properties>`` (names and spellings fixed by
``wslpin-kit.envelope/1``, read by every report since); in the kit it is an
``Envelope``, made here from a run's facts. ``matrix.junit`` and ``matrix.commands.misrouted`` write it,
``matrix.store.reading`` reads it back, all through this module only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from matrix.cells import Cell
from matrix.errors import MatrixError
from matrix.host.record import EnvironmentRecord
from matrix.plan import CellPlan, Execution

ENVELOPE_SCHEMA = "wslpin-kit.envelope/1"

# Property names in the order the kit writes them; the axes and the schema come from the cell and this module.
_AXES = ("stack", "host", "runner", "mode")
_TEXT = (
    "execution_reason",
    "vllm_version",
    "vllm_commit",
    "torch_version",
    "torch_build",
    "vllm_requires_torch",
)
# What differs by nature between two runs that gave the same result: when a run started, which commit of the kit ran
# it (one that changed no test gives the same cases), the hash of an environment record that holds those.
RUN_STAMP = frozenset({"started_at", "kit_commit", "env_hash"})
# What names the machine today: a runner renamed, or a kernel updated in place, gives the same answers.
MACHINE_NAMES = frozenset({"runner_name", "kernel_release"})

_TEXT_AFTER_MISMATCH = ("kernel_release",)
_TEXT_AFTER_WSL = (
    "detected_host",
    "gpu",
    "gpu_driver",
    "runner_name",
    "kit_commit",
    "started_at",
    "env_hash",
    "env_schema",
)
_IMAGE = ("image", "image_digest")
# Written only where vLLM came from a wheel file or a checkout: an envelope states no field a run lacks.
_SOURCE = "vllm_source"
_KNOWN = frozenset(
    ("envelope_schema", "cell_id", *_AXES, "execution", *_TEXT, "torch_mismatch", *_TEXT_AFTER_MISMATCH, "wsl")
    + (*_TEXT_AFTER_WSL, *_IMAGE, _SOURCE)
)
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class Envelope:
    """Who ran a cell, where, with what. Empty text: the writer had nothing to say (or an older kit did not ask)."""

    cell: Cell
    execution: Execution | None = None  # None: an envelope written by hand, without it
    execution_reason: str = ""
    # The release's results directory name (matrix.store.layout), so file and envelope agree.
    vllm_version: str = ""
    vllm_commit: str = ""
    torch_version: str = ""
    torch_build: str = ""  # "cuda 12.8", "hip 6.4", "cpu"; empty where torch is not installed
    vllm_requires_torch: str = ""  # e.g. "torch==2.14.0"
    torch_mismatch: bool | None = None  # None: unknown (no torch, or no pin to compare with)
    kernel_release: str = ""
    wsl: bool | None = None  # None: not recorded
    detected_host: str = ""
    gpu: str = ""
    gpu_driver: str = ""
    runner_name: str = ""
    kit_commit: str = ""
    started_at: str = ""  # ISO 8601, as written
    env_hash: str = ""
    env_schema: str = ""
    # Set when the cell ran inside a container image (repro/container.py): which image, exactly.
    image: str = ""
    image_digest: str = ""
    # A wheel file's or a source checkout's URL (PEP 610) where vLLM came from neither an index nor an image.
    vllm_source: str = ""
    # Properties this kit does not know (a newer kit's, a runner's own): kept, in file order, for the provenance.
    extra: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> Envelope:
        """The envelope a suite's properties state; MatrixError (one line) for one this kit cannot read."""
        schema = props.get("envelope_schema", ENVELOPE_SCHEMA)
        if schema != ENVELOPE_SCHEMA:
            raise MatrixError(f"envelope_schema {schema!r}, not {ENVELOPE_SCHEMA}: read it with the kit that wrote it")
        if "cell_id" not in props:
            raise MatrixError("no cell_id property")
        try:
            cell = Cell.parse(props["cell_id"])
        except MatrixError as exc:
            raise MatrixError(f"cell_id is not a cell: {exc}") from None
        execution = props.get("execution")
        return cls(
            cell,
            execution=_execution(execution) if execution is not None else None,
            torch_mismatch=_boolean(props, "torch_mismatch", unknown="unknown"),
            wsl=_boolean(props, "wsl"),
            extra=tuple((k, v) for k, v in props.items() if k not in _KNOWN),
            **{
                name: props.get(name, "")
                for name in (*_TEXT, *_TEXT_AFTER_MISMATCH, *_TEXT_AFTER_WSL, *_IMAGE, _SOURCE)
            },
        )

    @property
    def contradiction(self) -> str:
        """How the envelope contradicts itself, in words; empty when it does not. A run on a GPU that records no
        GPU, or a native run of a host the same envelope says it was not on, is not believed, whoever wrote it."""
        execution, host = self.execution, self.cell.host
        if execution is None or not execution.uses_gpu:
            return ""
        if self.gpu == "none":
            return "its envelope records no GPU"
        if execution is not Execution.NATIVE:
            return ""
        if self.wsl is not None and self.wsl != host.is_wsl:
            return f"its envelope says the host was {'in' if self.wsl else 'not in'} WSL"
        if self.detected_host and self.detected_host != host.value:
            return f"its envelope says the host was detected as {self.detected_host}"
        return ""

    def to_properties(self) -> dict[str, str]:
        """The suite properties, with exactly the names and spellings every kit version has written."""
        cell = self.cell
        props = {
            "envelope_schema": ENVELOPE_SCHEMA,
            "cell_id": cell.id,
            "stack": cell.stack.value,
            "host": cell.host.value,
            "runner": cell.runner.value,
            "mode": cell.mode.value,
        }
        if self.execution is not None:
            props["execution"] = self.execution.value
        props.update((name, getattr(self, name)) for name in _TEXT)
        props["torch_mismatch"] = "unknown" if self.torch_mismatch is None else str(self.torch_mismatch).lower()
        props.update((name, getattr(self, name)) for name in _TEXT_AFTER_MISMATCH)
        if self.wsl is not None:
            props["wsl"] = str(self.wsl).lower()
        props.update((name, getattr(self, name)) for name in _TEXT_AFTER_WSL)
        if self.image:
            props.update((name, getattr(self, name)) for name in _IMAGE)
        if self.vllm_source:
            props[_SOURCE] = self.vllm_source
        props.update(self.extra)
        return props


@dataclass(frozen=True)
class RunInfo:
    """Facts about the run shared by every cell in it."""

    env: EnvironmentRecord
    kit_commit: str
    runner_name: str
    started_at: str
    # Set when the cell ran inside a container image (repro/container.py): which image, exactly.
    image: str = ""
    image_digest: str = ""
    # Set for a run stopped before vLLM was installed (a misrouted runner): the release it was for.
    release: str = ""


def envelope(plan: CellPlan, run: RunInfo) -> Envelope:
    """The envelope of one planned cell of a run."""
    env = run.env
    return Envelope(
        plan.cell,
        execution=plan.execution,
        execution_reason=plan.reason,
        vllm_version=run.release or env.vllm_release,
        vllm_commit=env.vllm_commit,
        torch_version=env.torch_version or "not installed",
        torch_build=env.torch_build if env.has_torch else "",
        # A GPU-less gate runs a CPU torch that can differ from the torch the vLLM release pins.
        vllm_requires_torch=f"torch{env.vllm_requires_torch}" if env.vllm_requires_torch else "",
        torch_mismatch=env.torch_mismatch,
        kernel_release=env.kernel_release,
        wsl=env.is_wsl,
        detected_host=env.detected_host,
        gpu=env.gpu_name or "none",
        gpu_driver=env.gpu_driver,
        runner_name=run.runner_name,
        kit_commit=run.kit_commit,
        started_at=run.started_at,
        env_hash=env.env_hash,
        env_schema=env.schema,
        image=run.image,
        image_digest=run.image_digest if run.image else "",
        vllm_source=env.vllm_source,
    )


def _execution(text: str) -> Execution:
    try:
        return Execution(text)
    except ValueError:
        valid = ", ".join(e.value for e in Execution)
        raise MatrixError(f"execution {text!r} is not one of {valid}") from None


def _boolean(props: Mapping[str, str], name: str, unknown: str | None = None) -> bool | None:
    text = props.get(name)
    if text is None or text == unknown:
        return None
    if text not in _BOOLEANS:
        raise MatrixError(f"{name} {text!r} is not true or false")
    return _BOOLEANS[text]
