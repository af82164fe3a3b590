"""The offline GPU run's engine-level A/B (``wslpin-kit.engine-bench/1``): what pinned memory buys in vLLM's engine.

repro/engine_bench.py measures it and writes this record (``EngineBench.to_json``) into the run's folder as
``bench.json``; ``python -m matrix import-run`` copies it beside the results as
``results/<vLLM>/bench/gpu-run.engine-bench.json``, and the report reads it back with ``read_engine_bench``,
schema checked (schemas/engine-bench.schema.json), without numpy, torch or vLLM. The figures are computed where
they are measured: this module only carries them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matrix.cells import StrEnum
from matrix.errors import MatrixError
from matrix.host.classify import DetectedHost
from matrix.io.json_input import ENGINE_BENCH, read_json_input
from matrix.plan import Execution

ENGINE_BENCH_SCHEMA = "wslpin-kit.engine-bench/1"


class Configuration(StrEnum):
    """What a cell's engines are asked for besides the arm: no offload, or CPU weight offload (``cpu_offload_gb``,
    as the reproduction sets it)."""

    NO_OFFLOAD = "no-offload"
    OFFLOAD = "offload"


@dataclass(frozen=True)
class ModelFacts:
    architecture: str
    layers: int
    parameters: int
    dtype: str
    bytes: int  # the parameters' bytes in that dtype


@dataclass(frozen=True)
class Settings:
    rounds: int  # planned: the deadline may leave fewer (EngineBench.rounds_run)
    repetitions: int  # per engine process and batch size
    prompt_tokens: int
    decoded_tokens: int  # N: ITL = (T(N+1) - T(1)) / N
    batch_sizes: tuple[int, ...]
    engines_at_once: int  # started together; each then measures alone


@dataclass(frozen=True)
class BatchSamples:
    """One engine process's repetitions at one batch size: one ITL and one throughput per repetition."""

    batch: int
    itl_ms: tuple[float, ...]
    tokens_per_s: tuple[float, ...]


@dataclass(frozen=True)
class ProfiledGenerate:
    """One profiled generate at batch 1: the GPU's idle time per engine step, and the host-to-device copies."""

    idle_ms_per_step: float
    pageable_h2d: int
    pinned_h2d: int


@dataclass(frozen=True)
class EngineProcess:
    """One engine process of an arm: started, warmed up, measured, ended."""

    round: int
    outcome: str  # "ok", "not-measured" (the deadline came first), or the failure kind (repro/failures.py)
    message: str  # one line: why it did not measure, or was cut short; "" when it ran to its end
    start_s: float | None  # from the process's start to its engine's readiness; None: it never got there
    pin_memory: bool | None  # whether vLLM found pinned memory available in it; None: unknown
    offloaded: bool | None  # whether weights left device memory, by vLLM's account; None: no judgement
    samples: tuple[BatchSamples, ...]
    profile: ProfiledGenerate | None
    profile_reason: str  # why there is no profile; "" when there is

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass(frozen=True)
class ArmSamples:
    arm: str  # VLLM_WSL2_ENABLE_PIN_MEMORY's value (matrix.variables.GATE_PIN_VALUES)
    processes: tuple[EngineProcess, ...]


@dataclass(frozen=True)
class ArmFigure:
    """One arm's ITL over the repetitions a comparison rests on."""

    arm: str
    n: int
    median_ms: float | None
    p90_ms: float | None


@dataclass(frozen=True)
class Comparison:
    """ITL at one batch size: median(=1) / median(unset) - 1, with its 95% bootstrap interval (within rounds)."""

    batch: int
    rounds: tuple[int, ...]  # the rounds in which both arms measured: the strata
    arms: tuple[ArmFigure, ...]
    relative: float | None  # None: the comparison could not be made
    low: float | None  # None: no interval (too few repetitions, or no comparison)
    high: float | None
    resolved: bool  # the interval excludes 0
    verdict: str


@dataclass(frozen=True)
class CellBench:
    """One (cell, configuration): its two arms' engine processes and what they compare to."""

    cell: str
    configuration: Configuration
    execution: Execution  # native or emulated
    note: str  # what the figure is, and is not, on this machine
    arms: tuple[ArmSamples, ...]
    comparisons: tuple[Comparison, ...]


@dataclass(frozen=True)
class SkippedCell:
    cell: str
    reason: str


