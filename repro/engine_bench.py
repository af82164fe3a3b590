"""The offline GPU run's bench group: what pinned memory buys at the engine level, in vLLM's own engine.

    python -m repro.engine_bench --plan PLAN --env ENV.json --out BENCH.json [--jobs N] [--rounds R] ...

For each cell of ``BENCH_CELLS`` that the run's plan gives a GPU (native or emulated; any other is skipped with
the reason, as the cell tests skip it) and each of its configurations, two arms: ``VLLM_WSL2_ENABLE_PIN_MEMORY``
unset and ``=1``. vLLM decides once per process whether pinned memory is available, so each arm is an engine
process of its own (``python -m repro.engine_bench child SPEC RESULT``): vLLM's ``LLM`` in that process (no API
server: the lent machine lacks its dependencies), on the tiny model (repro/tinymodel.py), token-id prompts,
greedy, ``ignore_eos``. Each process starts its engine, warms it up, then per repetition times 1 and N+1 tokens
from the same prompts at each batch size (ITL = (T(N+1) - T(1)) / N), and profiles one generate for the GPU's
idle time per engine step.

Rounds: every (cell, configuration) has both its arms in a round before the next round starts, their order
alternating from round to round, so that a deadline cut leaves whole rounds. An engine takes tens of seconds to
start (compiling, capturing CUDA graphs) and seconds to measure, so the engines of a round start together,
``--jobs`` at a time, and once all are up each measures alone, in the round's order, the others idle: no engine
starts or measures beside the one measured.

The comparison, per (cell, configuration) and batch size: median(=1) / median(unset) - 1 of the ITLs, with a 95%
bootstrap interval drawing repetitions within rounds (repro/bench/stats.py), over the rounds in which both arms
measured. An arm that fails to start is a result: its failure kind (repro/failures.py), and a comparison that
says it could not be made.

One deadline, ``WSLPIN_DEADLINE`` (repro/isolation.py): every child ends by it, and no round (nor part of one) is
started that the times measured so far say cannot end before it. With ``WSLPIN_BENCH_ENGINE=stand-in`` the child
times ``StandIn`` instead of vLLM: everything else is this code, and the record says so.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

import numpy as np

from matrix.cells import Cell, Host, Runner
from matrix.errors import MatrixError
from matrix.host import reads
from matrix.host.record import EnvironmentRecord
from matrix.io.files import write_file
from matrix.plan import CellPlan, Execution, Plan, load_plan
from matrix.store.engine_bench import (
    ArmFigure,
    ArmSamples,
    BatchSamples,
    CellBench,
    Comparison,
    Configuration,
    EngineBench,
    EngineProcess,
    ModelFacts,
    ProfiledGenerate,
    Settings,
    SkippedCell,
    summary,
)
from matrix.text.cli import KIT_ROOT, run_command_line
from matrix.variables import BENCH_ENGINE, CACHE_ROOT, GATE_PIN_VALUES, PIN_MEMORY, UNSET, vllm_reads
from repro import emulation
from repro.bench import stats
from repro.bench.profile import read_trace, step_profile
from repro.engine import _without_missing_flashinfer, engine_kwargs, offload_stats
from repro.failures import FailureKind, classify, exception_text
from repro.isolation import ChildAnswer, run_json_child, time_left
from repro.offload import EngineResult, EngineRun
from repro.tinymodel import BOS_ID, CONFIG, SPECIAL_TOKENS, tensor_shapes, tiny_model

NO_OFFLOAD, OFFLOAD = Configuration.NO_OFFLOAD, Configuration.OFFLOAD
# Four configurations, eight engine processes a round: on the lent H200 they start in one wave of ten, so a round
# fits the bench's share of the run (--bench-seconds) beside the groups before it.
BENCH_CELLS: tuple[tuple[Cell, tuple[Configuration, ...]], ...] = (
    # CUDA graphs first: their engines start slowest, and the engines started together wait for the slowest.
    # The native control: pinned memory whatever the variable says, so no difference is expected.
    (Cell.parse("cuda-linux-v1-graph"), (NO_OFFLOAD,)),
    # vLLM's default, CUDA graphs, where both arms start: with offload, the arm without pinned memory fails to
    # trace under Dynamo (#37883).
    (Cell.parse("cuda-wsl2new-v1-graph"), (NO_OFFLOAD,)),
    # Where pinned memory matters most: offloaded weights copied from pageable memory every forward, or read in
    # place over UVA.
    (Cell.parse("cuda-wsl2new-v1-eager"), (OFFLOAD,)),
    # The V2 runner's UVA buffers: without pinned memory its arm fails to start (#47387), a result in itself.
    (Cell.parse("cuda-wsl2new-v2-eager"), (NO_OFFLOAD,)),
)
BASE, TEST = GATE_PIN_VALUES  # unset, =1: the comparison is TEST against BASE
ROUNDS, REPETITIONS, PROMPT_TOKENS, DECODED_TOKENS, BATCH_SIZES = 4, 5, 32, 32, (1, 8)
PROCESS_TIMEOUT = 600.0
POLL_S = 0.02
# A repetition is begun only while twice the last one's time and this are left: the result must still be written.
MARGIN_S = 1.0
# The profiled generate is left out where less than this is left to the deadline.
PROFILE_ALLOWANCE_S = 10.0
STAND_IN = "stand-in"
UNMEASURED = "the engine measured nothing"
# The stand-in's engine: it starts in STAND_IN_START_S; each token is one step of STAND_IN_STEP_S, STAND_IN_EFFECT
# shorter where the arm has pinned memory on a WSL2 host, times a noise of STAND_IN_NOISE (relative, per call).
STAND_IN_START_S, STAND_IN_STEP_S, STAND_IN_EFFECT, STAND_IN_NOISE = 0.05, 0.002, 0.12, 0.03
STAND_IN_REASON = (
    f"{BENCH_ENGINE.name}={STAND_IN}: each engine process timed a stand-in generate instead of vLLM "
    f"({STAND_IN_STEP_S * 1e3:g} ms a token, {STAND_IN_EFFECT:.0%} less where the arm has pinned memory on a WSL2 "
    "host): the figures measure the bench, not vLLM or this machine"
)


def arm_label(arm: str) -> str:
    return "pin unset" if arm == UNSET else f"pin={arm}"


@dataclass(frozen=True)
class Pair:
    """One (cell, configuration) of the bench: its two arms are compared."""

    plan: CellPlan
    configuration: Configuration

    @property
    def label(self) -> str:
        return f"{self.plan.cell.id} {self.configuration}"


@dataclass(frozen=True)
class Slot:
    """One engine process of the bench: an arm of a pair in a round."""

    pair: Pair
    arm: str
    round: int

    @property
    def key(self) -> tuple[Pair, str]:
        """What the same engine is in every round: its times estimate the next round's, and it keeps its cache."""
        return self.pair, self.arm

    @property
    def label(self) -> str:
        return f"{self.pair.label} {arm_label(self.arm)} round {self.round}"

    @property
    def engine(self) -> EngineRun:
        plan = self.pair.plan
        return EngineRun(plan.cell, self.arm, self.pair.configuration is OFFLOAD, plan.execution.presents_host)


