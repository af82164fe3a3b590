"""The benchmark end to end: real server processes on loopback, the real streaming client, real files.

The server is the kit's own OpenAI-compatible test server (repro/bench/fakeserver.py),
standing in for ``vllm serve``, which needs a GPU. It reads the opt-in variable
like vLLM does and is 12% faster per step with it, so the true effect is known.
Its profile trace is synthetic (no GPU, no CUDA activity to record): the
trace reader is tested on the Kineto event shapes it writes.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import ROOT, run_module

from matrix.cells import Cell, Host, select
from matrix.errors import MatrixError
from matrix.plan import CellPlan, Execution, plan_cells
from matrix.report.bench import BENCH_SCHEMA, HEADLINE_METRIC, latest_per_cell
from matrix.report.render_json import SCHEMA_FILE
from repro.bench import profile, record, run, servers, stats
from repro.bench.run import Arm, BenchConfig, run_bench

ARMS = Arm.parse_all("pin=unset,pin=1")
QUICK = dict(rounds=2, concurrency=(1, 4), requests=8, input_len=8, output_len=8, start_timeout=30)


def config(tmp_path: Path, cell: str = "cuda-wsl2new-v2-graph", **kw) -> BenchConfig:
    plan = CellPlan(Cell.parse(cell), Execution.GATE_ONLY, "no GPU here")
    return BenchConfig(plan=plan, arms=ARMS, out=tmp_path, **({"model": "wslpin-tiny", "server": "fake"} | QUICK | kw))


@pytest.mark.reads_host
def test_arms_alternate_and_differ_only_in_the_opt_in_variable(tmp_path):
    said: list[str] = []
    done = run_bench(config(tmp_path, profile=False), say=said.append)
    assert not done.failure
    # Each arm round ends with how far the run is and about how long is left.
    steps = [line for line in said if " arm rounds in " in line]
    assert [line.split(" in ")[0] for line in steps] == [f"{n} of 4 arm rounds" for n in (1, 2, 3, 4)], said
    assert all("left (" in line for line in steps[:3]) and "left" not in steps[3], steps
    assert [(r.arm, r.round) for r in done.rounds] == [("pin=unset", 0), ("pin=1", 0), ("pin=unset", 1), ("pin=1", 1)]
    assert all(len(level.records) == 8 and not level.failed for r in done.rounds for level in r.levels.values())
    base = {"PATH": "/usr/bin", "VLLM_WSL2_ENABLE_PIN_MEMORY": "0", "OTHER": "kept"}
    unset, pinned = (run.server_env(done.config, arm, base) for arm in ARMS)
    assert "VLLM_WSL2_ENABLE_PIN_MEMORY" not in unset and pinned["VLLM_WSL2_ENABLE_PIN_MEMORY"] == "1"
    assert {k: v for k, v in pinned.items() if k != "VLLM_WSL2_ENABLE_PIN_MEMORY"} == unset
    assert unset["VLLM_USE_V2_MODEL_RUNNER"] == "1" and unset["OTHER"] == "kept"


@pytest.mark.reads_host
def test_the_headline_is_its_samples_statistics_with_memory_and_profile_figures(tmp_path):
    done = run_bench(config(tmp_path, requests=16), say=lambda _: None)
    doc = record.document(done, _here(), kit_commit="test")
    assert doc["schema"] == BENCH_SCHEMA and doc["outcome"] == "ok"
    # The headline is the statistics of this run's own samples. Whether 16 requests resolve the server's 12%
    # depends on how busy the machine is: the statistics' power is test_bench_stats's (on known samples), and the
    # effect a live run shows is what `nox -s bench` prints.
    headline = doc["headline"]
    value, _ = record.METRICS[HEADLINE_METRIC]
    unpinned, pinned = ([[value(r) for r in rnd] for rnd in done.requests(arm, 1)] for arm in ("pin=unset", "pin=1"))
    recomputed = stats.compare(unpinned, pinned, seed=done.config.seed + list(record.METRICS).index(HEADLINE_METRIC))
    assert headline["concurrency"] == 1 and recomputed is not None
    assert (headline["relative"], headline["low"], headline["high"]) == (
        recomputed.relative,
        recomputed.low,
        recomputed.high,
    )
    assert headline["resolved"] == recomputed.resolved
    assert headline["verdict"].startswith("ITL: ")
    # The pinned arm's server page-locks a buffer; the unpinned one does not.
    assert doc["arms"]["pin=1"]["peak_pinned_host_bytes"] >= 4 << 20
    assert doc["arms"]["pin=unset"]["peak_pinned_host_bytes"] < 4 << 20
    unpinned, pinned = doc["arms"]["pin=unset"]["profile"], doc["arms"]["pin=1"]["profile"]
    assert (unpinned["pageable_h2d"], unpinned["pinned_h2d"], unpinned["stream_syncs"]) == (8, 0, 8)
    assert (pinned["pageable_h2d"], pinned["pinned_h2d"], pinned["stream_syncs"]) == (0, 8, 0)
    assert pinned["idle_ms_per_step"] < unpinned["idle_ms_per_step"]


def test_a_server_that_cannot_start_stops_the_run_with_its_reason(tmp_path):
    done = run_bench(config(tmp_path, server_args=("--fail-start",)), say=lambda _: None)
    assert done.failure.startswith("the server for pin=unset (round 1 of 2) exited with code 1 before it was ready")
    assert "refusing to start" in done.failure  # the tail of its log
    assert done.rounds == []


@pytest.mark.reads_host
def test_a_server_that_dies_mid_run_is_a_result_not_a_traceback(tmp_path):
    done = run_bench(config(tmp_path, server_args=("--die-after", "4")), say=lambda _: None)
    assert "requests sent to pin=unset (round 1 of 2) failed at concurrency 1" in done.failure
    assert "died (exit code 3)" in done.failure
    doc = record.document(done, _here(), kit_commit="test")
    assert doc["outcome"] == "failed" and doc["config"]["rounds_completed"] == 1


def test_a_server_that_never_answers_times_out(tmp_path):
    done = run_bench(config(tmp_path, server_args=("--stall", "completions"), request_timeout=1), say=lambda _: None)
    assert (
        "failed at concurrency 1" in done.failure
        and "no complete answer within the request timeout (1 s)" in done.failure
    )


def test_a_server_that_never_becomes_healthy_times_out_at_start(tmp_path):
    done = run_bench(config(tmp_path, server_args=("--stall", "health"), start_timeout=3), say=lambda _: None)
    assert "did not answer" in done.failure and "/health within 3 s" in done.failure


def test_a_port_in_use_is_named(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_bench(config(tmp_path, port=port), say=lambda _: None)
    assert done.failure.startswith(f"port {port} on 127.0.0.1 is already in use")


def test_vllm_arms_share_every_setting_and_the_cell_picks_graph_mode(tmp_path):
    graph = config(tmp_path, server="vllm", model="/models/tiny")
    eager = config(tmp_path, cell="cuda-wsl2new-v2-eager", server="vllm", model="/models/tiny")
    argv = run.server_argv(graph, 8000, tmp_path)
    assert argv[argv.index("--model") + 1] == "/models/tiny" and "--enforce-eager" not in argv
    assert "--enforce-eager" in run.server_argv(eager, 8000, tmp_path)
    assert "--kv-cache-memory-bytes" in argv and "--max-model-len" in argv and "--profiler-config" in argv


def test_an_emulated_cell_presents_its_host_to_every_server_process(tmp_path):
    plan = CellPlan(Cell.parse("cuda-wsl2old-v1-graph"), Execution.EMULATED, "Linux with a CUDA GPU (none here)")
    emulated = BenchConfig(plan=plan, model="m", arms=ARMS, out=tmp_path)
    env = run.server_env(emulated, ARMS[0], {})
    assert env["WSLPIN_PRESENT_HOST"] == "wsl2old"
    # The hook really runs at start-up of any Python given that environment.
    shown = subprocess.run(
        [sys.executable, "-c", "import platform; print(platform.uname().release)"],
        env={**env, "PYTHONPATH": env["PYTHONPATH"] + os.pathsep + str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == Host.WSL2OLD.emulated_release


@pytest.mark.reads_host
def test_gpu_memory_is_read_from_nvidia_smi_for_the_servers_processes(tmp_path, monkeypatch):
    # There is no GPU here: a stand-in nvidia-smi prints what the real one prints for
    # `--query-compute-apps=pid,used_memory --format=csv,noheader,nounits`.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '1234, 2048\\n999, 100\\n1235, 512\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert servers.gpu_bytes([1234, 1235]) == (2048 + 512) << 20
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert servers.gpu_bytes([1234]) is None


@pytest.mark.parametrize("text", ["pin=unset", "pin=2,pin=1", "pin=1,pin=1", "pinned=1,pin=unset"])
def test_bad_arms_are_refused_in_one_line(text):
    with pytest.raises(MatrixError, match="arm"):
        Arm.parse_all(text)


def test_the_trace_reader_counts_overlapping_kernels_once():
    events = [
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "kernel", "name": "b", "ts": 50, "dur": 100},  # overlaps a on another stream
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 400, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 390, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1000},
    ]
    figures = profile.step_profile(events, steps=2)
    assert figures.busy_ms_per_step == pytest.approx(0.125) and figures.idle_ms_per_step == pytest.approx(0.125)
    assert (figures.pageable_h2d, figures.pinned_h2d, figures.stream_syncs) == (1, 0, 1)
    with pytest.raises(ValueError, match="no GPU activity"):
        profile.step_profile([events[-1]], steps=2)


@pytest.mark.reads_host
def test_the_cli_writes_json_markdown_and_plots_and_the_report_shows_none_of_the_test_servers(tmp_path):
    out = tmp_path / "bench" / "cuda-wsl2new-v2-graph"
    done = run_module(
        "repro",
        *("bench", "--cell", "cuda-wsl2new-v2-graph", "--server", "fake", "--rounds", "2", "--concurrency", "1,4"),
        *("--requests", "8", "--input-len", "8", "--output-len", "8", "--out", str(out)),
    )
    assert done.returncode == 0, done.stderr
    assert "faster" in done.stdout.splitlines()[-1] or "no difference" in done.stdout.splitlines()[-1]
    for name in ("bench.json", "bench.md", "itl-ecdf.png", "itl-ecdf.svg", "difference.png", "difference.svg"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "itl-ecdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "bench.json").read_text())
    assert doc["schema"] == BENCH_SCHEMA and [lvl["concurrency"] for lvl in doc["levels"]] == [1, 4]
    assert "Served by the kit's test server" in (out / "bench.md").read_text()
    # The test server's figures test the kit: no cell of any release shows them.
    assert latest_per_cell(str(tmp_path / "bench")) == {}

    # Given the test server's record, the compatibility report shows its figures on no cell, in no output.
    suite = tmp_path / "cuda-wsl2new-v2-graph.xml"
    props = {"cell_id": "cuda-wsl2new-v2-graph", "vllm_version": "0.33.0", "execution": "gate-only"}
    suite.write_text(
        '<testsuites><testsuite name="cuda-wsl2new-v2-graph"><properties>'
        + "".join(f'<property name="{k}" value="{v}"/>' for k, v in props.items())
        + '</properties><testcase classname="tests.cell.test_gate" name="imports"/></testsuite></testsuites>'
    )
    report = tmp_path / "report"
    done = run_module("matrix", "report", str(suite), "--bench", str(tmp_path / "bench"), "--out", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    compat = json.loads((report / "compat.json").read_text())
    jsonschema.validate(compat, json.loads(SCHEMA_FILE.read_text()))
    assert {c["bench"] for c in compat["versions"][0]["cells"]} == {None}
    for name in ("COMPATIBILITY.md", "index.html"):
        text = (report / name).read_text()
        assert "test server" not in text and doc["headline"]["verdict"] not in text, name


@pytest.mark.reads_host
def test_the_cli_refuses_vllm_without_the_cells_gpu_and_names_the_way_out():
    # Every host lacks some cell's GPU: a CUDA machine the ROCm cells', a ROCm machine the CUDA cells'.
    cell = next(p.cell for p in plan_cells(select(None), _here()) if not p.execution.uses_gpu)
    done = run_module("repro", "bench", "--cell", cell.id)
    assert done.returncode == 2
    assert "--server fake" in done.stderr and "Traceback" not in done.stderr


def _here():
    from matrix.host import classify, facts

    return classify.detect(facts.collect_facts())


def test_a_newer_benchmark_of_another_release_never_hides_a_cells_own(tmp_path):
    # Keyed by cell alone, the 0.32.0 record (newer) replaced 0.33.0's, and the 0.33.0 cell showed no benchmark.
    def record(where: str, vllm: str, started: str, verdict: str) -> None:
        path = tmp_path / "bench" / where / "bench.json"
        path.parent.mkdir(parents=True)
        document = {"schema": BENCH_SCHEMA, "cell": "cuda-wsl2new-v2-graph", "started_at": started, "server": "vllm"}
        document |= {"vllm_version": vllm, "outcome": "ok", "headline": {"concurrency": 4, "verdict": verdict}}
        path.write_text(json.dumps(document))

    record("a", "0.33.0", "2026-11-20T10:00:00+00:00", "this release's own")
    record("b", "0.32.0", "2026-11-28T10:00:00+00:00", "another release's")
    found = latest_per_cell(str(tmp_path / "bench"))
    assert {key: s.verdict for key, s in found.items()} == {
        ("cuda-wsl2new-v2-graph", "0.33.0"): "this release's own",
        ("cuda-wsl2new-v2-graph", "0.32.0"): "another release's",
    }
