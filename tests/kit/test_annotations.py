"""The report as annotations on a commit (``python -m matrix annotations``): one workflow command per cell to
look at, naming its failing cases' rules and issues, every input text inert; the counts as step outputs. The
workflow's report job runs it (tests/kit/test_workflow_run.py)."""

from __future__ import annotations

import json

from builders import gate_case, write_suite
from conftest import run_module

from matrix.commands.annotations import MOST, commands, outputs

HOSTILE = "x\n::add-mask::secret %0A##[error]y\r,z:"


def document(cells: list[dict], vllm: str = "0.33.0") -> dict:
    return {"schema": "wslpin-kit.compat/1", "versions": [{"vllm": vllm, "cells": cells}]}


def case(name: str, status: str, rule: str = "", issue: str | None = None) -> dict:
    return {"name": name, "status": status, "rule": rule, "issue": issue}


def test_each_cell_to_look_at_is_one_command_naming_its_rules_and_issues():
    cells = [
        {
            "id": "cuda-wsl2new-v1-graph",
            "status": "regression",
            "cases": [
                case("test_gate_value[pin]", "regression", "cuda-new-kernel-opt-in-on", "https://example.org/41496"),
                case("test_vllm_imports", "pass", "imports"),
            ],
        },
        {"id": "rocm-linux-v1-eager", "status": "crashed", "reason": "pytest died: no results", "cases": []},
        {"id": "cuda-linux-v1-graph", "status": "fixed", "cases": [case("test_repro", "fixed", "v2-uva", "#1")]},
        {"id": "cuda-linux-v2-graph", "status": "pass", "cases": [case("test_repro", "pass")]},
    ]
    lines = list(commands(document(cells)))
    assert lines == [
        "::error title=vLLM 0.33.0 cuda-wsl2new-v1-graph%3A regression::test_gate_value[pin] "
        "(rule cuda-new-kernel-opt-in-on, https://example.org/41496)",
        "::error title=vLLM 0.33.0 rocm-linux-v1-eager%3A crashed::pytest died: no results",
        "::notice title=vLLM 0.33.0 cuda-linux-v1-graph%3A fixed::test_repro (rule v2-uva, #1)",
    ]
    counts = outputs(document(cells))
    assert (counts["cells"], counts["regression"], counts["crashed"], counts["fixed"], counts["pass"]) == (
        4,
        1,
        1,
        1,
        1,
    )


def test_no_input_text_can_end_the_command_start_another_or_mask_anything():
    cells = [{"id": HOSTILE, "status": "regression", "cases": [case(HOSTILE, "regression", HOSTILE, HOSTILE)]}]
    (line,) = commands(document(cells, vllm=HOSTILE))
    assert "\n" not in line and "\r" not in line and line.startswith("::error title=vLLM x\\n")
    title, _, message = line.removeprefix("::error title=").partition("::")
    # The title holds no ':' or ',' of its own (GitHub's separators), the message no '%' that could decode.
    assert ":" not in title and "," not in title
    # Decoded as GitHub decodes a message, it is still one line: the '::add-mask::' inside it is text, since the
    # runner reads a command only at the start of a line, and its legacy '##[' form is escaped wherever it is.
    decoded = message.replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
    assert "\n" not in decoded and "\r" not in decoded and "##[" not in line
    assert decoded.startswith("x\\n::add-mask::secret %0A\\x23#[error]y\\r,z: (rule ")


def test_past_the_ones_github_shows_one_line_says_how_many_more():
    cells = [{"id": f"cell-{n}", "status": "crashed", "reason": "r", "cases": []} for n in range(MOST + 5)]
    lines = list(commands(document(cells)))
    assert len(lines) == MOST + 1 and lines[-1].endswith("::5 more: the step summary lists every cell")


def test_the_command_appends_the_counts_and_refuses_what_no_report_wrote(tmp_path):
    compat, out = tmp_path / "compat.json", tmp_path / "outputs"
    compat.write_text(json.dumps(document([{"id": "c", "status": "pass", "cases": []}])))
    out.write_text("earlier=1\n")
    done = run_module("matrix", "annotations", str(compat), "--github-output", str(out))
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert out.read_text().splitlines()[:3] == ["earlier=1", "cells=1", "pass=1"]
    for text, says in (("{", "cannot be read"), ('{"versions": []}', "is not a report's compat.json (schema")):
        compat.write_text(text)
        done = run_module("matrix", "annotations", str(compat))
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr, done.stderr


def test_a_report_written_by_the_command_is_annotated_from_its_case_files(tmp_path):
    """compat.json names each release's case file; the failing cases' rules come from there, and a case file that
    is not the one compat.json names is refused in one line."""
    results = tmp_path / "results"
    results.mkdir()
    contradicted = gate_case("test_gate_value[pin]", "pin", "unset", "True")  # rule wsl-no-pin expects False
    write_suite(results / "a.xml", "cuda-wsl2new-v1-eager", [contradicted])
    done = run_module("matrix", "report", str(results), "--out", str(tmp_path / "night"))
    assert done.returncode == 1, done.stderr
    compat = tmp_path / "night" / "compat.json"
    done = run_module("matrix", "annotations", str(compat))
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "cuda-wsl2new-v1-eager" in line]
    assert line.startswith("::error title=vLLM 0.33.0 cuda-wsl2new-v1-eager%3A regression::")
    assert line.endswith("::test_gate_value[pin] (rule wsl-no-pin)")
    (case_file,) = (tmp_path / "night" / "cases").iterdir()
    case_file.write_text(case_file.read_text() + " ")
    done = run_module("matrix", "annotations", str(compat))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "its SHA-256 differs" in done.stderr