def bench_pairs(plan: Plan) -> tuple[list[Pair], list[SkippedCell]]:
    """The (cell, configuration) pairs the plan gives a GPU, and the cells of the bench it does not, with why."""
    planned = {cell_plan.cell: cell_plan for cell_plan in plan.cells}
    pairs, skipped = [], []
    for cell, configurations in BENCH_CELLS:
        cell_plan = planned.get(cell)
        if cell_plan is None:
            skipped.append(SkippedCell(cell.id, "not in the run's plan"))
        elif not cell_plan.execution.uses_gpu:
            skipped.append(SkippedCell(cell.id, f"no GPU for this cell: {cell_plan.execution} ({cell_plan.reason})"))
        else:
            pairs += [Pair(cell_plan, configuration) for configuration in configurations]
    return pairs, skipped


def nothing_to_bench(plan: Plan) -> str:
    """Why the bench has nothing to run under ``plan``; "" where it has."""
    pairs, skipped = bench_pairs(plan)
    if pairs:
        return ""
    by_reason: dict[str, list[str]] = {}
    for cell in skipped:
        by_reason.setdefault(cell.reason, []).append(cell.cell)
    return "no cell of the bench has a GPU here: " + "; ".join(f"{', '.join(c)}: {r}" for r, c in by_reason.items())


def round_slots(pairs: list[Pair], number: int) -> list[Slot]:
    """Round ``number``'s engine processes in the order they measure: pair by pair, the arms' order alternating."""
    arms = (BASE, TEST) if number % 2 else (TEST, BASE)
    return [Slot(pair, arm, number) for pair in pairs for arm in arms]


