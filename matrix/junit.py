"""Per-cell JUnit files: one suite per cell, named by its id, with the envelope. The kit's one JUnit writer.

A cell session runs pytest once for all its cells (so vLLM's answer for a host
is computed once) and tags each test case with a ``cell`` property. This module
splits that run into ``results/<cell-id>.xml`` files and stamps each suite with
the envelope of provenance properties that the report reads. It writes the cases
the kit makes itself too (a cell without results, a misrouted cell, cases an
offline run's deadline left unrun), with the standard library only: a runner's
bare Python writes the misrouted ones before anything is installed. And it writes the
record of one cell's run that the evidence store keeps (matrix.store.evidence).
"""

from __future__ import annotations

import copy
import functools
import io
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from xml.etree.ElementTree import Element, SubElement, tostring

from matrix.case_facts import CaseFacts
from matrix.envelope import Envelope, RunInfo, envelope
from matrix.errors import MatrixError
from matrix.io.files import InputFileError, read_input, write_file
from matrix.plan import CellPlan

if TYPE_CHECKING:
    from junitparser import TestCase, TestSuite

# The kit's checkout on the machine that runs this code: a result names the kit's files relative to it.
KIT_ROOT = Path(__file__).resolve().parents[1]
# An absolute POSIX or Windows path, up to a character no path of the kit's holds (a ``:line`` ends it).
_ABSOLUTE = re.compile(r"(?<![\w.~$])(?:[A-Za-z]:)?[/\\][^\s'\"<>|:;,()\[\]{}=]+")


def kit_relative(text: str, root: Path = KIT_ROOT) -> str:
    """``text`` with every absolute path that names a file of the kit named relative to the kit's root instead.

    pytest and tracebacks name the test files by the checkout they ran in (``/home/runner/_work/kit/tests/
    cell/test_repro.py:151``): a runner's home and checkout, which no published record may carry, and which make
    the same result read differently on every machine. A path is the kit's where its tail, from some directory
    on, is a file of this checkout; on the machine that ran, its own checkout's prefix goes whatever follows it.
    """
    if "/" not in text and "\\" not in text:
        return text
    return _ABSOLUTE.sub(lambda found: _relative(found.group(), str(root)), text)


@functools.lru_cache(maxsize=4096)
def _relative(path: str, root: str) -> str:
    if path.startswith("//"):
        return path  # the rest of a URL (https://...), which names a page, not this disk
    prefix = root.rstrip("/\\")
    if path.startswith(prefix) and path[len(prefix) : len(prefix) + 1] in ("/", "\\"):
        return path[len(prefix) + 1 :]
    parts = re.split(r"[/\\]+", path)
    for start in range(1, len(parts)):
        tail = parts[start:]
        if all(tail) and Path(root).joinpath(*tail).is_file():
            return "/".join(tail)
    return path


def kit_relative_case(case: Element, root: Path = KIT_ROOT) -> Element:
    """``case`` with its attributes, properties and texts naming the kit's files as ``kit_relative`` does."""
    for elem in case.iter():
        for name, value in elem.attrib.items():
            elem.set(name, kit_relative(value, root))
        if elem.text:
            elem.text = kit_relative(elem.text, root)
    return case


# The case a cell gets where its run left none of its own: the report reads a cell holding only this as crashed.
NO_RESULTS = "no_results"
_OUTCOMES = ("error", "failure", "skipped")


def case_properties(case: TestCase) -> dict[str, str]:
    """A junitparser case's properties (the kit's tests read the files so)."""
    from junitparser import Properties

    props = case.child(Properties)
    return {p.name: p.value for p in props} if props is not None else {}


def suite_properties(suite: TestSuite) -> dict[str, str]:
    return {p.name: p.value for p in suite.properties()}


def properties(elem: Element) -> dict[str, str]:
    """The ``<properties>`` of a suite or case, by name: the kit's one reader of them (the report's too)."""
    # Interned: the same few names and values repeat across hundreds of thousands of cases.
    props = {}
    for container in elem.findall("properties"):
        for prop in container.findall("property"):
            value = prop.get("value", prop.text or "")
            props[sys.intern(prop.get("name", ""))] = sys.intern(value) if len(value) < 64 else value
    return props


def restate(root: Element, name: str, was: str, now: str) -> None:
    """Every property ``name`` in ``root`` that says ``was`` made to say ``now``, in place: a bundle's envelopes
    name the environment record by its hash, which the bundle makes again over the record it scrubbed."""
    for prop in root.iter("property"):
        if prop.get("name") == name and prop.get("value") == was:
            prop.set("value", now)


def _add_properties(parent: Element, props: Mapping[str, str]) -> None:
    container = SubElement(parent, "properties")
    for name, value in props.items():
        SubElement(container, "property", name=name, value=value)


