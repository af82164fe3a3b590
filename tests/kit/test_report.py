"""The compatibility report: reading hostile and real inputs, the status model, the three outputs."""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path
from xml.etree import ElementTree

import pytest
from builders import envelope, gate_case, report_of, write_suite, written_compat
from conftest import ROOT, require_gate_only, run_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from matrix.cells import CELLS
from matrix.plan import Execution, cell_pytest_args
from matrix.report import render_html, render_json, render_md
from matrix.report.compat_cases import read_joined
from matrix.report.outputs import report_outputs, write_outputs
from matrix.report.status import Status
from matrix.store.reading import ResultKind

CORPUS = ROOT / "tests" / "corpus"


def by_id(report, vllm="0.33.0"):
    return {c.cell.id: c for c in report.versions[vllm]}


def accounted(document: dict) -> int:
    """The test cases compat.json accounts for: an attempt per case read, judged or superseded, and the unattributed."""
    judged = [case for v in document["versions"] for c in v["cells"] for case in c["cases"]]
    judged += [case for v in document["versions"] for c in v["cells"] for s in c["superseded"] for case in s["cases"]]
    unattributed = sum(p["testcases"] for p in document["inputs"]["unattributed"])
    return sum(len(case["attempts"]) for case in judged) + unattributed


# --- reading -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_report():
    return report_of(CORPUS)


def test_each_bad_file_is_reported_by_name_with_its_reason(corpus_report):
    inputs = corpus_report.inputs
    unreadable = {Path(p.path).name: p.reason for p in inputs.unreadable}
    assert set(unreadable) == {
        "empty.xml",
        "truncated.xml",
        "wrong_root.xml",
        "entity_bomb.xml",
        "external_entity.xml",
        "invalid_utf8.xml",
        "unknown_encoding.xml",
    }
    assert "DTD" in unreadable["entity_bomb.xml"] and "DTD" in unreadable["external_entity.xml"]
    assert "<html>" in unreadable["wrong_root.xml"]
    assert "unknown encoding: klingon" in unreadable["unknown_encoding.xml"]
    unattributed = {Path(p.path).name: p for p in inputs.unattributed}
    assert set(unattributed) == {"no_envelope.xml", "zero_suites.xml", "testcase_outside_suite.xml"}
    assert unattributed["no_envelope.xml"].testcases == 2
    stray = unattributed["testcase_outside_suite.xml"]
    assert stray.testcases == 1 and "outside any <testsuite>" in stray.reason
    assert [Path(p.path).name for p in inputs.warnings] == ["unnamed_testcase.xml"]


def test_good_files_beside_bad_ones_still_count(corpus_report):
    cells = by_id(corpus_report)
    assert cells["cuda-linux-v1-graph"].status is Status.PASS  # BOM + CRLF
    assert cells["cuda-linux-v2-graph"].status is Status.PASS  # time="abc", negative counts
    assert [c.name for c in cells["rocm-linux-v1-graph"].cases] == ["deep"]  # nested suite inherits the envelope
    assert {c.name: c.status for c in cells["rocm-linux-v2-graph"].cases} == {
        "x": Status.PASS,
        "y": Status.SKIPPED,
        "z": Status.KNOWN_FAIL,
    }  # xunit2 / Jenkins shapes
    assert cells["cuda-linux-v1-eager"].cases[0].name == "<unnamed testcase 1>"


def test_shapes_that_once_lost_cases_or_the_report_are_each_counted(corpus_report):
    cells = by_id(corpus_report)

    def cases(cell):
        return {c.name: c.status for c in cells[cell].cases}

    assert cases("rocm-wsl2old-v1-graph") == {"spaced": Status.PASS}  # cell_id " rocm-wsl2old-v1-graph "
    assert cases("rocm-wsl2old-v1-eager") == {"beside_stray": Status.PASS}  # the stray case is unattributed
    assert cases("rocm-wsl2old-v2-graph") == {"wrapped": Status.PASS}  # wrapper elements around suite and case
    assert cases("rocm-wsl2old-v2-eager") == {"deepest": Status.PASS}  # 3000 suites deep, the envelope inherited
    assert accounted(render_json.to_document(corpus_report)) == corpus_report.inputs.testcases_read


@pytest.mark.parametrize("vllm", ["1.2.3.4.5.6junk", "9" * 5000 + ".0"])  # not a version; past what int() takes
def test_a_release_no_version_can_order_is_reported_beside_the_others(tmp_path, vllm):
    gate = gate_case("pin unset", "pin", "unset", "True")
    odd = write_suite(tmp_path / "odd.xml", "rocm-wsl2new-v1-eager", [gate, '<testcase name="t"/>'], vllm=vllm)
    good = write_suite(tmp_path / "good.xml", "rocm-wsl2new-v1-eager", [gate], vllm="0.33.0")
    report = report_of(odd, good)
    assert list(report.versions) == ["0.33.0", vllm]  # ordered after every release packaging can order
    odd_cases = by_id(report, vllm)["rocm-wsl2new-v1-eager"].cases
    assert [(c.name, c.rule) for c in odd_cases] == [("pin unset", None), ("t", None)]  # in no rule's range
    assert by_id(report)["rocm-wsl2new-v1-eager"].status is Status.KNOWN_FAIL  # 0.33.0 still judged by its rules


