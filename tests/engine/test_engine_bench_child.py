"""The engine bench's child (`python -m repro.engine_bench child SPEC RESULT`) against a real vLLM engine on the CPU.

One engine process as the offline GPU run's bench starts it (repro/engine_bench.py), told at once that it is its
turn: it must start vLLM's engine without a tokenizer, say it is up, warm up, time its repetitions, find no CUDA
device to profile, write its result and exit 0. The figures time vLLM's CPU backend, no cell: nothing here is
evidence.
"""

import json
import math
import sys
import time
from pathlib import Path

from matrix.cells import Cell
from matrix.plan import CellPlan, Execution
from matrix.store.engine_bench import Configuration, Settings
from matrix.variables import UNSET
from repro.engine_bench import PROMPT_TOKENS, Pair, Slot, child_env, child_spec, engine_process
from repro.isolation import run_json_child

CELL = Cell.parse("cuda-linux-v1-eager")  # eager: vLLM's CPU backend compiles slowly and has no graphs


def test_the_bench_child_times_vllms_engine_and_says_why_it_has_no_profile(model, tmp_path):
    plan = CellPlan(CELL, Execution.NATIVE, "vLLM's CPU backend: the bench child's plumbing")
    slot = Slot(Pair(plan, Configuration.NO_OFFLOAD), UNSET, 1)
    settings = Settings(1, 2, PROMPT_TOKENS, 4, (1, 2), 2)
    spec = child_spec(slot, settings, model, tmp_path)
    Path(spec["bench"]["go"]).write_text("go")  # its turn as soon as it is up
    started = time.monotonic()
    done = run_json_child(
        [sys.executable, "-m", "repro.engine_bench", "child", json.dumps(spec)],
        env=child_env(slot, tmp_path / "caches"),
        timeout=600,
    )
    seconds = time.monotonic() - started
    assert done.run.returncode == 0, done.run.output
    process = engine_process(slot, done, seconds)
    assert process.ok, f"{process.outcome}: {process.message}\n{done.run.output}"
    assert Path(spec["bench"]["ready"]).exists()
    assert [(s.batch, len(s.itl_ms), len(s.tokens_per_s)) for s in process.samples] == [(1, 2, 2), (2, 2, 2)]
    # An ITL is the difference of two timed generates, so a loaded machine can make it 0 or below; only the
    # rates, tokens over a duration, must be positive.
    assert all(math.isfinite(x) for s in process.samples for x in s.itl_ms)
    assert all(x > 0 for s in process.samples for x in s.tokens_per_s)
    # vLLM's CPU platform has no pinned memory. Where weights live says nothing here: on the CPU backend every
    # parameter is on the CPU, which vLLM's account cannot tell from offloaded (seen: offloaded True, no offload).
    assert process.pin_memory is False
    assert process.profile is None and process.profile_reason == "no CUDA device in this process: nothing to profile"
    print(f"\nbench child on vLLM's CPU engine: {seconds:.1f} s; ITL {process.samples[0].itl_ms} ms at batch 1")
