"""The benchmark against servers that misbehave, and a bench that is told to stop.

Real processes throughout: the kit's test server (repro/bench/fakeserver.py) in
the ways a real server fails — a stream that never ends, one that trickles
without end, one that is not JSON, an engine child that outlives its server —
and `python -m repro bench` as a subprocess that gets real signals. The only
stand-in is NVML's reading of GPU memory, which cannot exist on a machine
without a GPU.
"""

import gzip
import http.server
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from pathlib import Path

import pytest
from conftest import ROOT

from matrix.cells import Cell, Host
from matrix.plan import CellPlan, Execution
from matrix.report.bench import PLUMBING_SERVER, latest_per_cell
from matrix.variables import FLASHINFER_SAMPLER
from repro.bench import markdown, profile, record, run, servers
from repro.bench.run import Arm, BenchConfig, BenchRun

ARMS = Arm.parse_all("pin=unset,pin=1")
BENCH = ("-m", "repro", "bench", "--cell", "cuda-wsl2new-v2-graph", "--server", "fake", "--rounds", "2")
SMALL = ("--concurrency", "1", "--input-len", "8", "--output-len", "8", "--no-profile")
# Generous bounds on what must end: a hang fails the test instead of holding the suite.
BOUND_S = 180


def _bench(out: Path, *args: str, server_args: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, *BENCH, *SMALL, "--out", str(out), *args, "--", *server_args]


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        ("endless", "malformed stream: more tokens than the 8 asked for"),
        ("slowloris", "no complete answer within the request timeout (3 s)"),
        ("malformed", "malformed stream: an event is not JSON"),
        # Every figure recorded is counted by the client: a server's account that its stream does not bear out,
        # or that is no count, fails the request, and the load never follows a redirect elsewhere.
        ("inflated", f"malformed stream: its usage says {10**300} completion tokens, its stream carried 8"),
        ("uncounted", "malformed stream: its usage says 'lots' completion tokens, which is no count"),
        ("redirect", "HTTP 307: "),
    ],
)
@pytest.mark.reads_host
def test_a_stream_that_never_ends_trickles_or_is_not_json_is_a_failed_request(tmp_path, stream, reason):
    done = subprocess.run(
        _bench(tmp_path, "--requests", "4", "--request-timeout", "3", server_args=("--stream", stream)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["outcome"] == "failed"
    assert doc["failure"].startswith("1 of 1 warm-up requests sent to pin=unset (round 1 of 2) failed")
    assert reason in doc["failure"]


def _line(process: subprocess.Popen, text: str) -> str:
    """Read the process's output until a line holds ``text``; fail past the bound, not hang."""
    assert process.stdout is not None
    deadline = time.monotonic() + BOUND_S
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(timeout=1):
                line = process.stdout.readline()
                assert line, f"the bench ended before saying {text!r}"
                if text in line:
                    return line
    raise AssertionError(f"the bench did not say {text!r} within {BOUND_S} s")


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError):
            continue
    return found


@pytest.mark.reads_host
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_bench_stops_its_server_group_and_writes_the_record(tmp_path, sig):
    bench = subprocess.Popen(
        # Far more requests than the test waits for; the server keeps a child that is slow to stop.
        _bench(tmp_path, "--requests", "100000", server_args=("--linger", "2")),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _line(bench, "ready in")
        (server,) = _children(bench.pid)
        assert len(servers.group_members(server)) == 2  # the server and its lingering child
        bench.send_signal(sig)
        out, _ = bench.communicate(timeout=BOUND_S)
    finally:
        bench.kill()
    assert servers.group_members(server) == []
    assert bench.returncode == 1, out
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["outcome"] == "failed" and doc["failure"] == f"the benchmark was stopped by {sig.name}"


@pytest.mark.reads_host
def test_a_bench_killed_outright_takes_its_server_with_it(tmp_path):
    bench = subprocess.Popen(
        _bench(tmp_path, "--requests", "100000"), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        _line(bench, "ready in")
        (server,) = _children(bench.pid)
    finally:
        bench.kill()  # SIGKILL: no handler of the bench runs
        bench.wait()
    # The kernel tells the server (its parent-death signal); give it the time a graceful exit takes.
    deadline = time.monotonic() + BOUND_S
    while servers.group_members(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert servers.group_members(server) == []


def test_stopping_a_server_waits_for_its_whole_group(tmp_path):
    port = servers.free_port()
    spec = servers.ServerSpec(
        "lingering",
        servers.python_module("repro.bench.fakeserver", "--port", str(port), "--model", "m", "--linger", "2"),
        dict(os.environ),
        port,
        tmp_path / "server.log",
    )
    with servers.serving(spec, start_timeout=BOUND_S) as server:
        assert len(servers.group_members(server.process.pid)) == 2
    # The leader exits at once, its child 2 s later: the block ends after both.
    assert servers.group_members(server.process.pid) == []


@pytest.mark.reads_host
def test_the_memory_sampler_reads_the_servers_group(tmp_path):
    # An mlock-ed buffer in the pin=1 arm's server, as in the A/B run, and its resident memory.
    config = BenchConfig(
        plan=CellPlan(Cell.parse("cuda-linux-v1-eager"), Execution.GATE_ONLY, "no GPU here"),
        model="m",
        arms=ARMS,
        out=tmp_path,
        server="fake",
    )
    port = servers.free_port()
    spec = servers.ServerSpec(
        "pinned", run.server_argv(config, port, tmp_path), run.server_env(config, ARMS[1], {}), port, tmp_path / "log"
    )
    with servers.serving(spec, start_timeout=BOUND_S) as server, servers.MemorySampler(server.process.pid, 0.1) as s:
        time.sleep(0.5)
    assert s.peak_pinned_host >= 4 << 20
    assert s.peak_rss > s.peak_pinned_host


def test_gpu_memory_is_waited_for_until_it_returns_or_the_wait_ends():
    # NVML cannot answer without a GPU: a stand-in reads GPU memory as a release in progress.
    readings = iter([9 << 30, 6 << 30, (2 << 30) + (100 << 20)])
    back = servers.wait_for_gpu_memory(lambda: next(readings), baseline=2 << 30, interval=0.01)
    assert back.returned and back.above_baseline == 100 << 20
    held = servers.wait_for_gpu_memory(lambda: 5 << 30, baseline=2 << 30, timeout=0.2, interval=0.01)
    assert not held.returned and held.above_baseline == 3 << 30


@pytest.mark.reads_host
def test_without_nvml_the_record_says_gpu_memory_was_not_checked():
    reader, why = servers.gpu_memory_reader()
    if reader is not None:
        pytest.skip(f"NVML answers on this machine ({why})")
    assert why.startswith("not checked: ")
    plan = CellPlan(Cell.parse("cuda-linux-v1-eager"), Execution.NATIVE, "stand-in plan: the GPU is not real here")
    assert run.gpu_memory_check(BenchConfig(plan=plan, model="m", arms=ARMS, out=Path("."))) == (None, why)
    fake = BenchConfig(plan=plan, model="m", arms=ARMS, out=Path("."), server="fake")
    assert run.gpu_memory_check(fake) == (None, "not checked: the fake server uses no GPU")


def test_vllm_is_started_by_its_executable_only_where_that_can_run(tmp_path):
    module = (sys.executable, "-m", run.API_SERVER_MODULE)
    assert run.vllm_launcher(tmp_path) == module  # no executable: vLLM unpacked as files
    (tmp_path / "vllm").write_text("#!/bin/sh\n")
    # The kit's test environment has vLLM's own distribution, so its executable can run.
    assert run.vllm_launcher(tmp_path) == (str(tmp_path / "vllm"), "serve")


def test_every_argument_after_the_double_dash_reaches_the_server(tmp_path):
    plan = CellPlan(Cell.parse("cuda-linux-v2-graph"), Execution.NATIVE, "stand-in plan: the GPU is not real here")
    config = BenchConfig(plan=plan, model="/m", arms=ARMS, out=tmp_path, server_args=("--max-num-seqs", "8"))
    argv = run.server_argv(config, 8000, tmp_path)
    assert argv[argv.index("--model") + 1] == "/m"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.05" and "--kv-cache-memory-bytes" in argv
    assert argv[-2:] == ("--max-num-seqs", "8")
    env = run.server_env(config, ARMS[0], {})
    assert env.get(FLASHINFER_SAMPLER.name) == "0"  # FlashInfer is not importable here


def test_the_emulated_host_reaches_a_server_without_the_kit_on_its_path(tmp_path):
    # A Python that has never heard of the kit: a new virtual environment, run from elsewhere.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    plan = CellPlan(Cell.parse("cuda-wsl2new-v1-graph"), Execution.EMULATED, "Linux with a CUDA GPU (none here)")
    env = run.server_env(BenchConfig(plan=plan, model="m", arms=ARMS, out=tmp_path), ARMS[0], {})
    shown = subprocess.run(
        [str(tmp_path / "bare" / "bin" / "python"), "-c", "import platform; print(platform.uname().release)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == Host.WSL2NEW.emulated_release


def test_a_redirect_from_the_server_is_its_answer_and_never_followed():
    visits = []

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path == "/elsewhere":
                visits.append(self.path)
            self.send_response(307)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirecting) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with pytest.raises(urllib.error.HTTPError, match="307"):
                servers.ask(f"http://127.0.0.1:{server.server_port}/start_profile", timeout=10, method="POST")
        finally:
            server.shutdown()
    assert visits == []


def test_a_trace_that_decompresses_past_the_bound_is_refused_without_being_read_whole(tmp_path, monkeypatch):
    bomb = tmp_path / "trace.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range(64):
            f.write(b" " * (1 << 20))  # 64 MiB of spaces: a few hundred KiB on disk
    assert bomb.stat().st_size < 1 << 20
    monkeypatch.setattr(profile, "MAX_TRACE_BYTES", 8 << 20)  # the bound is 512 MiB; the test's file is smaller
    with pytest.raises(ValueError, match="over 8 MiB decompressed"):
        profile.read_trace(bomb)


def test_a_cpu_only_trace_says_how_many_engine_steps_it_holds():
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "execute_context_1(4)_generation_0(0)", "ts": 0, "dur": 9},
        {"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_1(1)", "ts": 10, "dur": 9},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 5},
    ]
    with pytest.raises(ValueError, match=r"no GPU activity \(2 engine steps annotated, 3 events\)"):
        profile.step_profile(events, steps=2)


@pytest.mark.reads_host
def test_a_cpu_engine_run_is_labelled_and_never_a_cells_evidence(tmp_path):
    plan = CellPlan(Cell.parse("cuda-linux-v1-eager"), Execution.GATE_ONLY, "no GPU here")
    config = BenchConfig(plan=plan, model="m", arms=ARMS, out=tmp_path, server=PLUMBING_SERVER)
    done = BenchRun(config, "2026-12-01T00:00:00", failure="stopped on purpose")
    doc = record.document(done, _here(), kit_commit="test")
    assert doc["server"] == PLUMBING_SERVER and "not a measurement of the cell" in doc["stand_in"]
    assert "> Served by vLLM's CPU backend: a test of the kit's plumbing" in markdown.render(doc)
    record.write(doc, tmp_path / "bench" / "cuda-linux-v1-eager" / "bench.json")
    assert latest_per_cell(str(tmp_path / "bench")) == {}


def _here():
    from matrix.host import classify, facts

    return classify.detect(facts.collect_facts())