def kit_case(
    classname: str, name: str, outcome: str, message: str, kind: str, props: Mapping[str, str] | None = None
) -> Element:
    """A case the kit writes itself: ``outcome`` (error, failure or skipped) with its message and type."""
    if outcome not in _OUTCOMES:
        raise ValueError(f"a case's outcome is one of {_OUTCOMES}, not {outcome!r}")
    case = Element("testcase", classname=classname, name=name, time="0")
    if props:
        _add_properties(case, props)
    SubElement(case, outcome, message=message, type=kind)
    return case


def read_cases(path: Path) -> list[Element]:
    """Every ``<testcase>`` of pytest's file, parsed safely like any runner's."""
    try:
        root = parse(path)
    except UnreadableError as exc:
        raise MatrixError(
            f"{path} is not a JUnit file ({exc}): give the file pytest wrote with --junitxml, "
            "or run the cells again if it was cut short"
        ) from None
    return list(root.iter("testcase"))


def cell_suite(plan: CellPlan, cases: list[Element], run: RunInfo, no_results: str) -> Element:
    """The cell's suite: its envelope, and its cases (those of no cell belong to every cell), or one saying why none."""
    suite = Element("testsuite", name=plan.cell.id, timestamp=run.started_at, hostname=run.runner_name)
    _add_properties(suite, envelope(plan, run).to_properties())
    mine = [c for c in cases if CaseFacts.from_properties(properties(c)).cell in (plan.cell.id, None)]
    # A cell with no test case must still say why, never vanish.
    kept = mine or [kit_case("matrix.session", NO_RESULTS, "error", no_results, "NoResults")]
    suite.extend(kit_relative_case(copy.deepcopy(case)) for case in kept)
    suite.set("tests", str(len(suite.findall("testcase"))))
    for outcome, counted in (("error", "errors"), ("failure", "failures"), ("skipped", "skipped")):
        suite.set(counted, str(sum(len(case.findall(outcome)) for case in suite.iter("testcase"))))
    suite.set("time", f"{sum(_seconds(case) for case in suite.iter('testcase')):.3f}")
    return suite


def _seconds(case: Element) -> float:
    try:
        return float(case.get("time") or 0)
    except ValueError:
        return 0.0


def cell_file(plan: CellPlan, cases: list[Element], run: RunInfo, no_results: str) -> bytes:
    """The bytes of ``<cell>.xml``: one ``<testsuites>`` holding the cell's suite."""
    root = Element("testsuites", name=plan.cell.id)
    root.append(cell_suite(plan, cases, run, no_results))
    return tostring(root, encoding="utf-8", xml_declaration=True)


# How many characters of a failure's type a kept record holds (its message is bounded by the report's reader).
TYPE_LIMIT = 200


def record_file(kept: Envelope, cases: list[Element]) -> bytes:
    """One cell's run as the evidence store keeps it (matrix.store.evidence): its envelope, and each case's name,
    properties, outcome and message, nothing else; the same bytes whenever the same run is read, whatever held it."""
    from matrix.host.classify import scrub

    tags = {ERROR: "error", FAILED: "failure"}
    cell = kept.cell.id
    root = Element("testsuites", name=cell)
    suite = SubElement(root, "testsuite", name=cell, timestamp=kept.started_at, tests=str(len(cases)))
    _add_properties(suite, kept.to_properties())
    for case in cases:
        record = SubElement(suite, "testcase", classname=case.get("classname", ""), name=case.get("name", ""))
        props = {name: scrub(kit_relative(value)) for name, value in properties(case).items()}
        if props:
            _add_properties(record, props)
        result, message = outcome(case)
        if result in tags:
            first = next(child for child in case if child.tag == tags[result])
            SubElement(record, tags[result], message=message, type=(first.get("type") or "")[:TYPE_LIMIT])
        elif result == XFAIL:
            SubElement(record, "skipped", message=message, type="pytest.xfail")
        elif result == SKIPPED:
            SubElement(record, "skipped", message=message)
    return tostring(root, encoding="utf-8", xml_declaration=True)


def write_cell_results(
    plans: list[CellPlan], raw: Path | None, run: RunInfo, out: Path, raw_missing: str = ""
) -> list[Path]:
    """Write ``<out>/<cell>.xml`` and ``<out>/<cell>.env.json`` for each planned cell, from pytest's file ``raw``."""
    cases = read_cases(raw) if raw is not None and raw.exists() else []
    return write_cells(plans, cases, run, out, raw_missing or f"pytest wrote no result for this cell ({raw})")


def write_cells(plans: list[CellPlan], cases: list[Element], run: RunInfo, out: Path, no_results: str) -> list[Path]:
    """Write each planned cell's files from ``cases``, replacing any link at their names (matrix.io.files)."""
    env = run.env.to_json().encode()
    written = []
    for plan in plans:
        written.append(write_file(out, f"{plan.cell.id}.xml", cell_file(plan, cases, run, no_results)))
        write_file(out, f"{plan.cell.id}.env.json", env)
    return written


