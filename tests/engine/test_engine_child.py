"""The kit's engine child (`python -m repro.engine SPEC RESULT`) against a real vLLM engine on the CPU.

Two children at once, with and without `cpu_offload_gb` (vLLM's CPU backend accepts it and
offloads nothing), as a cell's reproduction runs them: each must start the engine, generate
greedily, write its result and exit 0, and the two must agree token for token.
"""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from matrix.cells import Cell
from repro.engine import MAX_TOKENS, PROMPTS
from repro.isolation import run_json_child
from repro.offload import EngineRun
from repro.tinymodel import CONFIG

CELL = Cell.parse("cuda-linux-v1-eager")  # eager: vLLM's CPU backend compiles slowly and has no graphs


def test_the_engine_child_generates_writes_its_result_and_exits_cleanly(model):
    runs = [EngineRun(CELL, "unset", offload, present_host=False) for offload in (False, True)]

    def child(run: EngineRun):
        # The child's input and environment, as a cell's run gives them (offload.run_engine).
        return run_json_child(
            [sys.executable, "-m", "repro.engine", json.dumps(run.spec(model))],
            env=run.env(dict(os.environ)),
            timeout=600,
        )

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        reference, offloaded = pool.map(child, runs)
    seconds = time.monotonic() - started
    for done in (reference, offloaded):
        assert done.run.returncode == 0, done.run.output
        assert done.answer is not None, done.no_answer
        assert done.answer["status"] == "ok", done.answer.get("error")
        tokens = done.answer["tokens"]
        assert [len(t) for t in tokens] == [MAX_TOKENS] * len(PROMPTS)
        assert all(0 <= t < CONFIG["vocab_size"] for answer in tokens for t in answer)
    # Greedy and deterministic: two engines, two processes, the same tokens.
    assert offloaded.answer["tokens"] == reference.answer["tokens"]
    print(
        f"\nengine child: 2 at once in {seconds:.1f} s; engine start {reference.answer['started_s']} s and "
        f"{offloaded.answer['started_s']} s; whole runs {reference.run.seconds} s and {offloaded.run.seconds} s"
    )