@pytest.mark.parametrize("later_read_first", [False, True])
def test_a_later_run_that_fails_is_a_regression_not_flaky_and_the_earlier_run_is_kept(tmp_path, later_read_first):
    """An earlier passing gate run and a later cell run of the same cell and release where vLLM decided
    otherwise: the later run judges the case, whichever file is read first; the earlier attempt stays listed."""
    cell = "cuda-linux-v1-graph"
    (tmp_path / "gate").mkdir()
    (tmp_path / "cell").mkdir()
    earlier = write_suite(
        tmp_path / "gate" / f"{cell}.xml",
        cell,
        [gate_case("pin", "pin", "unset", "True")],
        started="2026-11-28T10:00:00+00:00",
    )
    later = write_suite(
        tmp_path / "cell" / f"{cell}.xml",
        cell,
        [gate_case("pin", "pin", "unset", "False", "<failure message='pin is False'/>")],
        started="2026-11-29T09:00:00-02:00",
    )
    report = report_of(*((later, earlier) if later_read_first else (earlier, later)))
    found = by_id(report)[cell]
    (case,) = [c for c in found.cases if c.name == "pin"]
    assert (case.status, found.status) == (Status.REGRESSION, Status.REGRESSION)
    assert [a.outcome for a in case.attempts] == ["passed", "failed"] and case.earlier == 1
    assert case.message == "pin is False" and found.observed("pin", "unset") == "False"
    assert found.envelope.started_at == "2026-11-29T09:00:00-02:00"


def test_reruns_are_one_case_with_their_attempts_kept_as_flaky_evidence(corpus_report):
    (case,) = by_id(corpus_report)["cuda-linux-v2-eager"].cases
    assert case.status is Status.FLAKY
    assert [a.outcome for a in case.attempts] == ["failed", "passed"]
    assert by_id(corpus_report)["cuda-linux-v2-eager"].status is Status.FLAKY


def test_no_entity_is_expanded_and_no_local_file_is_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-MARKER")
    hostile = tmp_path / "in" / "xxe.xml"
    hostile.parent.mkdir()
    hostile.write_text(
        f'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY s SYSTEM "{secret.as_uri()}">]>'
        f'<testsuite name="&s;">{envelope("cuda-linux-v1-graph")}<testcase name="&s;"/></testsuite>'
    )
    shutil.copy(CORPUS / "entity_bomb.xml", hostile.parent)
    out = tmp_path / "out"
    done = run_module("matrix", "report", str(hostile.parent), "--out", str(out))
    assert done.returncode == 0, done.stderr
    written = [p for p in out.rglob("*") if p.is_file()]
    assert len(written) == 7  # the five, and the release's page and case file
    for path in written:
        text = path.read_text()
        assert "TOP-SECRET-MARKER" not in text and "lollol" not in text
    assert len(json.loads((out / "compat.json").read_text())["inputs"]["unreadable"]) == 2


def test_fifty_thousand_cases_in_one_file(tmp_path):
    cases = "".join(f'<testcase classname="big" name="case_{i}"/>' for i in range(50_000))
    path = write_suite(tmp_path / "big.xml", "rocm-wsl2old-v2-eager", [cases])
    report = report_of(path)
    assert report.inputs.testcases_read == 50_000
    cell = by_id(report)["rocm-wsl2old-v2-eager"]
    assert len(cell.cases) == 50_000 and cell.status is Status.PASS


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from([c.id for c in CELLS[:6]] + [None]),
            st.text(alphabet="abc|<>&\"' é", min_size=0, max_size=6),
            st.sampled_from(
                [
                    "",
                    "<failure message='f'/>",
                    "<error message='e'/>",
                    "<skipped/>",
                    "<skipped type='pytest.xfail' message='k'/>",
                ]
            ),
        ),
        max_size=40,
    )
)
def test_no_case_is_lost_or_invented(tmp_path_factory, cases):
    """Cases in = cases accounted for in compat.json (attempts of judged cases + unattributed cases)."""
    from html import escape

    tmp = tmp_path_factory.mktemp("prop")
    by_cell: dict = {}
    for cell, name, result in cases:
        by_cell.setdefault(cell, []).append(f'<testcase classname="p" name="{escape(name)}">{result}</testcase>')
    for index, (cell, items) in enumerate(by_cell.items()):
        body = envelope(cell) if cell else ""
        (tmp / f"f{index}.xml").write_text(f'<testsuite name="s">{body}{"".join(items)}</testsuite>')
    if not by_cell:
        (tmp / "none.xml").write_text("<testsuites/>")
    document = render_json.to_document(report_of(tmp))
    assert accounted(document) == len(cases) == document["inputs"]["testcases_read"]


# A JUnit document as a tree: (its XML, how many <testcase> elements it holds).
Tree = tuple[str, int]

