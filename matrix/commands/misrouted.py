"""Results for the cells a runner refused as misrouted, so its artifact says why it ran nothing.

A runner whose labels claim cells it is not the host of stops before running them
(``python -m matrix plan --require native``). Without a file the report would see those cells
only as missing, and a gate prediction could stand in for them; with one it shows them
misrouted, with the runner and the host it found. This runs on the runner's bare Python,
before anything is installed: the kit's JUnit writer (matrix.junit) needs only the standard library.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from xml.etree.ElementTree import Element

from matrix.envelope import RunInfo
from matrix.host import facts
from matrix.host.record import EnvironmentRecord
from matrix.io.files import write_file
from matrix.junit import cell_file, kit_case
from matrix.plan import CellPlan


def write_misrouted(plans: list[CellPlan], release: str, out: Path) -> list[Path]:
    """Write ``<out>/<cell>.xml`` for each misrouted cell: its envelope and one error saying why."""
    run = RunInfo(
        env=EnvironmentRecord(facts.collect_environment()),
        kit_commit=facts.kit_commit(),
        runner_name=facts.runner_name(),
        started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        release=release,
    )
    return [
        write_file(out, f"{plan.cell.id}.xml", cell_file(plan, [misrouted_case(plan)], run, no_results=""))
        for plan in plans
    ]


def misrouted_case(plan: CellPlan) -> Element:
    return kit_case("matrix.plan", "misrouted", "error", plan.reason, "Misrouted")