def waves(slots: list[Slot], size: int) -> list[list[Slot]]:
    """``slots`` in groups of ``size`` that start together: an even size, so that a pair's arms start together."""
    return [slots[i : i + size] for i in range(0, len(slots), size)]


def wave_seconds(wave: list[Slot], starts: dict[Any, float], measures: dict[Any, float]) -> float:
    """How long ``wave`` takes by the times measured so far: its slowest start, then each measurement in turn.

    An engine not measured yet is taken to be as slow as the slowest that was. Before any engine started there is
    nothing to go by: 0, and the first wave starts (the deadline still ends its children).
    """
    slowest_start, slowest_measure = max(starts.values(), default=0.0), max(measures.values(), default=0.0)
    return max(starts.get(slot.key, slowest_start) for slot in wave) + sum(
        measures.get(slot.key, slowest_measure) for slot in wave
    )


def note(plan: CellPlan) -> str:
    """What a pair's figure is, and is not, for a reader."""
    if plan.execution is Execution.EMULATED:
        return (
            "emulated: vLLM was shown a WSL2 kernel on native Linux, so the figure is vLLM's code path under each "
            "arm on native Linux, not WSL2's cost, which comes only from real WSL2 machines"
        )
    if plan.cell.host is Host.LINUX:
        return (
            f"native Linux, the control: pinned memory is available whatever {PIN_MEMORY.name} says, "
            "so no difference is expected"
        )
    return f"native {plan.cell.host}: the figure is what this machine's engine gains from {PIN_MEMORY.name}=1"


def model_facts() -> ModelFacts:
    parameters = sum(math.prod(shape) for shape in tensor_shapes().values())
    dtype = CONFIG["torch_dtype"]
    return ModelFacts(
        CONFIG["architectures"][0],
        CONFIG["num_hidden_layers"],
        parameters,
        dtype,
        parameters * np.dtype(dtype).itemsize,
    )


def prompts_for(batch: int, length: int) -> list[list[int]]:
    """``batch`` prompts of ``length`` token ids past the special ones, different per request, the same everywhere."""
    ordinary = CONFIG["vocab_size"] - len(SPECIAL_TOKENS)
    return [
        [BOS_ID] + [len(SPECIAL_TOKENS) + (31 * request + 7 * position) % ordinary for position in range(length - 1)]
        for request in range(batch)
    ]


def _finite(value: float) -> float | None:
    """JSON has no NaN: an undefined figure is None."""
    return round(value, 4) if math.isfinite(value) else None


def verdict(batch: int, diff: stats.Difference | None, rounds: list[int], why_not: str) -> str:
    """The comparison in the bench's words: who is faster by how much and how sure, or why there is no answer."""
    what = f"ITL at batch {batch}"
    if diff is None:
        return f"{what}: the comparison could not be made: {why_not}"
    versus = f"{arm_label(TEST)} vs {arm_label(BASE)}"
    over = f"{diff.n_base}+{diff.n_test} repetitions in {len(rounds)} round{'s' * (len(rounds) != 1)}"
    if math.isnan(diff.low):
        return (
            f"{what}: {versus} {diff.relative:+.1%}, too few repetitions for an interval "
            f"({over}; at least {stats.MIN_PER_ARM} per arm)"
        )
    if not diff.resolved:
        interval = f"[{diff.low:+.1%}, {diff.high:+.1%}]"
        return f"{what}: no difference resolved ({versus} {diff.relative:+.1%} {interval}, {over})"
    low, high = sorted((abs(diff.low), abs(diff.high)))
    faster = "faster" if diff.relative < 0 else "slower"
    return (
        f"{what}: {arm_label(TEST)} {abs(diff.relative):.1%} {faster} than {arm_label(BASE)} "
        f"[{low:.1%}, {high:.1%}] ({diff.confidence:.0%} CI, {over})"
    )


def _why_not(arms: dict[str, list[EngineProcess]]) -> str:
    """Why no round has both arms measured."""
    failed = []
    for arm, processes in arms.items():
        if not any(p.ok for p in processes):
            outcomes = sorted({p.outcome for p in processes})
            failed.append(f"{arm_label(arm)} measured in no round ({', '.join(outcomes) or 'never started'})")
    return "; ".join(failed) or "no round in which both arms measured"