SUITE_CELLS = st.sampled_from(["cuda-linux-v1-graph", " rocm-wsl2new-v2-eager\t", "cuda-mars-v1-graph", "", None])
TESTCASES = st.builds(
    lambda name, result: (f'<testcase classname="p" name="{name}">{result}</testcase>', 1),
    st.sampled_from(["a", "b", "a b", ""]),  # few names: duplicates are reruns
    st.sampled_from(["", "<failure message='f'/>", "<error message='e'/>", "<skipped/>"]),
)


def element(tag: str, cell: str | None, children: list[Tree]) -> Tree:
    body = envelope(cell) if cell is not None else ""
    return f'<{tag} name="n">{body}{"".join(xml for xml, _ in children)}</{tag}>', sum(n for _, n in children)


def nested(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    kids = st.lists(children, max_size=4)
    return st.one_of(
        st.builds(element, st.just("testsuite"), SUITE_CELLS, kids),
        st.builds(element, st.sampled_from(["results", "group", "system-out"]), st.none(), kids),
    )


DOCUMENTS = st.builds(
    element,
    st.sampled_from(["testsuites", "testsuite"]),
    SUITE_CELLS,
    st.lists(st.recursive(TESTCASES, nested, max_leaves=20), max_size=4),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(DOCUMENTS)
def test_no_case_is_lost_or_invented_whatever_the_nesting(tmp_path_factory, document):
    """Suites in suites, wrapper elements, cases outside any suite, envelopes anywhere: each case counted once."""
    xml, cases = document
    path = tmp_path_factory.mktemp("shape") / "junit.xml"
    path.write_text(xml)
    report = report_of(path)
    assert not report.inputs.unreadable
    assert accounted(render_json.to_document(report)) == cases == report.inputs.testcases_read


def test_a_file_cut_anywhere_is_read_or_unreadable_never_a_traceback(tmp_path):
    whole = (CORPUS / "xunit2_jenkins.xml").read_bytes().rstrip()
    for end in range(len(whole)):  # every cut short of the root's end tag, the empty file included
        (tmp_path / f"cut{end:04}.xml").write_bytes(whole[:end])
    inputs = report_of(tmp_path).inputs
    assert len({p.path for p in inputs.unreadable}) == len(whole) == len(inputs.files)
    assert not inputs.unattributed and inputs.testcases_read == 0


def test_bad_files_are_named_and_the_good_ones_reported_through_the_command(tmp_path):
    bad = ["unknown_encoding.xml", "truncated.xml", "testcase_outside_suite.xml", "deep_nesting.xml"]
    out = tmp_path / "out"
    done = run_module("matrix", "report", *(str(CORPUS / n) for n in [*bad, "bom_crlf.xml"]), "--out", str(out))
    # A bad input is listed, not a failure; but the stray test case failed, and no failure is green.
    assert done.returncode == 1 and "error: 1 failing test case(s) in no cell" in done.stderr, done.stderr
    assert "read 5 file(s), 4 test case(s); unattributed 1, unreadable 2" in done.stdout
    document = read_joined(out / "compat.json")
    reasons = {Path(p["path"]).name: p["reason"] for p in document["inputs"]["unreadable"]}
    assert set(reasons) == {"unknown_encoding.xml", "truncated.xml"}
    assert "unknown encoding" in reasons["unknown_encoding.xml"] and "not well-formed" in reasons["truncated.xml"]
    (stray,) = document["inputs"]["unattributed"]
    assert Path(stray["path"]).name == "testcase_outside_suite.xml" and stray["testcases"] == 1
    (release,) = document["versions"]
    found = {c["id"]: [case["name"] for case in c["cases"]] for c in release["cells"] if c["cases"]}
    assert found == {
        "cuda-linux-v1-graph": ["ok"],
        "rocm-wsl2old-v1-eager": ["beside_stray"],
        "rocm-wsl2old-v2-eager": ["deepest"],
    }


def test_a_failing_test_in_no_cell_is_named_in_every_output_and_fails_the_report(tmp_path):
    # A bare test case outside any suite, and a suite whose cell id no cell has (upper case): both counted before,
    # but their failures reached no output by name and the report exited 0.
    inputs = tmp_path / "in"
    inputs.mkdir()
    failing = '<testcase classname="t" name="{}"><failure message="{}">trace</failure></testcase>'
    (inputs / "bare.xml").write_text(
        f"<testsuites>{failing.format('test_bare', 'pinned copy hung')}<testcase name='ok'/></testsuites>"
    )
    write_suite(
        inputs / "upper.xml", "CUDA-LINUX-V1-GRAPH", [failing.format(f"test_{n}", f"boom {n}") for n in range(25)]
    )
    write_suite(inputs / "good.xml", "cuda-linux-v1-graph", ['<testcase name="t"/>'])
    out = tmp_path / "out"
    done = run_module("matrix", "report", str(inputs), "--out", str(out))
    assert done.returncode == 1, done.stderr
    assert "error: 26 failing test case(s) in no cell, in 2 file(s)" in done.stderr
    document = json.loads((out / "compat.json").read_text())
    unplaced = {Path(p["path"]).name: p for p in document["inputs"]["unattributed"]}
    assert unplaced["bare.xml"]["failed"] == 1 and unplaced["bare.xml"]["testcases"] == 2
    assert unplaced["bare.xml"]["failures"] == ["t::test_bare: failed: pinned copy hung trace"]
    assert unplaced["upper.xml"]["failed"] == 25 and len(unplaced["upper.xml"]["failures"]) == 20
    for name in ("COMPATIBILITY.md", "index.html"):
        text = html.unescape((out / name).read_text())
        assert "t::test_bare: failed: pinned copy hung" in text and "t::test_0: failed: boom 0" in text, name
        assert "25 failed" in text and "and 5 more" in text, name


def test_special_files_and_links_out_of_the_input_are_named_never_read(tmp_path):
    # A FIFO named *.xml blocked the reader for ever; /dev/zero behind a link filled the memory; a link out of
    # the directory given was read as the runner's own file; a ** glob over two links to their own parent walked
    # for ever. Each is now one line among the inputs, and the good file beside them counts.
    inputs = tmp_path / "in"
    (inputs / "sub").mkdir(parents=True)
    write_suite(inputs / "good.xml", "cuda-linux-v1-graph", ['<testcase name="t"/>'])
    os.mkfifo(inputs / "fifo.xml")
    (inputs / "zero.xml").symlink_to("/dev/zero")
    outside = write_suite(tmp_path / "outside.xml", "cuda-linux-v2-graph", ['<testcase name="t"/>'])
    (inputs / "outside.xml").symlink_to(outside)
    (inputs / "sub" / "loop").symlink_to("..")
    (inputs / "sub" / "again").symlink_to("..")
    for args in ([str(inputs)], [str(inputs / "**" / "*.xml")], [str(inputs / "fifo.xml"), "/dev/zero"]):
        out = tmp_path / "out"
        done = run_module("matrix", "report", *args, "--out", str(out), timeout=120)
        document = json.loads((out / "compat.json").read_text())
        unreadable = {Path(p["path"]).name: p["reason"] for p in document["inputs"]["unreadable"]}
        if args[0] == str(inputs):
            assert done.returncode == 0, done.stderr
            assert unreadable == {
                "fifo.xml": "not a regular file (a FIFO)",
                "outside.xml": f"a link out of {inputs}, to {outside}: not read",
                "zero.xml": f"a link out of {inputs}, to /dev/zero: not read",
            }
        elif "**" in args[0]:  # a glob reads what it names, links to files included, but never descends a link
            assert done.returncode == 0, done.stderr
            assert unreadable == {
                "fifo.xml": "not a regular file (a FIFO)",
                "zero.xml": "not a regular file (a character device)",
            }
            assert len(document["inputs"]["files"]) == 4
        else:
            assert unreadable == {
                "fifo.xml": "not a regular file (a FIFO)",
                "zero": "not a regular file (a character device)",
            }


@pytest.mark.parametrize(
    ("cell", "env", "says"),
    [
        ("cuda-wsl2new-v1-graph", {"gpu": "none", "wsl": "false"}, "its envelope records no GPU"),
        ("cuda-wsl2new-v1-graph", {"gpu": "NVIDIA H200", "wsl": "false"}, "its envelope says the host was not in WSL"),
        ("cuda-linux-v1-graph", {"gpu": "NVIDIA H200", "wsl": "true"}, "its envelope says the host was in WSL"),
        (
            "cuda-wsl2old-v1-graph",
            {"gpu": "NVIDIA H200", "wsl": "true", "detected_host": "wsl2new"},
            "detected as wsl2new",
        ),
        ("cuda-wsl2new-v2-graph", {"gpu": "none", "execution": "emulated"}, "its envelope records no GPU"),
    ],
)
def test_a_native_run_whose_envelope_contradicts_itself_is_suspect_never_evidence(tmp_path, cell, env, says):
    # Believed before for its own cell, with or without --runners: "native" on a WSL2 cell, no GPU, not WSL.
    props = {"execution": "native", **env}
    result = write_suite(tmp_path / "r.xml", cell, ['<testcase name="t"/>'], **props)
    out = tmp_path / "out"
    done = run_module("matrix", "report", str(result), "--out", str(out))
    assert done.returncode == 1 and "their envelope contradicts" in done.stderr, done.stderr
    document = json.loads((out / "compat.json").read_text())
    (suspect,) = document["inputs"]["suspect"]
    assert suspect["cell"] == cell and says in suspect["contradiction"]
    (release,) = document["versions"]
    assert all(c["status"] == "missing" for c in release["cells"])
    consistent = {"gpu": "NVIDIA H200", "wsl": "true", "detected_host": "wsl2new"}
    good = write_suite(
        tmp_path / "good.xml", "cuda-wsl2new-v1-graph", ['<testcase name="t"/>'], execution="native", **consistent
    )
    assert report_of(good).inputs.suspect == []


def test_a_lone_surrogate_in_a_runners_nox_report_is_shown_and_every_output_written(tmp_path):
    # JSON can spell half of a UTF-16 pair; written to a UTF-8 output it raised, and no site was made.
    result = write_suite(tmp_path / "r.xml", "cuda-linux-v1-graph", ['<testcase name="t"/>'])
    session = {"name": "cell", "signatures": ["cell(cuda, linux, v1, eager)"], "result": "failed"}
    nox = tmp_path / "nox.json"
    nox.write_text(json.dumps({"result": 1, "sessions": [{**session, "reason": "died \ud800 here"}]}))
    assert "\\ud800" in nox.read_text()
    out = tmp_path / "out"
    done = run_module("matrix", "report", str(result), "--nox-report", str(nox), "--out", str(out))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "COMPATIBILITY.md",
        "bandwidth.svg",
        "cases/0.33.0.json",
        "compat.json",
        "index.html",
        "releases/0.33.0.html",
        "strips.svg",
    ]
    (release,) = json.loads((out / "compat.json").read_text())["versions"]
    (crashed,) = [c for c in release["cells"] if c["id"] == "cuda-linux-v1-eager"]
    assert crashed["status"] == "crashed" and "died \\ud800 here" in crashed["reason"]


def test_a_small_input_naming_many_releases_is_refused_before_anything_is_written(tmp_path):
    # Each release adds all 24 cells to every output: 300 KB naming 1,000 releases made 109 MB of report.
    suite = (
        '<testsuite name="s"><properties><property name="cell_id" value="cuda-linux-v1-graph"/>'
        '<property name="vllm_version" value="0.{}.0"/><property name="execution" value="gate-only"/></properties>'
        '<testcase classname="c" name="t"/></testsuite>'
    )
    (tmp_path / "many.xml").write_text("<testsuites>" + "".join(suite.format(i) for i in range(65)) + "</testsuites>")
    out = tmp_path / "out"
    done = run_module("matrix", "report", str(tmp_path / "many.xml"), "--out", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not out.exists(), done.stderr
    assert "the inputs name 65 vLLM releases, and a report holds at most 64" in done.stderr


@pytest.mark.parametrize("where", ["nowhere/*.xml", "empty-directory"])
def test_an_input_that_names_nothing_is_one_clear_error(tmp_path, where):
    (tmp_path / "empty-directory").mkdir()
    (tmp_path / "empty-directory" / "notes.txt").write_text("no JUnit here")
    out = tmp_path / "out"
    done = run_module("matrix", "report", str(tmp_path / where), "--out", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert str(tmp_path / where) in done.stderr and not out.exists()


# --- the status model ----------------------------------------------------------------------


def test_gate_values_are_judged_against_the_current_rules(tmp_path):
    # cuda-wsl2new with pin_env unset: the rules expect pin off, silently.
    cases = [
        gate_case("pin_unset", "pin", "unset", "False"),
        gate_case("warning_unset", "warning", "unset", "wsl", "<failure message='assert'/>"),
    ]
    report = report_of(write_suite(tmp_path / "a.xml", "cuda-wsl2new-v2-graph", cases))
    cell = by_id(report)["cuda-wsl2new-v2-graph"]
    statuses = {c.name: c.status for c in cell.cases}
    assert statuses == {"pin_unset": Status.PASS, "warning_unset": Status.REGRESSION}
    assert cell.status is Status.REGRESSION
    assert {c.name: c.rule for c in cell.cases} == {
        "pin_unset": "wsl-no-pin",
        "warning_unset": "cuda-new-kernel-opt-in-off",
    }


def test_a_kernel_edge_case_is_judged_but_is_not_the_cells_behaviour(tmp_path):
    # Under the edge vLLM did not pin with the opt-in set: a regression, but of that uname, not of the cell's host.
    edge = gate_case("edge", "pin", "1", "False").replace(
        "</properties>", '<property name="kernel_edge" value="4.19.121"/></properties>'
    )
    cases = [edge, gate_case("own", "pin", "1", "True")]
    cell = by_id(report_of(write_suite(tmp_path / "a.xml", "cuda-wsl2new-v2-graph", cases)))["cuda-wsl2new-v2-graph"]
    assert {c.name: c.status for c in cell.cases} == {"edge": Status.REGRESSION, "own": Status.PASS}
    assert cell.status is Status.REGRESSION
    assert cell.summary == "pin on"


def test_a_known_failure_that_starts_passing_is_fixed(tmp_path):
    # ROCm on a new kernel pins with the variable unset (#49861); the day it stops, the cell is "fixed".
    still = write_suite(tmp_path / "still.xml", "rocm-wsl2new-v1-graph", [gate_case("p", "pin", "unset", "True")])
    assert by_id(report_of(still))["rocm-wsl2new-v1-graph"].status is Status.KNOWN_FAIL
    fixed = write_suite(tmp_path / "fixed.xml", "rocm-wsl2new-v1-graph", [gate_case("p", "pin", "unset", "False")])
    cell = by_id(report_of(fixed))["rocm-wsl2new-v1-graph"]
    assert cell.status is Status.FIXED
    assert cell.issues == ["https://github.com/vllm-project/vllm/issues/49861"]


def test_an_xpass_message_on_a_case_that_is_no_known_failure_is_a_regression(tmp_path):
    # Any failing test can write pytest's "[XPASS(strict)]": shown "fixed", exit 0, before.
    forged = '<testcase classname="tests.cell.test_repro" name="test_engine_starts_and_generates[x]">'
    forged += '<failure message="[XPASS(strict)] it started"/></testcase>'
    result = write_suite(tmp_path / "r.xml", "cuda-linux-v1-graph", [forged])
    assert by_id(report_of(result))["cuda-linux-v1-graph"].status is Status.REGRESSION
    done = run_module("matrix", "report", str(result), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "cuda-linux-v1-graph (regression" in done.stderr, done.stderr


def test_a_native_run_whose_engine_never_ran_answers_the_engine_questions_as_a_prediction(tmp_path):
    # Every engine case skipped (the GPU was busy, the deadline came): vLLM's decisions on that host are native
    # facts, but whether its engine starts and offloads is what the gate predicts, not what was run.
    native = {"execution": "native", "gpu": "NVIDIA H200", "wsl": "false", "detected_host": "linux"}
    gate = [
        gate_case(f"{k}{p}", k, p, v)
        for k, v in (("imports", "True"), ("pin", "True"), ("offload_path", "uva"))
        for p in ("unset", "1")
    ]
    engine = '<testcase classname="tests.cell.test_repro" name="test_engine_starts_and_generates[{}]">{}</testcase>'

    def levels(engine_cases: list[str]) -> dict[str, str]:
        result = write_suite(tmp_path / "r.xml", "cuda-linux-v1-graph", [*gate, *engine_cases], **native)
        report = report_of(result)
        verdicts = report.verdicts_of(by_id(report)["cuda-linux-v1-graph"])
        return {a.question.value: a.level.value for a in verdicts.answers}

    skipped = [engine.format(p, '<skipped message="the engine did not run"/>') for p in ("unset", "1")]
    assert levels(skipped) == {
        "engine_start": "predicted",
        "offload_with_graphs": "predicted",
        "pinned_memory": "native",
    }
    ran = [
        engine.format(
            p,
            f'<properties><property name="gate_key" value="repro"/><property name="pin_env" value="{p}"/>'
            '<property name="observed" value="works"/></properties>',
        )
        for p in ("unset", "1")
    ]
    assert levels(ran) == {"engine_start": "native", "offload_with_graphs": "native", "pinned_memory": "native"}


def test_missing_crashed_stale_and_misrouted(tmp_path):
    old = write_suite(
        tmp_path / "old.xml", "cuda-linux-v1-graph", ['<testcase name="t"/>'], started="2026-10-01T00:00:00+00:00"
    )
    wrong = write_suite(
        tmp_path / "wrong.xml",
        "cuda-wsl2old-v1-graph",
        ['<testcase name="t"/>'],
        execution="misrouted",
        execution_reason="runner claims cuda-wsl2old-v1-graph natively",
    )
    nox_report = {
        "sessions": [
            {"signatures": ["cell(rocm, linux, v2, eager)"], "result": "failed", "reason": "uv pip install failed"}
        ]
    }
    cells = by_id(report_of(old, wrong, nox_reports=[nox_report], max_age_days=14))
    assert cells["cuda-linux-v1-graph"].status is Status.STALE
    assert cells["cuda-linux-v1-graph"].underlying is Status.PASS
    assert cells["cuda-wsl2old-v1-graph"].status is Status.MISROUTED
    assert cells["rocm-linux-v2-eager"].status is Status.CRASHED
    assert "uv pip install failed" in cells["rocm-linux-v2-eager"].reason
    assert cells["rocm-wsl2new-v2-graph"].status is Status.MISSING


@pytest.mark.parametrize(
    ("started", "says"),
    [
        ("2027-06-01T00:00:00+00:00", "in the future"),
        ("yesterday", "cannot be read"),
        ("", "cannot be read"),
    ],
)
def test_a_result_whose_age_cannot_be_known_is_stale_under_a_limit(tmp_path, started, says):
    """Under CI's --max-age-days, a start time that is in the future, unreadable or empty must not pass for fresh."""
    result = write_suite(tmp_path / "r.xml", "cuda-linux-v1-graph", ['<testcase name="t"/>'], started=started)
    cell = by_id(report_of(result, max_age_days=8))["cuda-linux-v1-graph"]
    assert (cell.status, cell.underlying) == (Status.STALE, Status.PASS)
    assert says in cell.reason and "limit 8 days" in cell.reason
    assert by_id(report_of(result))["cuda-linux-v1-graph"].status is Status.PASS  # no limit asked: no staleness


@pytest.mark.parametrize("limit", ["nan", "inf", "-1"])
def test_a_limit_that_would_turn_the_staleness_check_off_is_refused_in_one_line(tmp_path, limit):
    result = write_suite(tmp_path / "r.xml", "cuda-linux-v1-graph", ['<testcase name="t"/>'])
    done = run_module("matrix", "report", str(result), "--out", str(tmp_path / "out"), "--max-age-days", limit)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --max-age-days {float(limit):g}: give a number of days, 0 or more"
    ]
    assert not (tmp_path / "out").exists()


def test_a_native_run_outranks_the_gate_prediction_and_both_are_kept(tmp_path):
    gate = write_suite(tmp_path / "gate.xml", "cuda-wsl2new-v1-graph", [gate_case("p", "pin", "1", "True")])
    native = tmp_path / "native.xml"
    native.write_text(
        gate.read_text().replace('value="gate-only"', 'value="native"').replace('value="True"', 'value="False"')
    )
    cell = by_id(report_of(gate, native))["cuda-wsl2new-v1-graph"]
    assert cell.envelope.execution is Execution.NATIVE
    assert cell.status is Status.REGRESSION  # the real host did not pin with the opt-in set
    assert [c.status for c in cell.superseded[ResultKind(Execution.GATE_ONLY)]] == [Status.PASS]


def test_a_misrouted_runner_outranks_the_gate_prediction(tmp_path):
    gate = write_suite(tmp_path / "gate.xml", "cuda-wsl2new-v1-graph", [gate_case("p", "pin", "1", "True")])
    misrouted = write_suite(
        tmp_path / "misrouted.xml", "cuda-wsl2new-v1-graph", ['<testcase name="misrouted"/>'], execution="misrouted"
    )
    cell = by_id(report_of(gate, misrouted))["cuda-wsl2new-v1-graph"]
    assert cell.status is Status.MISROUTED and list(cell.superseded) == [ResultKind(Execution.GATE_ONLY)]


@pytest.mark.reads_host
def test_real_cell_results_pass(tmp_path):
    """The files `python -m matrix split` writes for a real gate run (tests/kit/test_results.py makes them)."""
    require_gate_only("cuda-wsl2new-*-graph")
    env, plan = tmp_path / "env.json", tmp_path / "plan.json"
    assert run_module("matrix", "env", "--out", str(env)).returncode == 0
    pattern = "cuda-wsl2new-*-graph"
    assert run_module("matrix", "plan", "--cells", pattern, "--env", str(env), "--out", str(plan)).returncode == 0
    raw = tmp_path / "raw.xml"
    args = cell_pytest_args(pattern, str(raw), str(tmp_path / "probe.json"), str(plan))
    tests = run_module("pytest", "tests/cell/test_gate.py", *args)
    assert tests.returncode == 0, tests.stdout[-2000:]
    out = str(tmp_path / "results")
    split = run_module("matrix", "split", str(raw), "--plan", str(plan), "--env", str(env), "--out", out)
    assert split.returncode == 0
    cells = by_id(report_of(tmp_path / "results"))
    v2 = cells["cuda-wsl2new-v2-graph"]
    assert v2.status is Status.PASS
    assert v2.summary == "pin off→on · UVA off→on · NonUvaBuffer→UvaBuffer · offload pageable-copy→uva"
    assert v2.envelope.execution is Execution.GATE_ONLY and v2.age_days is not None
    assert sum(c.status is Status.MISSING for c in cells.values()) == 22


# --- outputs -------------------------------------------------------------------------------


def test_compat_json_and_its_case_files_follow_their_schema(corpus_report, tmp_path):
    whole = json.loads(json.dumps(render_json.to_document(corpus_report)))  # as JSON has it: tuples are lists
    assert written_compat(corpus_report, tmp_path) == whole


def test_hostile_strings_render_as_text(corpus_report):
    pages = [render_html.render(corpus_report)] + [
        render_html.render_release(corpus_report, v) for v in corpus_report.versions
    ]
    for page in pages:
        assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
        assert page.count("<script>") == (1 if page is pages[0] else 0)  # the glance's own filter; none elsewhere
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in page for page in pages[1:])
    markdown = render_md.render(corpus_report)
    assert "<script>" not in markdown and "<img" not in markdown
    strips = render_html.render_strips(corpus_report)
    tree = ElementTree.fromstring(strips)  # well-formed whatever the inputs named
    assert {el.tag.split("}")[-1] for el in tree.iter()} <= {"svg", "title", "rect", "text", "g"}
    assert "<script" not in strips
    detail = [line for line in markdown.splitlines() if "pipe" in line]
    assert detail and all(line.count("|") == 26 for line in detail)  # 24 cells + the name column: no extra pipe


def test_the_pages_need_no_network_and_name_only_what_the_report_wrote(corpus_report, tmp_path):
    """Whatever a page loads (an image) and whatever it links without a scheme is a file written beside it."""
    import re

    write_outputs(tmp_path, report_outputs(corpus_report))
    pages = [tmp_path / "index.html", *(tmp_path / "releases").glob("*.html")]
    assert len(pages) == 1 + len(corpus_report.versions)
    for page in pages:
        text = page.read_text()
        for marker in ("@import", "url(", "fetch(", "XMLHttpRequest", "http://"):
            assert marker not in text
        loaded = re.findall(
            r"<(?:img|link|script|iframe|object|embed|source)\b[^>]*\s(?:src|href|data)=\"([^\"]*)\"", text
        )
        linked = re.findall(r"<a\b[^>]*\shref=\"([^\"#:]+)[^\"]*\"", text)
        assert loaded == (["strips.svg"] if page.name == "index.html" else [])
        for target in loaded + linked:
            assert (page.parent / html.unescape(target)).is_file(), (page, target)


def test_markdown_fits_a_step_summary_by_cutting_detail_never_the_grid(tmp_path):
    cases = "".join(f'<testcase classname="c" name="test_number_{i:06d}_with_a_long_name"/>' for i in range(30_000))
    report = report_of(write_suite(tmp_path / "big.xml", "cuda-linux-v1-graph", [cases]))
    text = render_md.render(report)
    assert len(text.encode()) <= 1 << 20
    assert "was cut to fit" in text
    assert text.count("| **CUDA** · native Linux |") == 1 and "| **ROCm** · WSL2 kernel ≥ 4.19.121 |" in text


def test_markdown_cuts_any_long_list_where_the_budget_ends_and_says_so(tmp_path):
    # Every case contradicts the rule wsl-no-pin: the contradictions alone are far over 1 MiB.
    cases = [gate_case(f"test_pin_contradicted_{i:06d}", "pin", "unset", "True") for i in range(12_000)]
    report = report_of(write_suite(tmp_path / "big.xml", "cuda-wsl2new-v1-eager", cases))
    assert len(report.contradictions) == 12_000
    text = render_md.render(report)
    assert len(text.encode()) <= 1 << 20
    assert text.count("| **CUDA** · native Linux |") == 1 and "| **ROCm** · WSL2 kernel ≥ 4.19.121 |" in text
    assert "### Legend" in text and "★ **fixed**" in text
    listed = text.count("- rule <code>wsl-no-pin</code> expects")
    assert 0 < listed < 12_000
    (note,) = [line for line in text.splitlines() if "was cut to fit" in line]
    assert "Rules the results contradict" in note and "the test × cell detail" in note
    assert text.endswith(note + "\n") and "## Detail" not in text


def test_markdown_under_the_limit_is_never_cut(corpus_report):
    text = render_md.render(corpus_report)
    assert "was cut to fit" not in text
    cut = render_md.render(corpus_report, limit=len(text.encode()) - 1)
    assert "was cut to fit" in cut and len(cut.encode()) <= len(text.encode()) - 1


def test_diff_with_the_previous_report(tmp_path):
    was = write_suite(tmp_path / "was.xml", "cuda-wsl2new-v2-graph", [gate_case("p", "pin", "unset", "False")])
    previous = render_json.to_document(report_of(was))
    now = write_suite(tmp_path / "now.xml", "cuda-wsl2new-v2-graph", [gate_case("p", "pin", "unset", "True")])
    report = report_of(now, previous=previous)
    assert [(c.cell, c.was, c.now) for c in report.diff.new_regressions] == [
        ("cuda-wsl2new-v2-graph", "pass", "regression")
    ]
    other = write_suite(tmp_path / "other.xml", "rocm-linux-v1-graph", ['<testcase name="t"/>'])
    gone = report_of(other, previous=previous).diff
    assert [(c.cell, c.was, c.now) for c in gone.went_missing] == [("cuda-wsl2new-v2-graph", "pass", "missing")]
    for text in (render_md.render(report), render_html.render(report)):
        assert "New regressions" in text and "cuda-wsl2new-v2-graph" in text


def test_exit_status_and_terminal_output(tmp_path):
    good = write_suite(
        tmp_path / "good" / "a.xml" if (tmp_path / "good").mkdir() is None else None,
        "cuda-linux-v1-graph",
        ['<testcase name="t"/>'],
    )
    done = run_module("matrix", "report", str(good), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "CUDA linux" in done.stdout and "wrote" in done.stdout and "\033[" not in done.stdout
    bad = run_module("matrix", "report", str(CORPUS), "--out", str(tmp_path / "out2"))
    assert bad.returncode == 1 and "rocm-linux-v1-eager (regression" in bad.stderr


# --- a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from matrix.ci import browser

    try:
        browser.chromium()
    except browser.BrowserMissingError as exc:
        pytest.skip(f"{exc} (.ci/run installs it)")
    out = tmp_path_factory.mktemp("page")
    write_outputs(out, report_outputs(report_of(CORPUS)))
    return out / "index.html"


@pytest.mark.browser
def test_the_page_loads_in_chromium_without_console_errors_and_shows_24_cells(page):
    from matrix.ci import browser

    loaded = browser.load(page.as_uri())
    assert loaded.console == []
    assert loaded.dom.count('<td class="cell') == 24
    # Each release's page, opened from the file the glance links, as a reader follows it.
    releases = sorted((page.parent / "releases").glob("*.html"))
    shown = [browser.load(release.as_uri()) for release in releases]
    assert shown and all(s.console == [] and s.dom.count('<td class="cell') == 24 for s in shown)
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in s.dom for s in shown)


@pytest.mark.browser
def test_a_status_filter_in_the_link_dims_the_other_cells(page):
    from matrix.ci import browser

    loaded = browser.load(page.as_uri() + "#status=regression")
    assert loaded.console == []
    assert loaded.dom.count('<td class="cell dim"') == 23  # only the one regression stays bright


@pytest.mark.browser
def test_page_command_writes_a_screenshot(page, tmp_path):
    shot = tmp_path / "shot.png"
    done = run_module("matrix", "page", str(page.parent), "--screenshot", str(shot))
    assert done.returncode == 0, done.stdout + done.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "24 cell(s), 0 console message(s)" in done.stdout
