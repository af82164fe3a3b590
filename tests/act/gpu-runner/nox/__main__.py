"""Stands in for nox on the stand-in GPU runner, and only for the cells' sessions: those install vLLM's CUDA build
(~9 GB) and run on a GPU, neither of which this machine has.

For each session it is given it writes what that session's split writes (``_test_cells`` in the noxfile): the
cell's JUnit in results/<vLLM>/cell/, its envelope from this machine's own environment record (as the runner
presents itself: WSL2, a CUDA GPU) and the plan made from that record, every test passed; then nox's --report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from xml.etree.ElementTree import Element, SubElement

from matrix.cells import CELLS
from matrix.envelope import RunInfo
from matrix.host import facts
from matrix.host.record import EnvironmentRecord
from matrix.junit import write_cells
from matrix.layout import run_dir
from matrix.plan import Plan
from matrix.releases import VLLM_VERSION


def main() -> int:
    parser = argparse.ArgumentParser(prog="nox (the GPU runner's stand-in)")
    parser.add_argument("--report", required=True)
    parser.add_argument("-s", "--sessions", nargs="+", required=True)
    parser.add_argument("posargs", nargs="*")
    args = parser.parse_args()
    by_session = {cell.session: cell for cell in CELLS}
    unknown = [s for s in args.sessions if s not in by_session]
    if unknown:
        print(f"nox stand-in: {', '.join(unknown)} is no cell session; only the cells' sessions are stood in for")
        return 2
    vllm = _option(args.posargs, "--vllm") or VLLM_VERSION
    cells = [by_session[s] for s in args.sessions]
    record = EnvironmentRecord(facts.collect_environment())
    run = RunInfo(
        env=record,
        kit_commit=facts.kit_commit(),
        runner_name=facts.runner_name(),
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        release=vllm,
    )
    # What pytest would report from the GPU: one passing case per cell.
    cases = [_passed(cell.id) for cell in cells]
    plans = list(Plan.from_record(cells, record).cells)
    write_cells(plans, cases, run, run_dir(Path("results"), vllm, "cell"), no_results="")
    sessions = [{"name": "cell", "signatures": [s], "result": "success", "reason": None} for s in args.sessions]
    Path(args.report).write_text(json.dumps({"result": 0, "sessions": sessions}))
    return 0


def _passed(cell: str) -> Element:
    case = Element("testcase", classname="tests.cell.test_probe", name=f"test_pin[{cell}]", time="0")
    SubElement(SubElement(case, "properties"), "property", name="cell", value=cell)
    return case


def _option(posargs: list[str], name: str) -> str | None:
    return posargs[posargs.index(name) + 1] if name in posargs[:-1] else None


sys.exit(main())