@dataclass(frozen=True)
class EngineBench:
    started_at: str
    gpu: str
    host: DetectedHost  # the machine's own, from its environment record
    vllm_version: str
    torch_version: str
    stand_in: bool  # the engines were the bench's stand-in, not vLLM: the figures measure the bench
    stand_in_reason: str  # "" when they were vLLM
    model: ModelFacts
    settings: Settings
    benches: tuple[CellBench, ...]
    skipped: tuple[SkippedCell, ...]
    rounds_run: int  # rounds run to their end
    stopped: str  # why fewer rounds than planned ran; "" when all did

    def to_json(self) -> str:
        """The record as the run writes it (``bench.json``): the one writer."""
        document = {
            "schema": ENGINE_BENCH_SCHEMA,
            "started_at": self.started_at,
            "gpu": self.gpu,
            "host": self.host.to_json(),
            "vllm_version": self.vllm_version,
            "torch_version": self.torch_version,
            "stand_in": self.stand_in,
            "stand_in_reason": self.stand_in_reason,
            "model": vars(self.model),
            "settings": {**vars(self.settings), "batch_sizes": list(self.settings.batch_sizes)},
            "rounds_run": self.rounds_run,
            "stopped": self.stopped,
            "skipped": [vars(cell) for cell in self.skipped],
            "benches": [_bench_json(bench) for bench in self.benches],
        }
        return json.dumps(document, indent=1) + "\n"


def _bench_json(bench: CellBench) -> dict[str, Any]:
    return {
        "cell": bench.cell,
        "configuration": bench.configuration.value,
        "execution": bench.execution.value,
        "note": bench.note,
        "arms": [{"arm": arm.arm, "processes": [_process_json(p) for p in arm.processes]} for arm in bench.arms],
        "comparisons": [
            {**vars(c), "rounds": list(c.rounds), "arms": [vars(arm) for arm in c.arms]} for c in bench.comparisons
        ],
    }


def _process_json(process: EngineProcess) -> dict[str, Any]:
    samples = [{**vars(s), "itl_ms": list(s.itl_ms), "tokens_per_s": list(s.tokens_per_s)} for s in process.samples]
    profile = None if process.profile is None else vars(process.profile)
    return {**vars(process), "samples": samples, "profile": profile}


def read_engine_bench(path: Path) -> EngineBench:
    """The record at ``path``, schema checked; whatever is wrong with it is one line naming the file."""
    doc = read_json_input(path, ENGINE_BENCH)
    try:
        return EngineBench(
            started_at=doc["started_at"],
            gpu=doc["gpu"],
            host=DetectedHost.from_json(doc["host"]),
            vllm_version=doc["vllm_version"],
            torch_version=doc["torch_version"],
            stand_in=doc["stand_in"],
            stand_in_reason=doc["stand_in_reason"],
            model=ModelFacts(**doc["model"]),
            settings=Settings(**{**doc["settings"], "batch_sizes": tuple(doc["settings"]["batch_sizes"])}),
            benches=tuple(_bench(bench) for bench in doc["benches"]),
            skipped=tuple(SkippedCell(**cell) for cell in doc["skipped"]),
            rounds_run=doc["rounds_run"],
            stopped=doc["stopped"],
        )
    except (KeyError, TypeError, ValueError, MatrixError) as exc:
        # What the schema cannot say: a value its own type refuses.
        raise MatrixError(
            f"{ENGINE_BENCH.option} {path} is a damaged {ENGINE_BENCH.what} ({type(exc).__name__}: {exc}): "
            f"{ENGINE_BENCH.instead}"
        ) from None


def _bench(doc: dict[str, Any]) -> CellBench:
    return CellBench(
        cell=doc["cell"],
        configuration=Configuration(doc["configuration"]),
        execution=Execution(doc["execution"]),
        note=doc["note"],
        arms=tuple(ArmSamples(arm["arm"], tuple(_process(p) for p in arm["processes"])) for arm in doc["arms"]),
        comparisons=tuple(
            Comparison(
                **{
                    **c,
                    "rounds": tuple(c["rounds"]),
                    "arms": tuple(ArmFigure(**arm) for arm in c["arms"]),
                }
            )
            for c in doc["comparisons"]
        ),
    )


def _process(doc: dict[str, Any]) -> EngineProcess:
    samples = tuple(
        BatchSamples(s["batch"], tuple(float(x) for x in s["itl_ms"]), tuple(float(x) for x in s["tokens_per_s"]))
        for s in doc["samples"]
    )
    profile = None if doc["profile"] is None else ProfiledGenerate(**doc["profile"])
    return EngineProcess(**{**doc, "samples": samples, "profile": profile})


def summary(bench: EngineBench) -> list[str]:
    """A few lines for a person: what ran, each comparison's verdict, what was skipped and why."""
    ran = f"{bench.rounds_run} of {bench.settings.rounds} rounds" + (f" ({bench.stopped})" if bench.stopped else "")
    lines = [f"engine bench on {bench.gpu or 'no GPU'}, vLLM {bench.vllm_version}: {ran}"]
    if bench.stand_in:
        lines.append(f"  a stand-in, not vLLM: {bench.stand_in_reason}")
    for cell in bench.benches:
        lines += [f"  {cell.cell} {cell.configuration}: {c.verdict}" for c in cell.comparisons]
    lines += [f"  {cell.cell}: skipped: {cell.reason}" for cell in bench.skipped]
    return lines
