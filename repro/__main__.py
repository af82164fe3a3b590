"""``python -m repro``: ask the installed vLLM directly, without pytest."""

# A runner's or a user's system Python may be older than the kit's (3.11): there, before any import of a module
# written for 3.11, one line names the Python needed, as `python -m matrix` does for its commands. So this module
# parses on Python 3.8 (tests/kit/test_system_pythons.py runs it there).
# ruff: noqa: E402

from __future__ import annotations

import argparse
import sys

from matrix.text.cli import KIT_PYTHON, require_kit_python, run_command_line


def _needs_the_kits_python() -> argparse.ArgumentParser:
    require_kit_python("python -m repro")
    raise AssertionError("only called on a Python older than the kit's")


if __name__ == "__main__" and sys.version_info < KIT_PYTHON:
    sys.exit(run_command_line(_needs_the_kits_python, None))

import json
import time
from pathlib import Path

from matrix.cells import Cell, select
from matrix.commands.here import detected_plan
from matrix.errors import MatrixError
from matrix.host import classify, facts
from matrix.plan import CellPlan, Execution, plan_cells
from matrix.report.bench import PLUMBING_SERVER, SERVERS, TEST_SERVER
from matrix.text.cli import run_command_line
from matrix.variables import (
    BENCH_PIN_VALUES,
    GATE_PIN_VALUES,
    OFFLOAD_DISABLE_PIN_MEMORY,
    OFFLOAD_DISABLE_UVA,
    PIN_MEMORY,
    UNSET,
)
from repro import offload, probe

BUILD = Path(__file__).resolve().parent.parent / "build"

BENCH_WITHOUT_GPU = (
    "run it on the cell's GPU, or add --server fake to exercise the benchmark against the kit's test server"
)
SHOWN = ("imports", "platform_pin", "pin", "uva", "warning", "v2_buffer", "offload_path")


def cmd_gate(args: argparse.Namespace) -> int:
    from repro import gate

    cells = select(args.cells)
    if args.gate_only:
        plans = tuple(CellPlan(cell, Execution.GATE_ONLY, "asked with --gate-only") for cell in cells)
    else:
        plans = detected_plan(cells).cells
    requests = [r for r in gate.requests_for(plans) if args.pin_env in (None, r.pin_env)]
    started = time.perf_counter()
    outcomes = gate.evaluate(requests, timeout=args.timeout, jobs=args.jobs)
    wall = time.perf_counter() - started
    if args.json:
        rows = [
            {
                "request": r.label,
                "pin_env": r.pin_env,
                "status": o.status,
                "seconds": o.seconds,
                "answer": o.value,
                "detail": o.detail,
            }
            for r, o in outcomes.items()
        ]
        print(json.dumps(rows, indent=2, default=str))
    else:
        for request, outcome in outcomes.items():
            if outcome.ok:
                values = " ".join(f"{k}={outcome.value.get(k, '-')}" for k in SHOWN)
            else:
                values = f"{outcome.status}: {outcome.detail.strip().splitlines()[-1]}"
            print(f"{request.label:<42} {outcome.seconds:6.1f} s  {values}")
    children = sum(o.seconds for o in outcomes.values())
    print(
        f"{len(outcomes)} host evaluation(s) for {len(plans)} cell(s) in {wall:.1f} s wall "
        f"({children:.1f} s in children, {args.jobs or 'one per core'} at a time)",
        file=sys.stderr,
    )
    return 0 if all(o.ok for o in outcomes.values()) else 1


def cmd_tiny_model(args: argparse.Namespace) -> int:
    # numpy is imported by the commands that build the model, not at the top:
    # `container` runs on a host that has only the kit and the docker SDK.
    from repro.tinymodel import tiny_model

    print(tiny_model(Path(args.cache)))
    return 0


def cmd_offload_graph(args: argparse.Namespace) -> int:
    cell = Cell.parse(args.cell)
    (plan,) = detected_plan([cell]).cells
    plan.require_gpu("run", "run it on the cell's GPU")
    from repro.tinymodel import tiny_model

    run = offload.EngineRun(cell, args.pin_env, True, plan.execution is not Execution.NATIVE, args.minimal)
    results = offload.run_engines([run, run.reference()], tiny_model(Path(args.cache)), timeout=args.timeout, jobs=2)
    for result in results.values():
        print(f"{result.run.label}: {result.outcome} in {result.seconds:.0f} s; parameters {result.offload or '-'}")
        if not result.ok:
            print("  " + "\n  ".join(result.message.strip().splitlines()[-8:]))
    ran, ref = results[run], results[run.reference()]
    if ran.ok:
        print(f"offload path: {ran.offload_path}; {ran.offloaded} parameter(s) offloaded")
    if ran.ok and ref.ok:
        print("greedy tokens " + ("match" if ran.tokens == ref.tokens else "DIFFER from") + " the reference")
    return 0 if ran.ok else 1