# Reading a JUnit file: the one safe parser, a case's outcome as the file states it, and the suites that own the
# cases. The report, the store, the bundle and the history read JUnit through these alone.

# A test case's outcome as the file states it, before any judgement.
PASSED, FAILED, ERROR, SKIPPED, XFAIL = "passed", "failed", "error", "skipped", "xfail"


def as_text(element: Element) -> str:
    """A JUnit tree (or part of one) as the text of a file: the kit's one writer of JUnit besides ``record_file``."""
    return tostring(element, encoding="unicode")


# How much of a failure's message is kept: tracebacks run to megabytes.
MESSAGE_LIMIT = 2000


class UnreadableError(ValueError):
    """A file that is not a JUnit file this kit will read; the message says why."""


def parse(path: str | Path | BinaryIO) -> Element:
    """The root of a JUnit file (or of one already read), parsed safely: the one way the kit reads JUnit.

    UnreadableError says why not.
    """
    # Here: the safe parser is a dependency of the kit's, and a runner's bare Python writes misrouted cells.
    import defusedxml.ElementTree as SafeET
    from defusedxml import DefusedXmlException

    if isinstance(path, (str, Path)):
        try:
            path = io.BytesIO(read_input(path))
        except InputFileError as exc:
            raise UnreadableError(str(exc)) from None
    try:
        root = SafeET.parse(path, forbid_dtd=True).getroot()
    except DefusedXmlException as exc:
        raise UnreadableError(f"refused: {type(exc).__name__} (DTDs and entities are not allowed)") from None
    except SafeET.ParseError as exc:
        raise UnreadableError(f"not well-formed XML: {exc}") from None
    except (OSError, ValueError, LookupError) as exc:  # LookupError: an encoding Python does not know
        raise UnreadableError(f"cannot be read: {exc}") from None
    if root is None or root.tag not in ("testsuites", "testsuite"):
        found = "missing" if root is None else f"<{root.tag}>"
        raise UnreadableError(f"root element is {found}, not <testsuites> or <testsuite>")
    return root


def parse_own(path: Path) -> Element:
    """The root of a JUnit file the kit wrote itself (the split's, a cache entry's), read with the standard
    library: the noxfile's history reads them before any venv, with its safe parser, exists."""
    from xml.etree.ElementTree import parse as parse_trusted

    return parse_trusted(path).getroot()


def _result(case: Element) -> tuple[str, Element | None]:
    """A ``<testcase>``'s outcome as the file states it (errors first, then failures, then skips), and the
    element that states it (None: passed)."""
    results = [child for child in case if child.tag in ("error", "failure", "skipped")]
    for tag, label in (("error", ERROR), ("failure", FAILED)):
        for r in results:
            if r.tag == tag:
                return label, r
    for r in results:
        if r.tag == "skipped":
            return (XFAIL if r.get("type") == "pytest.xfail" else SKIPPED), r
    return PASSED, None


def outcome_word(case: Element) -> str:
    """A ``<testcase>``'s outcome alone: ``outcome`` without the cost of its message."""
    return _result(case)[0]


def outcome(case: Element) -> tuple[str, str]:
    """A ``<testcase>``'s outcome and its message, as the file states them."""
    word, result = _result(case)
    return word, "" if result is None else _message(result)


def _message(result: Element) -> str:
    # What is published names no machine's checkout or home, and no credential a failure printed: a result
    # written before the split named the kit's files relative to the kit still names its runner's checkout.
    text = " ".join(part for part in (result.get("message"), result.text) if part)
    from matrix.host.classify import scrub

    return scrub(kit_relative(text.strip()[:MESSAGE_LIMIT]))


@dataclass(frozen=True)
class Suite:
    """A ``<testsuite>`` and the cases it owns: those beneath it and no deeper suite, through any wrapper element."""

    name: str
    props: dict[str, str]  # its own properties over those of the suites around it
    cases: list[Element]
    nested: list[Suite]


def suites(root: Element) -> tuple[list[Suite], list[Element]]:
    """Every suite in document order (outer before inner), and the testcases no suite owns.

    A loop, not recursion: a hostile file nests thousands of elements deep.
    """
    found: list[Suite] = []
    stray: list[Element] = []
    stack: list[tuple[Element, Suite | None]] = [(root, None)]
    while stack:
        elem, owner = stack.pop()
        if elem.tag == "testcase":
            if owner is None:
                stray.append(elem)
            else:
                owner.cases.append(elem)
        elif elem.tag == "testsuite":
            inherited = owner.props if owner is not None else {}
            suite = Suite(elem.get("name", ""), {**inherited, **properties(elem)}, [], [])
            if owner is not None:
                owner.nested.append(suite)
            found.append(suite)
            owner = suite
        # Pushed in reverse so they come off the stack in document order: reruns keep their order.
        stack.extend((child, owner) for child in reversed(elem))
    # A suite holding only suites is a container: its nested suites carry the cases.
    return [s for s in found if s.cases or not s.nested], stray