def comparisons(arms: dict[str, list[EngineProcess]], batch_sizes: tuple[int, ...], seed: int) -> list[Comparison]:
    """Per batch size, TEST's ITL against BASE's over the rounds in which both measured, repetitions the unit."""
    measured = {arm: {p.round: p for p in processes if p.ok} for arm, processes in arms.items()}
    rounds = sorted(set(measured[BASE]) & set(measured[TEST]))
    found = []
    for index, batch in enumerate(batch_sizes):
        strata = {
            arm: [next((s.itl_ms for s in by_round[r].samples if s.batch == batch), ()) for r in rounds]
            for arm, by_round in measured.items()
        }
        diff = stats.compare(strata[BASE], strata[TEST], seed=seed + index) if rounds else None
        figures = []
        for arm in (BASE, TEST):
            spread = stats.Spread.of([x for stratum in strata[arm] for x in stratum])
            figures.append(ArmFigure(arm, spread.n, _finite(spread.median), _finite(spread.p90)))
        found.append(
            Comparison(
                batch=batch,
                rounds=tuple(rounds),
                arms=tuple(figures),
                relative=None if diff is None else _finite(diff.relative),
                low=None if diff is None else _finite(diff.low),
                high=None if diff is None else _finite(diff.high),
                resolved=bool(diff and diff.resolved),
                verdict=verdict(batch, diff, rounds, _why_not(arms)),
            )
        )
    return found


