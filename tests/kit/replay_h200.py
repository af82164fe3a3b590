"""A pytest plugin for tests/cell/test_repro.py: what vLLM 0.26.0 did on an H200, in place of the GPU.

No GPU can exist here. With this plugin (``pytest -p replay_h200``, tests/kit on PYTHONPATH) and a
plan that stands in for an H200 on native Linux, the reproduction's cases get, instead of engine
runs, gate answers and probe sections, the outcomes measured with vLLM 0.26.0 on an H200
(docs/research/vllm-pinned-memory.md, "Measured with real vLLM 0.26.0 on an H200"). Every
value here replays that measurement; none is a measurement of this machine. Where the table does
not measure a run, the outcome is derived from the mechanism it measured, and the comment says so.

The stand-ins take the place of the session's fixtures by direct parametrization, pytest's way
to override a fixture from outside its file (a plugin's own fixture would lose to the test
file's and the conftest's), so every case's id ends in ``h200-0.26.0``.
"""

from __future__ import annotations

import pytest

from matrix.cells import CELLS, Host, Mode, Runner, Stack
from matrix.plan import Execution
from matrix.variables import GATE_PIN_VALUES, UNSET
from repro.gate import GateRequest
from repro.isolation import Outcome
from repro.offload import EngineResult, EngineRun
from repro.probe import SECTIONS, SectionResult

# The release the outcomes were measured with, so the rules judge them as that release: the
# vLLM installed here (the gate-only 0.33.0) runs nothing in a replay.
VLLM = "0.26.0"
REPLAY_ID = f"h200-{VLLM}"
REPLAYED_CELLS = [cell for cell in CELLS if cell.stack is Stack.CUDA]

# The measured model: a 4-layer Llama (hidden 256, intermediate 512, vocab 1024) in float16. Of
# its 27 parameters, cpu_offload_gb=1 offloads the 24 of its decoder layers.
PARAMS, OFFLOADED = 27, 24
LAYERS_BYTES = 2 * 4 * (256 * 768 + 256 * 256 + 256 * 1024 + 512 * 256 + 2 * 256)
REST_BYTES = 2 * (1024 * 256 + 256 + 256 * 1024)  # embedding, final norm, output layer
# Greedy tokens were identical in every run that completed; these ids stand in for them.
TOKENS = [[17, 301, 44, 44, 902, 5, 61, 61, 7, 230, 230, 18, 999, 3, 3, 512]] * 2

ENGINE_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/kit/repro/engine.py", line 109, in run\n'
    "    llm = LLM(**engine_kwargs(spec))\n"
    '  File "/vllm/entrypoints/llm.py", in __init__\n'
    "    self.llm_engine = LLMEngine.from_engine_args(...)\n"
)
# The error lines are the ones measured; the frames and the log around them are written here.
DYNAMO_FAILURE = (
    ENGINE_FRAMES + '  File "/vllm/v1/worker/gpu_model_runner.py", in profile_run\n'
    "    self._dummy_run(...)\n"
    '  File "/torch/_dynamo/symbolic_convert.py", in call_function\n'
    "    unimplemented(...)\n"
    "torch._dynamo.exc.Unsupported: Failed to trace builtin operator `setattr` with argument types "
    "['OrderedDict', 'str', 'OrderedDict']\n"
)
UVA_FAILURE = (
    ENGINE_FRAMES + '  File "/vllm/v1/worker/gpu/buffer_utils.py", in __init__\n'
    "    raise RuntimeError(...)\n"
    "RuntimeError: UVA is not available\n"
)
# What run_engine appends: the tail of the child's output. On WSL2 it speaks of pinned memory,
# which must not mislead the classifier.
LOG_TAIL = "\n--- process output (tail) ---\nINFO engine: loading the model's weights\n"
WSL_LOG_TAIL = LOG_TAIL + "WARNING platform: WSL detected, so no pinned memory; this may slow down copies\n"


def _pins(host: Host, pin_env: str) -> bool:
    """Pinned memory and UVA as 0.26.0 decided on the H200 (the table's "pin / UVA" column).

    Measured: native Linux pins; WSL2 (a 5.15 kernel) pins only with the variable set. Derived:
    an old WSL2 kernel never pins, whatever the variable (the kernel gate, 0.24 onwards).
    """
    return host is Host.LINUX or (host is Host.WSL2NEW and pin_env != UNSET)