def cmd_probe(args: argparse.Namespace) -> int:
    here = classify.detect(facts.collect_facts())
    names = list(probe.SECTIONS) if not args.sections else args.sections.split(",")
    unknown = [n for n in names if n not in probe.SECTIONS]
    if unknown:
        raise MatrixError(f"unknown probe section(s) {unknown}; sections: {', '.join(probe.SECTIONS)}")
    if here.stack is None:
        results = {n: probe.SectionResult(n, "skipped", message=here.stack_reason) for n in names}
    else:
        results = {n: probe.run_section(n, timeout=args.timeout) for n in names}
    for name, r in results.items():
        print(f"{name:<32} {r.status:<8} {r.seconds:6.1f} s  {r.message.strip().splitlines()[-1] if r.message else ''}")
    ab = results.get("offload_step_ab")
    for c in ab.metrics.get("comparisons", []) if ab else []:
        print("  " + c.get("verdict", f"{c['mode']} {c['base']} vs {c['test']}: skipped, {c.get('skipped')}"))
    rows = results.get("bandwidth") and results["bandwidth"].metrics.get("rows", [])
    for row in rows or []:
        print(
            f"  {row['bytes'] >> 10:>8} KiB  H2D pinned {row['pinned_h2d_gbs']:7.2f}  pageable "
            f"{row['pageable_h2d_gbs']:7.2f} GB/s   D2H pinned {row['pinned_d2h_gbs']:7.2f}  pageable "
            f"{row['pageable_d2h_gbs']:7.2f} GB/s"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(probe.metrics_document(results, here), indent=2) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0 if all(r.status in ("ok", "skipped") for r in results.values()) else 1


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise MatrixError(f"--concurrency {text!r}: give positive whole numbers separated by commas, e.g. 1,4,16,64")
    return values


# Zero rounds or requests would measure nothing and still write an "ok" record over the last one.
BENCH_ABOVE_ZERO = (
    "rounds",
    "requests",
    "input_len",
    "output_len",
    "max_model_len",
    "kv_cache_bytes",
    "start_timeout",
    "request_timeout",
    "gpu_memory_utilization",
)
BENCH_NOT_NEGATIVE = ("cpu_offload_gb", "seed")


def _check_bench_numbers(args: argparse.Namespace) -> None:
    """One line for the first number the benchmark cannot run with, before anything starts or is written."""
    for name in BENCH_ABOVE_ZERO + BENCH_NOT_NEGATIVE:
        value = getattr(args, name)
        above_zero = name in BENCH_ABOVE_ZERO
        if value is not None and (value < 0 or (above_zero and value == 0)):
            raise MatrixError(
                f"--{name.replace('_', '-')} {value}: give a number {'above 0' if above_zero else '0 or more'}"
            )
    if args.gpu_memory_utilization > 1:
        raise MatrixError(
            f"--gpu-memory-utilization {args.gpu_memory_utilization}: give a fraction of the GPU, 1 at most"
        )
    needed = args.input_len + args.output_len
    if args.max_model_len is not None and args.max_model_len < needed:
        raise MatrixError(
            f"--max-model-len {args.max_model_len} is shorter than a request (--input-len + --output-len = {needed})"
        )


def cmd_bench(args: argparse.Namespace) -> int:
    # Before the benchmark's imports (numpy, matplotlib: seconds), so a mistyped number is answered at once.
    _check_bench_numbers(args)
    concurrency = _ints(args.concurrency)
    from repro.bench import markdown, plots, record
    from repro.bench.run import Arm, BenchConfig, run_bench
    from repro.tinymodel import tiny_model

    arms = Arm.parse_all(args.arms)
    here = classify.detect(facts.collect_facts())
    (plan,) = plan_cells([Cell.parse(args.cell)], here)
    if args.server == "vllm":
        plan.require_gpu("serve vLLM", BENCH_WITHOUT_GPU)
    model = args.model or ("wslpin-tiny" if args.server == TEST_SERVER else str(tiny_model(Path(args.cache))))
    config_json = Path(model) / "config.json"
    vocab = json.loads(config_json.read_text())["vocab_size"] if config_json.is_file() else 512
    out = Path(args.out or BUILD.parent / "results" / "bench" / plan.cell.id)
    config = BenchConfig(
        plan=plan,
        model=model,
        arms=arms,
        out=out,
        server=args.server,
        rounds=args.rounds,
        concurrency=concurrency,
        requests=args.requests,
        input_len=args.input_len,
        output_len=args.output_len,
        max_model_len=args.max_model_len,
        kv_cache_bytes=args.kv_cache_bytes,
        gpu_memory_utilization=args.gpu_memory_utilization,
        cpu_offload_gb=args.cpu_offload_gb,
        vocab=vocab,
        seed=args.seed,
        port=args.port,
        start_timeout=args.start_timeout,
        request_timeout=args.request_timeout,
        profile=not args.no_profile,
        server_args=tuple(args.server_args),
    )
    run = run_bench(config, say=lambda line: print(line, flush=True))
    doc = record.document(run, here, facts.kit_commit())
    record.write(doc, out / "bench.json")
    (out / "bench.md").write_text(markdown.render(doc))
    written = [out / "bench.json", out / "bench.md"]
    if doc["levels"]:
        written += plots.itl_ecdf(run, out) + plots.differences(doc, out)
    print(doc["headline"].get("verdict", "no comparison: no level completed"))
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0 if doc["outcome"] == "ok" else 1


def cmd_container(args: argparse.Namespace) -> int:
    from matrix.commands.summary import render, summarize
    from repro import container

    # Planned once, here on the host: the container and the split both read this plan.
    plan = detected_plan(select(args.cells))
    pytest_args = tuple(args.pytest_args) or container.CELL_TESTS
    outcome = container.run_in_image(plan, args.image, Path(args.results), args.group, args.timeout, pytest_args)
    # The table is printed here, not by `matrix summary`: only this run knows which directory the image's vLLM chose.
    summaries = [summarize(path) for path in outcome.written]
    print(render(summaries))
    print(f"wrote {len(outcome.written)} cell result(s) to {outcome.written[0].parent}/", file=sys.stderr)
    if outcome.crashed:
        print(f"error: {args.cells} crashed in {args.image}: {outcome.crashed}", file=sys.stderr)
        return 1
    failed = sum(s.failed for s in summaries)
    if failed:
        where = outcome.written[0].parent
        print(f"error: {failed} test(s) failed; the JUnit files in {where}/ say why", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    # Imported here, inside run_command_line: a Python without what they import gets one line
    # saying how to install it, not a traceback. Neither may import junitparser, defusedxml, docker
    # or nox on import: `probe` and `offload-graph` run where those are missing (tests/kit/test_lazy_imports.py).
    from repro import container, gate

    parser = argparse.ArgumentParser(prog="python -m repro", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gate", help="what vLLM decides about pinned memory for each host the cells need; timed")
    g.add_argument("--cells", help="ids or globs (default: all 24)")
    g.add_argument("--timeout", type=float, default=gate.DEFAULT_TIMEOUT, help="seconds per evaluation")
    g.add_argument("--jobs", type=int, help="evaluations at a time (default: one per core)")
    g.add_argument("--json", action="store_true")
    g.add_argument(
        "--gate-only",
        action="store_true",
        help="present each cell's host and stub its GPU whatever this machine has: vLLM's code alone decides",
    )
    g.add_argument("--pin-env", choices=GATE_PIN_VALUES, help=f"only this {PIN_MEMORY.name} (default: each)")
    g.set_defaults(func=cmd_gate)

    o = sub.add_parser("offload-graph", help="the offload-with-graph reproduction for one cell (needs its GPU)")
    o.add_argument("--cell", required=True, help="e.g. cuda-wsl2new-v1-graph")
    o.add_argument("--pin-env", choices=GATE_PIN_VALUES, default=UNSET, help=PIN_MEMORY.name)
    o.add_argument(
        "--minimal", action="store_true", help=f"add {OFFLOAD_DISABLE_UVA.name}=1, {OFFLOAD_DISABLE_PIN_MEMORY.name}=1"
    )
    o.add_argument("--timeout", type=float, default=offload.DEFAULT_TIMEOUT, help="seconds per engine run")
    o.add_argument("--cache", default=str(BUILD), help="where the tiny model is built")
    o.set_defaults(func=cmd_offload_graph)

    p = sub.add_parser("probe", help="the bare-torch probe of pinned memory and graph capture (needs a GPU)")
    p.add_argument("--sections", help=f"comma-separated, default all: {', '.join(probe.SECTIONS)}")
    p.add_argument("--out", help="write the metrics JSON here")
    p.add_argument("--timeout", type=float, default=probe.DEFAULT_TIMEOUT, help="seconds per section")
    p.set_defaults(func=cmd_probe)

    b = sub.add_parser("bench", help="A/B benchmark of two arms (pin=unset vs pin=1) through `vllm serve`, with CIs")
    b.add_argument("--cell", required=True, help="e.g. cuda-wsl2new-v2-graph: sets runner, graph mode, host")
    b.add_argument("--model", help="model directory (default: the tiny local Llama; a name for --server fake)")
    b.add_argument(
        "--arms", default="pin=unset,pin=1", help=f"two arms: {PIN_MEMORY.name} {'|'.join(BENCH_PIN_VALUES)}"
    )
    b.add_argument(
        "--server",
        choices=SERVERS,
        default="vllm",
        help=f"vllm on the cell's GPU; {PLUMBING_SERVER}: vLLM's CPU backend, a plumbing test, never a measurement; "
        "fake: the kit's test server, no GPU",
    )
    b.add_argument("--rounds", type=int, default=4, help="rounds, each running both arms in turn")
    b.add_argument("--concurrency", default="1,4,16,64", help="levels of requests in flight")
    b.add_argument("--requests", type=int, default=64, help="requests per arm, round and level")
    b.add_argument("--input-len", type=int, default=128, help="prompt tokens")
    b.add_argument("--output-len", type=int, default=128, help="generated tokens (EOS ignored)")
    b.add_argument("--max-model-len", type=int, help="default: input + output length")
    b.add_argument("--kv-cache-bytes", type=int, default=4 << 30, help="the same KV-cache capacity for every arm")
    b.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.05,
        help="vLLM's start-up check only, the KV cache being sized: low, so an arm starts beside a desktop's VRAM",
    )
    b.add_argument("--cpu-offload-gb", type=float, default=0, help="weights offloaded to the CPU (vLLM)")
    b.add_argument("--seed", type=int, default=0, help="prompts come from (seed, round, level): the same for both arms")
    b.add_argument("--port", type=int, help="loopback port for the servers (default: a free one per start)")
    b.add_argument("--start-timeout", type=float, default=600, help="seconds for a server to answer /health")
    b.add_argument(
        "--request-timeout",
        type=float,
        default=120,
        help="seconds one request may take, from sending to its last token",
    )
    b.add_argument("--no-profile", action="store_true", help="skip the profiled request per arm")
    b.add_argument("--out", help="directory for bench.json, bench.md, plots, logs (default: results/bench/<cell>)")
    b.add_argument("--cache", default=str(BUILD), help="where the tiny model is built")
    b.add_argument("server_args", nargs="*", help="after --: more arguments for every arm's server (vllm serve's)")
    b.set_defaults(func=cmd_bench)

    c = sub.add_parser("container", help="run cells' tests inside a container image (e.g. vllm/vllm-openai:v0.33.0)")
    c.add_argument("--cells", required=True, help="ids or globs, e.g. cuda-wsl2new-v1-graph")
    c.add_argument("--image", required=True, help="an image whose python3 has vLLM installed")
    c.add_argument("--results", default="results", help="the results tree: files go to <vLLM>/<group>@<image>/ in it")
    c.add_argument("--group", default="cell", help="the tests' group in that path (nox: cell, gate, repro, probe)")
    c.add_argument("--timeout", type=float, default=container.DEFAULT_TIMEOUT, help="seconds before it is killed")
    c.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments in the container (default: tests/cell)")
    c.set_defaults(func=cmd_container)

    t = sub.add_parser("tiny-model", help="build (or find) the tiny local Llama and print its directory")
    t.add_argument("--cache", default=str(BUILD))
    t.set_defaults(func=cmd_tiny_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command_line(build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
