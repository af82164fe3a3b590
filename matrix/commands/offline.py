"""An offline run's record, and turning its folder into results: ``python -m matrix import-run DIR``.

The offline GPU run (``tools/gpu_run.sh``, ``repro/gpu_run.py``) runs on a machine that only hands
back one folder, of 8 files at most: the environment record, one raw JUnit file per test group, the
probe record, the engine bench's record, a log and ``run.json``, this module's record of what ran
within the run's deadline. The plan stays behind: it is made from the environment record alone
(``python -m matrix plan --env``), so the import makes it again the same way; a folder that holds
one (a run from before the bench) is read with its own. Back on a machine with the kit, the import
splits each group's JUnit into ``results/<vLLM>/<group>/<cell>.xml`` with the same code as
``python -m matrix split`` and writes the report of those results. A group the deadline cut short,
or never let start, leaves one skipped case per cell that says so: a case that did not run is never
missing without a word, and never a pass. The engine bench is no pytest group: its record is copied
beside the results, ``results/<vLLM>/bench/``.
"""

from __future__ import annotations

import enum
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element

from matrix.case_facts import CaseFacts
from matrix.cells import select
from matrix.errors import MatrixError
from matrix.host.record import EnvironmentRecord
from matrix.io.files import InputFileError, read_input, write_file
from matrix.io.records import read_record
from matrix.junit import as_text, kit_case
from matrix.plan import CellPlan, Plan
from matrix.store.groups import BENCH_GROUP, GROUP_TESTS
from matrix.store.layout import ENGINE_BENCH_SUFFIX

RUN_SCHEMA = "wslpin-kit.offline-run/1"
# The files of a run's folder (the device hands back at most 8, named in letters, digits, '.', '_', '-').
RUN_RECORD, ENV_RECORD, PLAN_RECORD = "run.json", "env.json", "plan.json"
PROBE_RECORD, LOG = "probe.json", "gpu-run.log"
BENCH_RECORD = "bench.json"
# Where an imported probe record goes, beside the probe group's results; and the engine bench's, in bench/.
IMPORTED_PROBE, IMPORTED_BENCH = "gpu-run.probe.json", f"gpu-run{ENGINE_BENCH_SUFFIX}"
AGAIN = "give the folder the offline GPU run wrote ($OUT of `tools/gpu_run.sh`)"


class GroupStatus(enum.StrEnum):
    FINISHED = "finished"  # pytest ended by itself; its exit status says whether tests failed
    STOPPED = "stopped"  # pytest was interrupted at the deadline: its JUnit holds the cases that finished
    NOT_STARTED = "not-started"  # the deadline came before the group's turn
    SKIPPED = "skipped"  # nothing of the group can run on this machine (the bench: no cell of it has a GPU here)


@dataclass(frozen=True)
class GroupRun:
    group: str
    status: GroupStatus
    exit_code: int | None  # None: not started, skipped, or killed
    seconds: float
    reason: str = ""  # why it did not run, where it did not

    @property
    def junit(self) -> str:
        """The group's raw JUnit file in the run's folder."""
        return f"{self.group}.xml"


@dataclass(frozen=True)
class OfflineRun:
    cells: str  # the pattern the plan was made for
    started_at: str  # ISO time the run started
    budget_s: float
    deadline_s: float  # seconds after the start by which every child had to end
    jobs: int  # engines at a time
    groups: tuple[GroupRun, ...]
    # Seconds after the start by which the children of the groups before the bench had to end: earlier than
    # deadline_s by what the run kept for the bench (a run before the bench has deadline_s).
    groups_deadline_s: float

    @property
    def groups_deadline(self) -> str:
        """The pytest groups' deadline, in words for a case that it cut."""
        if self.groups_deadline_s == self.deadline_s:
            return f"the run's deadline ({self.deadline_s:g} s)"
        return f"the run's deadline for the groups before the bench ({self.groups_deadline_s:g} s)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": RUN_SCHEMA,
            "cells": self.cells,
            "started_at": self.started_at,
            "budget_s": self.budget_s,
            "deadline_s": self.deadline_s,
            "jobs": self.jobs,
            "groups_deadline_s": self.groups_deadline_s,
            "groups": [
                {
                    "group": g.group,
                    "status": g.status.value,
                    "exit_code": g.exit_code,
                    "seconds": g.seconds,
                    "reason": g.reason,
                }
                for g in self.groups
            ],
        }

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.as_dict(), indent=2) + "\n")