def _works(run: EngineRun, offloaded: int, on_cpu: bool) -> EngineResult:
    moved = LAYERS_BYTES if offloaded else 0
    stats = {
        "params": PARAMS,
        "uva": 0 if on_cpu else offloaded,
        "on_cpu": offloaded if on_cpu else 0,
        "pinned_cpu": 0,  # without UVA there was no pinned memory to copy from (WSL2's default, the minimal form)
        "device_weight_bytes": REST_BYTES + LAYERS_BYTES - moved,
        "offloader": "UVAOffloader" if offloaded else "NoopOffloader",
        "offloaded_bytes": moved,
    }
    return EngineResult(run, "ok", TOKENS, stats, seconds=40.0)


def _failed(run: EngineRun, traceback: str) -> EngineResult:
    tail = WSL_LOG_TAIL if run.cell.host is not Host.LINUX else LOG_TAIL
    return EngineResult(run, "failed", message=traceback + tail, seconds=35.0)


def measured(run: EngineRun) -> EngineResult:
    cell, pinned = run.cell, _pins(run.cell.host, run.pin_env)
    if cell.runner is Runner.V2 and not pinned:
        # Measured: WSL2, V2, graph, no offload, unset. Derived for eager mode and with offload:
        # the V2 runner builds its UVA buffers at start, before either matters.
        return _failed(run, UVA_FAILURE)
    if not run.offload:
        # Measured: V1, graph, and WSL2, V2, graph with the variable set. Derived for the others,
        # which differ from these only in what an offloader or the V2 buffers would do.
        return _works(run, 0, on_cpu=False)
    if cell.runner is Runner.V2:
        # Measured: V2, graph, offload: 0 of 27 offloaded, as 0.26.0's V2 runner creates no offloader.
        # Derived for eager mode and for the minimal form, whose switches act on an offloader only.
        return _works(run, 0, on_cpu=False)
    if pinned and not run.minimal:
        # Measured: V1, graph, offload on Linux, and on WSL2 with the variable set: 24 UVA views.
        # Derived for eager mode: the offloader does not look at the graph mode.
        return _works(run, OFFLOADED, on_cpu=False)
    if cell.mode is Mode.GRAPH:
        # Measured: V1, graph, offload with the minimal form's switches, and on WSL2 unset. Derived for
        # an old WSL2 kernel, which leaves the offloader the same pageable copy.
        return _failed(run, DYNAMO_FAILURE)
    # Measured: V1, eager, offload with the minimal form's switches, and on WSL2 unset: 24 on the CPU.
    return _works(run, OFFLOADED, on_cpu=True)


def _execution(host: Host) -> Execution:
    """How an H200 on native Linux plans a CUDA cell."""
    return Execution.NATIVE if host is Host.LINUX else Execution.EMULATED


def _gate_answer(request: GateRequest) -> Outcome:
    # Not vLLM's gate run here: for a cell planned on a GPU the gate stubs nothing, and without one
    # vLLM falls back to its unspecified platform (a new WSL2 kernel with the variable set then
    # reads as unpinned), so the H200's own answers are replayed instead.
    pins = _pins(request.host, request.pin_env)
    # The UVA offloader takes UVA where it exists; without pinned memory it copies pageable weights.
    path = "uva" if pins else "pageable-copy"
    return Outcome("ok", {"imports": True, "pin": pins, "uva": pins, "offload_path": path})


def _engine_results() -> dict[EngineRun, EngineResult]:
    runs = [
        EngineRun(cell, pin_env, offload, _execution(cell.host) is Execution.EMULATED, minimal)
        for cell in REPLAYED_CELLS
        for pin_env in GATE_PIN_VALUES
        for offload in (True, False)
        for minimal in (False, True)
    ]
    return {run: measured(run) for run in runs}


def _gate_outcomes() -> dict[GateRequest, Outcome]:
    requests = [
        GateRequest.for_cell(cell, pin_env, _execution(cell.host))
        for cell in REPLAYED_CELLS
        for pin_env in GATE_PIN_VALUES
    ]
    return {request: _gate_answer(request) for request in requests}


# The bare-torch probe measures this machine's GPU; the table measured no probe run, so none is replayed.
PROBE_NOT_REPLAYED = "replay: the probe measures this machine's GPU, and the 0.26.0 table holds no probe run"
PROBE = {name: SectionResult(name, "skipped", message=PROBE_NOT_REPLAYED) for name in SECTIONS}

STAND_INS = {
    "vllm_version": VLLM,
    "engine_results": _engine_results(),
    "gate_outcomes": _gate_outcomes(),
    "probe_results": PROBE,
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = [name for name in STAND_INS if name in metafunc.fixturenames]
    if names:
        values = [STAND_INS[name] for name in names]
        metafunc.parametrize(names, [pytest.param(*values, id=REPLAY_ID)], scope="session")
