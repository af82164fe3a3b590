"""The report as a command makes it: built from its inputs, its files written, and what it found said.

``python -m matrix report`` and ``python -m matrix import-run`` both end here, so an imported GPU run is reported
exactly as a runner's results are.
"""

from __future__ import annotations

import gc
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from matrix.errors import MatrixError
from matrix.host import facts
from matrix.io.json_input import NOX_REPORT, PREVIOUS, JsonKind, read_json_input
from matrix.report import render_text
from matrix.report.model import build_report
from matrix.report.outputs import report_outputs, write_outputs
from matrix.store.claims import load_claims
from matrix.store.evidence import NotKept, add_bundles
from matrix.store.reading import InputError
from matrix.text.visible import visible


def _load(path: str | None, kind: JsonKind) -> dict | None:
    return None if path is None else read_json_input(Path(path), kind)


def write_report(
    inputs: Sequence[str],
    out: Path,
    *,
    previous: str | None = None,
    nox_reports: Sequence[str] = (),
    runners: str | None = None,
    max_age_days: float | None = None,
    probes: str | None = None,
    benches: str | None = None,
    engine_benches: str | None = None,
    store: Path | None = None,
    community: Path | None = None,
) -> int:
    """The report of ``inputs`` (result directories or files) in ``out``; its summary on stdout, each reason it
    fails on stderr. 1 where a cell regressed, crashed, is misrouted or missing, a result's claim is suspect, a
    failing case belongs to no cell or a bundle was refused; else 0. ``community``: a directory of bundles
    (matrix.store.bundle), each checked and read as a user's own results. The other arguments are the command's options
    of the same names."""
    refused: list[NotKept] = []
    # The bundles' records are read from a store of their own for this report only: its outputs are made before
    # it goes, since each evidence line asks which store a record came from.
    with tempfile.TemporaryDirectory(prefix="wslpin-community-") as held:
        stores = (store,) if store is not None else ()
        if community is not None:
            refused = _bundles(community, Path(held))
            stores = (*stores, Path(held))
        try:
            report = build_report(
                list(inputs),
                kit_commit=facts.kit_commit(),
                previous=_load(previous, PREVIOUS),
                nox_reports=[_load(path, NOX_REPORT) or {} for path in nox_reports],
                max_age_days=max_age_days,
                probes=probes,
                benches=benches,
                engine_benches=engine_benches,
                claims=load_claims(runners, list(inputs)) if runners else None,
                stores=stores,
            )
        except InputError as exc:
            raise MatrixError(str(exc)) from None
        # The report's records live until this process ends: frozen (after a collection, so no garbage
        # is frozen with them), the full collections while its outputs are written skip them instead of
        # rescanning them all each time, which made writing grow faster than the input. Here, not in
        # build_report: freezing is a decision about the whole process.
        gc.collect()
        gc.freeze()
        outputs = report_outputs(report)
        write_outputs(out, outputs)
    print(render_text.render(report, colour=sys.stdout.isatty()))
    read = report.inputs
    print(
        f"read {len(read.files)} file(s), {read.testcases_read} test case(s); "
        f"unattributed {len(read.unattributed)}, unreadable {len(read.unreadable)}"
    )
    print(visible("wrote " + ", ".join(f"{out}/{name}" for name in outputs)))
    bad = report.bad_cells
    if bad:
        names = ", ".join(f"{c.cell.id} ({c.status.value}, vLLM {visible(c.vllm)})" for c in bad[:10])
        print(f"error: {len(bad)} cell(s) regressed, crashed, misrouted or missing: {names}", file=sys.stderr)
    suspect = read.suspect
    if suspect:
        names = ", ".join(f"{visible(s.path)} ({s.execution} {s.cell})" for s in suspect[:10])
        print(
            f"error: {len(suspect)} result(s) claim a run their runner may not speak for, or their envelope "
            f"contradicts: {names}",
            file=sys.stderr,
        )
    unplaced = [p for p in read.unattributed if p.failed]
    if unplaced:
        failed = sum(p.failed for p in unplaced)
        first = next(f for p in unplaced for f in p.failures)
        print(
            visible(
                f"error: {failed} failing test case(s) in no cell, in {len(unplaced)} file(s) (the report's inputs "
                f"section names them): {unplaced[0].path}: {first}"
            ),
            file=sys.stderr,
        )
    for item in refused:
        print(visible(f"error: bundle {item.path} {item.reason}"), file=sys.stderr)
    return 1 if bad or suspect or unplaced or refused else 0


def _bundles(community: Path, store: Path) -> list[NotKept]:
    """The bundles in ``community`` kept in ``store``; those refused."""
    bundles = sorted(community.glob("*.json")) if community.is_dir() else []
    if not bundles:
        raise MatrixError(f"--community {community} holds no bundle (*.json, as `python -m matrix bundle` writes)")
    added = add_bundles(bundles, store)
    print(f"--community: {len(bundles)} bundle(s), {len(added.new)} cell result(s) read as a user's own")
    return added.not_kept