def engine_process(slot: Slot, child: ChildAnswer, start_s: float) -> EngineProcess:
    """What one engine process left: its samples, or why it has none, as the record keeps it."""
    answer = child.answer
    if answer is None:
        kind = FailureKind.TIMEOUT if child.run.timed_out else classify(child.run.output)
        return EngineProcess(slot.round, str(kind), _last_line(child.no_answer), None, None, None, (), None, UNMEASURED)
    if answer["status"] == "failed":
        error = answer["error"]
        kind = classify(f"{error}\n{child.run.output}")
        return EngineProcess(slot.round, str(kind), exception_text(error), None, None, None, (), None, UNMEASURED)
    samples = tuple(
        BatchSamples(s["batch"], tuple(s["itl_ms"]), tuple(s["tokens_per_s"])) for s in answer.get("samples", ())
    )
    profile = answer.get("profile")
    return EngineProcess(
        round=slot.round,
        outcome="ok" if answer["status"] == "ok" else "not-measured",
        message=answer.get("message", ""),
        start_s=round(start_s, 1),
        pin_memory=answer["pin_memory"],
        offloaded=answer["offloaded"],
        samples=samples,
        profile=None if profile is None else ProfiledGenerate(**profile),
        profile_reason=answer.get("profile_reason", UNMEASURED),
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _left() -> str:
    left = time_left(math.inf)
    return "no deadline" if math.isinf(left) else f"{left:.0f} s left"


def _said(done: Measured) -> str:
    """The log's line for one engine process."""
    process, label = done.process, done.slot.label
    if process.ok:
        itl = stats.Spread.of(process.samples[0].itl_ms).median
        cut = f" ({process.message})" if process.message else ""
        took = f"started in {done.start_s:.0f} s, measured in {done.measure_s:.0f} s"
        return f"bench: {label}: ITL {itl:.1f} ms, {took}{cut}; {_left()}"
    seconds = done.start_s + done.measure_s
    return f"bench: {label}: {process.outcome} after {seconds:.0f} s ({process.message}); {_left()}"


@dataclass(frozen=True)
class Measured:
    """One engine process as the parent saw it: what it left, how long it took to start, then to measure."""

    slot: Slot
    process: EngineProcess
    start_s: float
    measure_s: float


def child_spec(slot: Slot, settings: Settings, model: Path, signals: Path) -> dict[str, Any]:
    """What the engine child is told: the reproduction's engine spec, and the bench's part, with the two files by
    which it says it is up (``ready``) and is told to measure or not (``go``)."""
    name = f"{slot.pair.plan.cell.id}-{slot.pair.configuration}-{slot.arm}-{slot.round}"
    bench = {
        "cell": slot.pair.plan.cell.id,
        "configuration": slot.pair.configuration.value,
        "arm": slot.arm,
        "round": slot.round,
        "prompt_tokens": settings.prompt_tokens,
        "decoded_tokens": settings.decoded_tokens,
        "repetitions": settings.repetitions,
        "batch_sizes": list(settings.batch_sizes),
        "ready": str(signals / f"{name}.ready"),
        "go": str(signals / f"{name}.go"),
    }
    return {**slot.engine.spec(model), "bench": bench}


def child_env(slot: Slot, caches: Path) -> dict[str, str]:
    # vLLM keys its compile cache on nothing about WSL2 or pinned memory (repro/offload.py): each arm of each pair
    # keeps one of its own, which its next rounds reuse, as a user's engine reuses its own.
    cache = caches / f"{slot.pair.plan.cell.id}-{slot.pair.configuration}-{slot.arm}"
    return slot.engine.env(dict(os.environ)) | {CACHE_ROOT.name: str(cache)}


def run_wave(
    slots: list[Slot],
    specs: list[dict[str, Any]],
    envs: list[dict[str, str]],
    measures: dict[Any, float],
    done: Callable[[Measured], None],
) -> None:
    """Start the engines of ``slots`` together; once all are up (or gone), let each measure alone, in order, and
    give ``done`` each as it ends.

    ``measures`` (seconds per engine, from earlier rounds) says which can still end by the deadline.
    """
    argv = [[sys.executable, "-m", "repro.engine_bench", "child", json.dumps(spec)] for spec in specs]
    ready_files = [Path(spec["bench"]["ready"]) for spec in specs]
    go_files = [Path(spec["bench"]["go"]) for spec in specs]
    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        began = time.monotonic()
        children = [pool.submit(run_json_child, argv[i], envs[i], PROCESS_TIMEOUT) for i in range(len(slots))]
        try:
            ready: dict[int, float] = {}
            while len(ready) < len(slots):
                for i in range(len(slots)):
                    if i not in ready and (children[i].done() or ready_files[i].exists()):
                        ready[i] = time.monotonic() - began
                time.sleep(POLL_S)
            for i, slot in enumerate(slots):
                went = time.monotonic()
                if not children[i].done():
                    # An engine whose measurement cannot end by the deadline is told to end without one.
                    fits = measures.get(slot.key, max(measures.values(), default=0.0)) < time_left(math.inf)
                    _write_whole(go_files[i], "go" if fits else "stop")
                process = engine_process(slot, children[i].result(), ready[i])
                done(Measured(slot, process, ready[i], time.monotonic() - went))
        finally:
            # Stopped from outside: the engines still waiting for their turn end now, not at their timeout.
            for go in go_files:
                if not go.exists():
                    _write_whole(go, "stop")


def _write_whole(path: Path, text: str) -> None:
    """``text`` at ``path``, whole or not at all: the other side polls for it."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def why_not_started(
    number: int, part: int, planned: list[list[Slot]], starts: dict[Any, float], measures: dict[Any, float]
) -> str:
    """Why round ``number``'s wave ``part`` cannot start, by the times measured so far; "" where it can.

    A round is begun only where all of it fits before the deadline, a later wave of one where that wave does.
    """
    left = time_left(math.inf)
    which = f"round {number}" + (f", wave {part + 1} of {len(planned)}," if part else "")
    if left <= 0:
        return f"{which} not started: the run's deadline had passed"
    need = sum(wave_seconds(wave, starts, measures) for wave in (planned if part == 0 else planned[part : part + 1]))
    if need > left:
        return f"{which} not started: by the times measured so far it needs about {need:.0f} s, {left:.0f} s were left"
    return ""


def run_bench(
    plan: Plan,
    env: EnvironmentRecord,
    out: Path,
    settings: Settings,
    model_cache: Path,
    say: Callable[[str], None] = print,
) -> EngineBench:
    """The whole bench within the run's deadline; its record rewritten at ``out`` after every wave."""
    engine = os.environ.get(BENCH_ENGINE.name, "")
    if engine not in ("", *BENCH_ENGINE.values):
        raise MatrixError(f"{BENCH_ENGINE.name}={engine!r}: the bench knows only {STAND_IN!r} (or the variable unset)")
    pairs, skipped = bench_pairs(plan)
    for cell in skipped:
        say(f"bench: {cell.cell} skipped: {cell.reason}")
    model = tiny_model(model_cache)
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    processes: dict[tuple[Pair, str], list[EngineProcess]] = {(pair, arm): [] for pair in pairs for arm in (BASE, TEST)}
    starts: dict[tuple[Pair, str], float] = {}
    measures: dict[tuple[Pair, str], float] = {}
    rounds_run, stopped = 0, ""

    def keep(done: Measured) -> None:
        processes[done.slot.key].append(done.process)
        starts[done.slot.key] = done.start_s
        if done.process.ok:
            measures[done.slot.key] = done.measure_s
        say(_said(done))

    def record() -> EngineBench:
        benches = []
        for index, pair in enumerate(pairs):
            arms = {arm: processes[pair, arm] for arm in (BASE, TEST)}
            benches.append(
                CellBench(
                    cell=pair.plan.cell.id,
                    configuration=pair.configuration,
                    execution=pair.plan.execution,
                    note=note(pair.plan),
                    arms=tuple(ArmSamples(arm, tuple(found)) for arm, found in arms.items()),
                    comparisons=tuple(comparisons(arms, settings.batch_sizes, seed=100 * index)),
                )
            )
        bench = EngineBench(
            started_at=started_at,
            gpu=env.gpu_name,
            host=env.detected,
            vllm_version=env.vllm_release,
            torch_version=env.torch_version,
            stand_in=engine == STAND_IN,
            stand_in_reason=STAND_IN_REASON if engine == STAND_IN else "",
            model=model_facts(),
            settings=settings,
            benches=tuple(benches),
            skipped=tuple(skipped),
            rounds_run=rounds_run,
            stopped=stopped,
        )
        write_file(out.parent, out.name, bench.to_json().encode())
        return bench

    # Without a pair the record says only which cells were skipped, and why.
    rounds = range(1, settings.rounds + 1) if pairs else range(0)
    if pairs:
        count = f"{len(pairs)} cell configurations, 2 arms each, at most {settings.rounds} rounds"
        say(f"bench: {count}, {settings.engines_at_once} engines started at a time; {_left()}")
    with tempfile.TemporaryDirectory(prefix="wslpin-bench-") as tmp:
        signals, caches = Path(tmp) / "signals", Path(tmp) / "caches"
        signals.mkdir()
        for number in rounds:
            planned = waves(round_slots(pairs, number), settings.engines_at_once)
            for part, slots in enumerate(planned):
                stopped = why_not_started(number, part, planned, starts, measures)
                if stopped:
                    break
                specs = [child_spec(slot, settings, model, signals) for slot in slots]
                run_wave(slots, specs, [child_env(slot, caches) for slot in slots], measures, keep)
                record()
            if stopped:
                say(f"bench: {stopped}")
                break
            rounds_run = number
    bench = record()
    for line in summary(bench):
        say(line)
    return bench


# --- The engine child ------------------------------------------------------------------------------------------


class Engine(Protocol):
    """What the child measures: vLLM's engine, or the stand-in."""

    pin_memory: bool | None
    offloaded: bool | None

    def generate(self, prompts: list[list[int]], tokens: int) -> None: ...

    def profile(self, prompts: list[list[int]], tokens: int) -> tuple[dict[str, Any] | None, str]: ...


class VllmEngine:
    """vLLM's ``LLM`` in this process on the tiny model, the cell's host presented first where the plan emulates it."""

    def __init__(self, spec: dict[str, Any]) -> None:
        if spec["present_host"]:
            emulation.present_host(Host(spec["host"]))
        else:
            reads.record("engine bench child: vLLM sees this machine's uname")
        from vllm import LLM, SamplingParams

        _without_missing_flashinfer()
        # No tokenizer: the prompts are token ids, and no step spends time on text.
        self._llm = LLM(**engine_kwargs(spec), skip_tokenizer_init=True)
        self._params = SamplingParams
        self.pin_memory: bool | None = self._pin_memory()
        try:
            moved = self._llm.apply_model(offload_stats)[0]
        except Exception:  # noqa: BLE001 - a release without the means: no judgement, the figures still count
            moved = {}
        run = EngineRun(Cell.parse(spec["bench"]["cell"]), spec["bench"]["arm"], spec["offload"], spec["present_host"])
        self.offloaded: bool | None = EngineResult(run, "ok", offload=moved).offload_proven

    @staticmethod
    def _pin_memory() -> bool | None:
        try:
            from vllm.platforms import current_platform

            return bool(current_platform.is_pin_memory_available())
        except Exception:  # noqa: BLE001 - a release that cannot say: unknown
            return None

    def generate(self, prompts: list[list[int]], tokens: int) -> None:
        params = self._params(temperature=0.0, max_tokens=tokens, ignore_eos=True, detokenize=False)
        outputs = self._llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        made = [len(o.outputs[0].token_ids) for o in outputs]
        if made != [tokens] * len(prompts):
            raise RuntimeError(f"asked for {tokens} tokens per request, vLLM made {made}")

    def profile(self, prompts: list[list[int]], tokens: int) -> tuple[dict[str, Any] | None, str]:
        """The GPU's idle time per engine step over one generate, and its host-to-device copies, from torch's
        profiler (its CUDA activity only: the trace stays small). A request of ``tokens`` tokens at batch 1 is
        that many engine steps, its prefill's included."""
        import torch

        if not torch.cuda.is_available():
            return None, "no CUDA device in this process: nothing to profile"
        from torch.profiler import ProfilerActivity, profile

        try:
            with tempfile.TemporaryDirectory(prefix="wslpin-profile-") as tmp:
                with profile(activities=[ProfilerActivity.CUDA]) as profiler:
                    self.generate(prompts, tokens)
                trace = Path(tmp) / "trace.json"
                profiler.export_chrome_trace(str(trace))
                figures = step_profile(read_trace(trace), tokens)
        except Exception as exc:  # noqa: BLE001 - no profile is a figure left out, with why
            return None, f"the profiler gave nothing to read: {type(exc).__name__}: {exc}"
        idle = {"idle_ms_per_step": round(figures.idle_ms_per_step, 4)}
        return idle | {"pageable_h2d": figures.pageable_h2d, "pinned_h2d": figures.pinned_h2d}, ""


class StandIn:
    """The bench's engine where ``WSLPIN_BENCH_ENGINE=stand-in``: no GPU, no vLLM, the same calls.

    Pinned memory as vLLM decides it for the cell's host (native Linux: always; a new WSL2 kernel: with the opt-in;
    an old one: never). Each token is one step of STAND_IN_STEP_S, STAND_IN_EFFECT shorter with pinned memory on a
    WSL2 host. Each call's noise is drawn from its cell, configuration, round and place in the process, not its arm:
    a zero effect is zero up to the machine's own jitter, so that a check for no resolved difference does not fail
    one run in twenty by chance. Without pinned memory its V2 runner does not start, as vLLM's 0.24-0.29 does not.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        bench = spec["bench"]
        cell = Cell.parse(bench["cell"])
        host = cell.host
        opted_in = vllm_reads(os.environ.get(PIN_MEMORY.name, "0")) is True
        self.pin_memory: bool | None = host is Host.LINUX or (host is Host.WSL2NEW and opted_in)
        self.offloaded: bool | None = None
        if cell.runner is Runner.V2 and not self.pin_memory:
            raise RuntimeError("UVA is not available: the stand-in's V2 runner, as vLLM's without pinned memory")
        time.sleep(STAND_IN_START_S)
        self._step = STAND_IN_STEP_S * (1 - STAND_IN_EFFECT if self.pin_memory and host.is_wsl else 1)
        self._seed = f"{cell.id}/{bench['configuration']}/{bench['round']}"
        self._calls = 0

    def generate(self, prompts: list[list[int]], tokens: int) -> None:
        self._calls += 1
        noise = random.Random(f"{self._seed}/{self._calls}").gauss(1.0, STAND_IN_NOISE)
        time.sleep(tokens * self._step * noise)

    def profile(self, prompts: list[list[int]], tokens: int) -> tuple[dict[str, Any] | None, str]:
        return None, "the stand-in runs no GPU: nothing to profile"


def _timed(engine: Engine, prompts: list[list[int]], tokens: int) -> float:
    began = time.perf_counter()
    engine.generate(prompts, tokens)
    return time.perf_counter() - began


def measure(engine: Engine, bench: dict[str, Any]) -> dict[str, Any]:
    """A warm-up, the repetitions (each: 1 and N+1 tokens at each batch size), then one profiled generate; "not
    measured" where the deadline leaves no repetition."""
    decoded, repetitions = bench["decoded_tokens"], bench["repetitions"]
    prompts = {batch: prompts_for(batch, bench["prompt_tokens"]) for batch in bench["batch_sizes"]}
    for batch_prompts in prompts.values():
        engine.generate(batch_prompts, decoded + 1)
    itl: dict[int, list[float]] = {batch: [] for batch in prompts}
    rate: dict[int, list[float]] = {batch: [] for batch in prompts}
    message, last = "", 0.0
    for repetition in range(repetitions):
        if time_left(math.inf) < 2 * last + MARGIN_S:
            message = f"cut by the run's deadline after {repetition} of {repetitions} repetitions"
            break
        began = time.monotonic()
        for batch, batch_prompts in prompts.items():
            one = _timed(engine, batch_prompts, 1)
            more = _timed(engine, batch_prompts, decoded + 1)
            itl[batch].append(round((more - one) / decoded * 1e3, 4))
            rate[batch].append(round(batch * (decoded + 1) / more, 1))
        last = time.monotonic() - began
    if not itl[bench["batch_sizes"][0]]:
        return {"status": "not-measured", "message": "cut by the run's deadline before its first repetition"}
    if time_left(math.inf) < PROFILE_ALLOWANCE_S:
        profile, reason = None, "not profiled: the run's deadline was near"
    else:
        profile, reason = engine.profile(prompts[bench["batch_sizes"][0]], decoded + 1)
    return {
        "status": "ok",
        "samples": [{"batch": b, "itl_ms": itl[b], "tokens_per_s": rate[b]} for b in prompts],
        "message": message,
        "profile": profile,
        "profile_reason": reason,
    }


def _await(path: Path) -> str:
    """What the parent wrote at ``path`` once it does: "go" or "stop" ("stop" too once the deadline has passed)."""
    while not path.exists():
        if time_left(math.inf) <= 0:
            return "stop"
        time.sleep(POLL_S)
    return path.read_text()


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One engine process: start, say so, wait for its turn, measure."""
    bench = spec["bench"]
    try:
        engine: Engine = StandIn(spec) if os.environ.get(BENCH_ENGINE.name) == STAND_IN else VllmEngine(spec)
    except BaseException:  # noqa: BLE001 - an engine that does not start is the result
        return {"status": "failed", "error": traceback.format_exc()}
    found = {"pin_memory": engine.pin_memory, "offloaded": engine.offloaded}
    _write_whole(Path(bench["ready"]), "ready")
    if _await(Path(bench["go"])) != "go":
        return {"status": "not-measured", **found, "message": "its measurement could not end by the run's deadline"}
    try:
        return {**found, **measure(engine, bench)}
    except BaseException:  # noqa: BLE001 - a generate that fails is the result
        return {"status": "failed", "error": traceback.format_exc()}


def child_main(argv: list[str]) -> NoReturn:
    spec, result_path = argv
    result = child(json.loads(spec))
    # Whole or not at all: the parent may kill this process at any moment.
    _write_whole(Path(result_path), json.dumps(result, default=str))
    # The result is safe: leave without vLLM's teardown (repro/engine.py says why).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# --- The command ----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m repro.engine_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True, help="the run's plan (`python -m matrix plan --env ENV --out`)")
    parser.add_argument("--env", required=True, help="the run's environment record (`python -m matrix env --out`)")
    parser.add_argument("--out", required=True, help="where the record goes (the run's $OUT/bench.json)")
    parser.add_argument("--jobs", type=int, required=True, help="engines started at a time (each then measures alone)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds at most: the deadline may leave fewer")
    parser.add_argument("--repetitions", type=int, default=REPETITIONS, help="per engine process and batch size")
    parser.add_argument("--tokens", type=int, default=DECODED_TOKENS, help="N, the tokens decoded after the first")
    parser.add_argument("--model-cache", default=str(KIT_ROOT / "build"), help="where the tiny model is built")
    parser.set_defaults(func=_cmd_bench)
    return parser


def _cmd_bench(args: argparse.Namespace) -> int:
    for name in ("jobs", "rounds", "repetitions", "tokens"):
        if getattr(args, name) < 1:
            raise MatrixError(f"--{name} {getattr(args, name)} leaves nothing to measure: give 1 or more")
    again = "give the one the run wrote with `python -m matrix env --out`"
    env = EnvironmentRecord.read(Path(args.env), f"environment record {args.env}", again)
    # The two arms of a pair start together.
    engines_at_once = max(2, args.jobs - args.jobs % 2)
    settings = Settings(args.rounds, args.repetitions, PROMPT_TOKENS, args.tokens, BATCH_SIZES, engines_at_once)
    run_bench(load_plan(Path(args.plan)), env, Path(args.out), settings, Path(args.model_cache), say=_say)
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["child"]:
        child_main(argv[1:])
    return run_command_line(build_parser, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
