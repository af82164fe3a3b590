"""Per-cell JUnit files: one suite per cell, named by its id, with the envelope.

A cell session runs pytest once for all its cells (so vLLM's answer for a host
is computed once) and tags each test case with a ``cell`` property. This module
splits that run into ``results/<cell-id>.xml`` files and stamps each suite with
the envelope of provenance properties that the report reads.
"""

from __future__ import annotations

import io
from pathlib import Path
from xml.etree.ElementTree import Element, tostring

from junitparser import Error, JUnitXml, Properties, TestCase, TestSuite

from matrix.envelope import RunInfo, envelope
from matrix.errors import MatrixError
from matrix.files import write_file
from matrix.plan import CellPlan
from matrix.report.reading import UnreadableError, parse, properties


def case_properties(case: TestCase) -> dict[str, str]:
    props = case.child(Properties)
    return {p.name: p.value for p in props} if props is not None else {}


def suite_properties(suite: TestSuite) -> dict[str, str]:
    return {p.name: p.value for p in suite.properties()}


def read_cases(path: Path) -> list[Element]:
    """Every ``<testcase>`` of pytest's file, parsed safely like any runner's (matrix.report.reading)."""
    try:
        root = parse(path)
    except UnreadableError as exc:
        raise MatrixError(
            f"{path} is not a JUnit file ({exc}): give the file pytest wrote with --junitxml, "
            "or run the cells again if it was cut short"
        ) from None
    return list(root.iter("testcase"))


def cell_suite(plan: CellPlan, cases: list[Element], run: RunInfo, no_results: str) -> TestSuite:
    suite = TestSuite(plan.cell.id)
    suite.timestamp = run.started_at
    suite.hostname = run.runner_name
    for name, value in envelope(plan, run).to_properties().items():
        suite.add_property(name, value)
    mine = [c for c in cases if properties(c).get("cell") in (plan.cell.id, None)]
    for case in mine:
        # Through text, not the element: junitparser may build its tree with lxml, the safe parser with ElementTree.
        suite.add_testcase(TestCase.fromstring(tostring(case, encoding="unicode")))
    if not mine:
        # A cell with no test case must still say why, never vanish.
        missing = TestCase("no_results", classname="matrix.session")
        missing.result = [Error(no_results, "NoResults")]
        suite.add_testcase(missing)
    suite.update_statistics()
    return suite


def write_cell_results(
    plans: list[CellPlan], raw: Path | None, run: RunInfo, out: Path, raw_missing: str = ""
) -> list[Path]:
    """Write ``<out>/<cell>.xml`` and ``<out>/<cell>.env.json`` for each planned cell, from pytest's file ``raw``."""
    cases = read_cases(raw) if raw is not None and raw.exists() else []
    return write_cells(plans, cases, run, out, raw_missing or f"pytest wrote no result for this cell ({raw})")


def write_cells(plans: list[CellPlan], cases: list[Element], run: RunInfo, out: Path, no_results: str) -> list[Path]:
    """Write each planned cell's files from ``cases``, replacing any link at their names (matrix.files)."""
    env = run.env.to_json().encode()
    written = []
    for plan in plans:
        xml = JUnitXml(plan.cell.id)
        xml.add_testsuite(cell_suite(plan, cases, run, no_results))
        text = io.BytesIO()
        xml.write(text, pretty=True)
        written.append(write_file(out, f"{plan.cell.id}.xml", text.getvalue()))
        write_file(out, f"{plan.cell.id}.env.json", env)
    return written