def load_run(path: Path) -> OfflineRun:
    """The record ``repro/gpu_run.py`` wrote, or one line saying what the folder is not."""
    record = read_record(path, RUN_SCHEMA, str(path), "an offline run's record", AGAIN)
    try:
        groups = tuple(
            # A run before the bench wrote no reasons.
            GroupRun(
                str(g["group"]), GroupStatus(g["status"]), g["exit_code"], float(g["seconds"]), str(g.get("reason", ""))
            )
            for g in record["groups"]
        )
        unknown = [g.group for g in groups if g.group not in GROUP_TESTS and g.group != BENCH_GROUP]
        if unknown:
            raise ValueError(f"unknown group(s) {unknown}")
        deadline = float(record["deadline_s"])
        return OfflineRun(
            cells=str(record["cells"]),
            started_at=str(record["started_at"]),
            budget_s=float(record["budget_s"]),
            deadline_s=deadline,
            jobs=int(record["jobs"]),
            groups=groups,
            # A run before the bench gave every group the run's deadline.
            groups_deadline_s=float(record.get("groups_deadline_s", deadline)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MatrixError(f"{path} is a damaged offline run's record ({type(exc).__name__}: {exc}): {AGAIN}") from None


def not_run_case(plan: CellPlan, reason: str) -> Element:
    """One skipped case that says why the rest of a cell's cases in a group did not run."""
    props = CaseFacts(cell=plan.cell.id, execution=plan.execution.value).to_properties()
    return kit_case("matrix.commands.offline", "cases_not_run", "skipped", reason, "pytest.skip", props)


def group_junit(folder: Path, run: GroupRun, plans: list[CellPlan], deadline: str, into: Path) -> Path | None:
    """The group's JUnit as the split should read it, written under ``into``; None where pytest wrote none.

    ``deadline`` names the deadline that cut the group, in words (``OfflineRun.groups_deadline``).

    A stopped pytest leaves the case it was in as a ``<testcase>`` without a name, which belongs to
    no cell: it is dropped, and every cell gets a case saying that the rest did not run.
    """
    from matrix.junit import UnreadableError, parse

    if run.status is GroupStatus.NOT_STARTED:
        suite = Element("testsuite", name="pytest")
        reason = f"not run: {deadline} passed before the {run.group} group's turn"
        suite.extend(not_run_case(plan, reason) for plan in plans)
    else:
        raw = folder / run.junit
        if not raw.exists():
            return None
        if run.status is GroupStatus.FINISHED:
            return raw
        try:
            root = parse(raw)
        except UnreadableError as exc:
            raise MatrixError(f"{raw} is not a JUnit file ({exc}): the run's log ({folder / LOG}) says why") from None
        found = root if root.tag == "testsuite" else root.find("testsuite")
        suite = Element("testsuite", name="pytest") if found is None else found
        for case in [c for c in suite.iter("testcase") if not c.get("name")]:
            suite.remove(case)
        reason = f"not run: {deadline} stopped pytest before this case's turn"
        suite.extend(not_run_case(plan, reason) for plan in plans)
    path = into / run.junit
    path.write_text(as_text(suite))
    return path


@dataclass(frozen=True)
class Imported:
    run: OfflineRun
    directories: dict[str, Path]  # pytest group -> results/<vLLM>/<group>/
    probe: Path | None  # the probe record, beside the probe group's results
    bench: Path | None  # the engine bench's record, in results/<vLLM>/bench/ (matrix.store.engine_bench reads it)


def import_run(folder: Path, results: Path, name: str | None = None) -> Imported:
    """Write each group of the run in ``folder`` into ``results/<vLLM>/<group>/`` (the split's files).

    ``name`` is what the evidence calls the run, in its envelope's runner field: by default the folder's name,
    which a maintainer gives a run that comes back (``h200-vllm-0.26.0-2026-12-04``); the lent machine's own
    host name (``vm``) tells a reader nothing about which run it was.
    """
    from matrix.envelope import RunInfo
    from matrix.host import facts
    from matrix.junit import write_cell_results
    from matrix.plan import load_plan
    from matrix.store.engine_bench import read_engine_bench
    from matrix.store.layout import run_dir

    run = load_run(folder / RUN_RECORD)
    env = EnvironmentRecord.read(folder / ENV_RECORD, str(folder / ENV_RECORD), AGAIN)
    if os.path.lexists(folder / PLAN_RECORD):
        plan = load_plan(folder / PLAN_RECORD)
    else:
        # What `python -m matrix plan --cells CELLS --env env.json` made for the run: the same, made again.
        plan = Plan.from_record(select(run.cells), env)
    plans = plan.select(run.cells)
    info = RunInfo(
        env=env,
        kit_commit=facts.kit_commit(),
        runner_name=name or folder.resolve().name,
        started_at=run.started_at,
    )
    probe_record = None
    if os.path.lexists(folder / PROBE_RECORD) and any(group.group == "probe" for group in run.groups):
        # Read as the file itself (a link in the run's folder could name any file of this machine), before
        # anything is written, and written beside the results without following a link there.
        probe_record = _own_file(folder / PROBE_RECORD)
    bench_record = None
    if os.path.lexists(folder / BENCH_RECORD) and any(group.group == BENCH_GROUP for group in run.groups):
        bench_record = _own_file(folder / BENCH_RECORD)
        read_engine_bench(folder / BENCH_RECORD)  # a damaged record is one line, before anything is written
    directories = {}
    with tempfile.TemporaryDirectory(prefix="wslpin-import-") as tmp:
        for group in run.groups:
            if group.group == BENCH_GROUP:
                continue
            out = run_dir(results, env.vllm_release, group.group)
            raw = group_junit(folder, group, plans, run.groups_deadline, Path(tmp))
            ended = "was killed at the run's deadline" if group.exit_code is None else f"exited {group.exit_code}"
            # Named within the run's folder: where it lies on this machine is no part of the result.
            missing = f"pytest {ended} without writing {group.junit}: see {LOG} in the run's folder"
            write_cell_results(plans, raw, info, out, raw_missing=missing)
            directories[group.group] = out
    probe = None if probe_record is None else write_file(directories["probe"], IMPORTED_PROBE, probe_record)
    bench_dir = run_dir(results, env.vllm_release, BENCH_GROUP)
    bench = None if bench_record is None else write_file(bench_dir, IMPORTED_BENCH, bench_record)
    return Imported(run, directories, probe, bench)


def _own_file(path: Path) -> bytes:
    """A record of the run's folder, read as the file itself: a link there could name any file of this machine."""
    try:
        return read_input(path, links=False)
    except InputFileError as exc:
        raise MatrixError(f"{path} is {exc}: {AGAIN}") from None
