"""``python -m repro``: ask the installed vLLM directly, without pytest."""

from __future__ import annotations

import argparse
import json
import sys
import time

from matrix import hostinfo
from matrix.cells import MatrixError, select
from matrix.expectations import PIN_ENVS
from matrix.plan import plan_cells
from repro import gate

SHOWN = ("imports", "platform_pin", "pin", "uva", "warning", "v2_buffer", "offload_path")


def cmd_gate(args) -> int:
    plans = plan_cells(select(args.cells), hostinfo.detect(hostinfo.collect_facts()))
    requests = sorted({gate.GateRequest.for_cell(p.cell, pin, p.execution) for p in plans for pin in PIN_ENVS})
    started = time.perf_counter()
    outcomes = gate.evaluate(requests, timeout=args.timeout, jobs=args.jobs)
    wall = time.perf_counter() - started
    if args.json:
        rows = [
            {"request": r.label, "status": o.status, "seconds": o.seconds, "answer": o.value, "detail": o.detail}
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gate", help="what vLLM decides about pinned memory for each host the cells need; timed")
    g.add_argument("--cells", help="ids or globs (default: all 24)")
    g.add_argument("--timeout", type=float, default=gate.DEFAULT_TIMEOUT, help="seconds per evaluation")
    g.add_argument("--jobs", type=int, help="evaluations at a time (default: one per core)")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_gate)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except MatrixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
