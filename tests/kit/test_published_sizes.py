"""The committed matrix (docs/matrix/) stays as small as docs/using.md says, release by release.

The glance and the summary must open quickly however many releases the matrix holds, so each has a ceiling and a
budget per release: a change that makes every release cost more is caught here while the matrix is still small,
not when it passes the ceiling a year later. The figures are docs/using.md's ("The published matrix's files").
"""

from __future__ import annotations

import json
import re

from conftest import ROOT

from matrix.doctor import published

MATRIX = ROOT / "docs" / "matrix"
KB = 1000
# (ceiling, fixed part, per release), in bytes: the fixed part is what a matrix of no release would hold (the
# header, the chooser and the sections after the grids; the inputs, changes and probes).
INDEX = (600 * KB, 60 * KB, 25 * KB)
COMPAT = (2_000 * KB, 100 * KB, 100 * KB)
RELEASE_PAGE = 200 * KB  # one release's page: its 24 cells in full and its test × cell detail
CASE_FILE = 1_500 * KB  # one release's test cases; a GPU run's release holds two results per cell
DOCTOR = 50 * KB  # the doctor's part, per release


def releases() -> list[dict]:
    return json.loads((MATRIX / "compat.json").read_text())["versions"]


def within(size: int, budget: tuple[int, int, int], count: int) -> bool:
    ceiling, fixed, each = budget
    return size <= min(ceiling, fixed + count * each)


def test_the_committed_matrix_holds_enough_releases_for_its_budgets_to_mean_something():
    assert len(releases()) >= 13


def test_the_glance_and_the_summary_keep_to_their_ceilings_and_budgets_per_release():
    count = len(releases())
    index, compat = (MATRIX / "index.html").stat().st_size, (MATRIX / "compat.json").stat().st_size
    assert within(index, INDEX, count), f"index.html: {index:,} bytes for {count} releases"
    assert within(compat, COMPAT, count), f"compat.json: {compat:,} bytes for {count} releases"
    doctor = (MATRIX / "doctor.json").stat().st_size
    assert doctor <= count * DOCTOR, f"doctor.json: {doctor:,} bytes for {count} releases"


def test_each_release_has_its_page_and_case_file_within_budget_and_no_other_is_left():
    versions = releases()
    linked = {version["cases"]["path"] for version in versions}
    assert {f"cases/{p.name}" for p in (MATRIX / "cases").iterdir()} == linked
    index = (MATRIX / "index.html").read_text()
    pages = set(re.findall(r'<p class="more"><a href="(releases/[^"]+)"', index))
    assert {f"releases/{p.name}" for p in (MATRIX / "releases").iterdir()} == pages
    assert len(pages) == len(linked) == len(versions)
    for name in pages:
        assert (MATRIX / name).stat().st_size <= RELEASE_PAGE, name
    for name in linked:
        assert (MATRIX / name).stat().st_size <= CASE_FILE, name


def test_the_doctors_part_published_beside_the_matrix_is_the_one_the_package_carries():
    assert (MATRIX / "doctor.json").read_bytes() == published.PACKAGED.read_bytes()
