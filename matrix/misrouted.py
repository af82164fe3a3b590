"""Results for the cells a runner refused as misrouted, so its artifact says why it ran nothing.

A runner whose labels claim cells it is not the host of stops before running them
(``python -m matrix plan --require native``). Without a file the report would see those cells
only as missing, and a gate prediction could stand in for them; with one it shows them
misrouted, with the runner and the host it found. This runs on the runner's bare Python,
before anything is installed, so it writes JUnit with the standard library.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from xml.etree.ElementTree import Element, SubElement, tostring

from matrix.envelope import RunInfo, envelope
from matrix.files import write_file
from matrix.host import facts
from matrix.host.record import EnvironmentRecord
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
    written = []
    for plan in plans:
        root = Element("testsuites")
        suite = SubElement(root, "testsuite", name=plan.cell.id, tests="1", errors="1", failures="0", skipped="0")
        suite.set("timestamp", run.started_at)
        suite.set("hostname", run.runner_name)
        props = SubElement(suite, "properties")
        for name, value in envelope(plan, run).to_properties().items():
            SubElement(props, "property", name=name, value=value)
        case = SubElement(suite, "testcase", classname="matrix.plan", name="misrouted")
        SubElement(case, "error", message=plan.reason, type="Misrouted")
        data = tostring(root, encoding="utf-8", xml_declaration=True)
        written.append(write_file(out, f"{plan.cell.id}.xml", data))
    return written
