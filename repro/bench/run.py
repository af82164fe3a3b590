"""The A/B benchmark: arms that differ only in their environment, interleaved over rounds.

Each round starts every arm in turn (ABAB...), each as its own server process
on a loopback port, drives it through every concurrency level with the same
prompts, and stops it. Model, KV-cache size, maximum length, concurrency and
prompts are the same for every arm; the arm's environment (the opt-in
variable) is the only difference. After its last round each arm serves one
request under the torch profiler, for the GPU idle time per step.

A server that fails is a result: the run stops there and says why, with what
it measured so far.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from matrix.cells import Cell
from matrix.errors import MatrixError
from matrix.plan import CellPlan, Execution
from matrix.variables import BENCH_PIN_VALUES, PIN_MEMORY
from repro.bench import client, profile, servers, stats

WARMUP_REQUESTS = 2
PRESENT_HOST = Path(__file__).resolve().parent / "present_host"


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
    server: str = "vllm"  # "vllm" | "fake"
    rounds: int = 4
    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    requests: int = 64  # per arm, round and concurrency level
    input_len: int = 128
    output_len: int = 128
    max_model_len: int | None = None  # default: input_len + output_len, what the prompts need
    kv_cache_bytes: int = 4 << 30
    cpu_offload_gb: float = 0
    vocab: int = 512
    seed: int = 0
    port: int | None = None
    start_timeout: float = 600
    request_timeout: float = 120
    profile: bool = True
    fake_args: tuple[str, ...] = field(default=())

    @property
    def cell(self) -> Cell:
        return self.plan.cell

    @property
    def model_len(self) -> int:
        return self.max_model_len or self.input_len + self.output_len


def server_argv(config: BenchConfig, port: int, profile_dir: Path) -> tuple[str, ...]:
    """The command that serves one arm: vLLM's own CLI, or the kit's test server."""
    if config.server == "fake":
        return servers.python_module(
            "repro.bench.fakeserver",
            *("--port", str(port), "--model", config.model, "--profile-dir", str(profile_dir), "--seed", str(port)),
            *config.fake_args,
        )
    argv = [
        str(Path(sys.executable).with_name("vllm")),
        "serve",
        config.model,
        *("--host", "127.0.0.1", "--port", str(port), "--seed", str(config.seed)),
        *("--max-model-len", str(config.model_len), "--kv-cache-memory-bytes", str(config.kv_cache_bytes)),
        *("--cpu-offload-gb", str(config.cpu_offload_gb)),
    ]
    if config.cell.mode.value == "eager":
        argv.append("--enforce-eager")
    if config.profile:
        settings = {"profiler": "torch", "torch_profiler_dir": str(profile_dir), "torch_profiler_with_stack": False}
        argv += ["--profiler-config", json.dumps(settings)]
    return tuple(argv)


def server_env(config: BenchConfig, arm: Arm, base: dict[str, str]) -> dict[str, str]:
    env = arm.env(base) | config.cell.env()
    if config.plan.execution is Execution.EMULATED:
        # vLLM's API server and engine core are separate processes: present the host in every one.
        env["WSLPIN_PRESENT_HOST"] = config.cell.host.value
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PRESENT_HOST), env.get("PYTHONPATH")]))
    return env


@dataclass
class ArmRound:
    arm: str
    round: int
    levels: dict[int, client.LevelRun] = field(default_factory=dict)
    peak_pinned_host_bytes: int = 0
    peak_gpu_bytes: int | None = None


@dataclass
class BenchRun:
    config: BenchConfig
    started_at: str
    rounds: list[ArmRound] = field(default_factory=list)
    profiles: dict[str, profile.StepProfile | str] = field(default_factory=dict)  # a figure or why none
    failure: str = ""
    seconds: float = 0.0

    def requests(self, arm: str, concurrency: int) -> list[list[client.RequestRecord]]:
        """The arm's successful requests at one level, one list per round."""
        return [
            [r for r in ar.levels[concurrency].records if r.ok]
            for ar in self.rounds
            if ar.arm == arm and concurrency in ar.levels
        ]


def _profile_arm(config: BenchConfig, server: servers.Server, profile_dir: Path) -> profile.StepProfile | str:
    """One request under the profiler; the trace's figures, or why there are none."""
    url = server.spec.base_url
    before = set(profile_dir.rglob("*.json*")) if profile_dir.exists() else set()
    prompt = client.make_prompts(1, config.input_len, config.vocab, (config.seed, 0, 1))
    try:
        urllib.request.urlopen(urllib.request.Request(f"{url}/start_profile", method="POST"), timeout=60).close()
        run = client.run_level(url, config.model, prompt, 1, config.output_len, 60)
        urllib.request.urlopen(urllib.request.Request(f"{url}/stop_profile", method="POST"), timeout=60).close()
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
    config: BenchConfig, server: servers.Server, prompts: list[list[int]], concurrency: int, what: str
) -> client.LevelRun:
    """The prompts through the server; any failed request ends the run, named with the server's fate."""
    url = server.spec.base_url
    done = client.run_level(url, config.model, prompts, concurrency, config.output_len, config.request_timeout)
    if done.failed:
        why = server.gone() or f"first error: {done.failed[0].error}"
        raise servers.ServerError(
            f"{len(done.failed)} of {len(done.records)} {what} to {server.spec.label} failed at "
            f"concurrency {concurrency}: {why}"
        )
    return done


def run_bench(config: BenchConfig, say: Callable[[str], None] = print) -> BenchRun:
    """Run every round of every arm; a failure ends the run with its reason, keeping what was measured."""
    started = time.monotonic()
    run = BenchRun(config, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    base_env = dict(os.environ)
    try:
        for rnd in range(config.rounds):
            for arm in config.arms:
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
                say(f"{label}: starting {spec.argv[0]} on port {port}")
                with servers.serving(spec, config.start_timeout) as server:
                    result = ArmRound(arm.name, rnd)
                    run.rounds.append(result)
                    warm = client.make_prompts(WARMUP_REQUESTS, config.input_len, config.vocab, (config.seed, 0, 0))
                    _drive(config, server, warm, 1, "warm-up requests")
                    with servers.MemorySampler(server.process.pid) as sampler:
                        for level, concurrency in enumerate(config.concurrency):
                            prompts = client.make_prompts(
                                config.requests, config.input_len, config.vocab, (config.seed, rnd + 1, level)
                            )
                            done = _drive(config, server, prompts, concurrency, "requests")
                            result.levels[concurrency] = done
                            say(
                                f"  concurrency {concurrency:>3}: {len(done.records)} requests, "
                                f"{done.output_tokens_per_s:8.1f} tok/s, median ITL "
                                f"{stats.Spread.of([x for r in done.records for x in r.itl_ms]).median:6.2f} ms"
                            )
                    result.peak_pinned_host_bytes = sampler.peak_pinned_host
                    result.peak_gpu_bytes = sampler.peak_gpu
                    if config.profile and rnd == config.rounds - 1:
                        run.profiles[arm.name] = _profile_arm(config, server, profile_dir)
    except servers.ServerError as e:
        run.failure = str(e)
        say(f"benchmark stopped: {e}")
    run.seconds = time.monotonic() - started
    return run
