"""tools/compat_diff.py: what the publish check in .ci/run relies on to prove the report publishes the same."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from builders import gate_case, write_suite
from conftest import ROOT

from matrix.report import render_json
from matrix.report.model import build_report

SCRIPT = ROOT / "tools" / "compat_diff.py"
OLD = {
    "schema": "wslpin-kit.compat/1",
    "generated_at": "2026-11-30T20:00:00+00:00",
    "kit_commit": "aaaa",
    "versions": [
        {
            "vllm": "0.33.0",
            "cells": [{"id": "cuda-linux-v1-graph", "status": "pass", "counts": {"pass": 14}, "age_days": 0.25}],
        },
    ],
}


CELL = "cuda-linux-v1-graph"


def compare(tmp_path, new: dict, *options: str) -> subprocess.CompletedProcess:
    (tmp_path / "old.json").write_text(json.dumps(OLD))
    (tmp_path / "new.json").write_text(json.dumps(new))
    command = [sys.executable, str(SCRIPT), *options, str(tmp_path / "old.json"), str(tmp_path / "new.json")]
    return subprocess.run(command, capture_output=True, text=True)


def test_generation_time_kit_commit_age_and_new_fields_are_not_differences(tmp_path):
    new = json.loads(json.dumps(OLD))
    new["generated_at"], new["kit_commit"] = "2026-12-01T08:00:00+00:00", "bbbb"
    new["versions"][0]["cells"][0]["age_days"] = 0.26
    new["versions"][0]["cells"][0]["execution"] = "gate-only"  # a typed field only the new kit writes
    done = compare(tmp_path, new)
    assert done.returncode == 0 and done.stdout == "", done.stdout


def test_a_changed_value_and_a_lost_key_are_each_printed_with_their_path(tmp_path):
    new = json.loads(json.dumps(OLD))
    cell = new["versions"][0]["cells"][0]
    cell["status"] = "regression"
    del cell["counts"]
    done = compare(tmp_path, new)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        '$.versions[0].cells[0].status: "pass" -> "regression"',
        '$.versions[0].cells[0].counts: {"pass": 14} -> "(absent)"',
    ]


def test_a_list_of_another_length_is_a_difference(tmp_path):
    new = json.loads(json.dumps(OLD))
    new["versions"].append({"vllm": "0.34.0", "cells": []})
    done = compare(tmp_path, new)
    assert done.returncode == 1 and "$.versions.length: 1 -> 2" in done.stdout


def test_an_ignored_key_is_no_difference_anywhere_and_everything_else_still_is(tmp_path):
    new = json.loads(json.dumps(OLD))
    cell = new["versions"][0]["cells"][0]
    cell["status"], cell["counts"] = "regression", {"pass": 13}
    done = compare(tmp_path, new, "--ignore", "counts")
    assert done.returncode == 1
    assert done.stdout.splitlines() == ['$.versions[0].cells[0].status: "pass" -> "regression"']


def published(tmp_path, monkeypatch, day: int, kit_commit: str, failure: str = "") -> Path:
    """compat.json of one cell's gate results as run and reported on day ``day`` of December by ``kit_commit``.

    Each in a clone of its own, read by the relative paths publish gives the report.
    """
    clone = tmp_path / f"{day}-{kit_commit}"
    (clone / "results").mkdir(parents=True)
    run = {"started": f"2026-12-{day:02}T09:00:00+00:00", "env_hash": f"{day:016x}", "runner_name": f"vm{day}"}
    cases = [gate_case(f"test_gate_value[{CELL}-pin]", "pin", "unset", "True", failure)]
    write_suite(clone / "results" / f"{CELL}.xml", CELL, cases, kit_commit=kit_commit, **run)
    monkeypatch.chdir(clone)
    now = dt.datetime(2026, 12, day, 12, tzinfo=dt.UTC)
    render_json.write(build_report([f"results/{CELL}.xml"], kit_commit=kit_commit, now=now), clone / "compat.json")
    return clone / "compat.json"


def compat_diff(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def cell_index(path: Path) -> int:
    return [cell["id"] for cell in json.loads(path.read_text())["versions"][0]["cells"]].index(CELL)


def test_reports_of_the_same_results_on_other_days_and_commits_are_the_same_under_volatile(tmp_path, monkeypatch):
    committed, produced = published(tmp_path, monkeypatch, 1, "aaaa"), published(tmp_path, monkeypatch, 9, "bbbb")
    assert compat_diff(committed, produced).returncode == 1  # without the mask they differ: dates, commits
    done = compat_diff("--volatile", committed, produced)
    assert done.returncode == 0 and done.stdout == "", done.stdout


def test_a_case_outcome_changed_is_a_difference_under_volatile(tmp_path, monkeypatch):
    committed = published(tmp_path, monkeypatch, 1, "aaaa")
    produced = published(tmp_path, monkeypatch, 9, "bbbb", failure='<failure message="observed False">False</failure>')
    done = compat_diff("--volatile", committed, produced)
    assert done.returncode == 1
    outcome = f'$.versions[0].cells[{cell_index(committed)}].cases[0].attempts[0].outcome: "passed" -> "failed"'
    assert outcome in done.stdout.splitlines()


def test_a_key_only_the_produced_report_has_is_a_difference_under_volatile(tmp_path, monkeypatch):
    committed = published(tmp_path, monkeypatch, 1, "aaaa")
    document = json.loads(committed.read_text())
    document["versions"][0]["added"] = True
    produced = committed.parent / "produced.json"  # beside the case files it links
    produced.write_text(json.dumps(document))
    done = compat_diff("--volatile", committed, produced)
    assert done.returncode == 1 and done.stdout.splitlines() == ['$.versions[0].added: "(absent)" -> true']


def test_the_report_in_one_file_and_split_into_case_files_are_the_same_under_volatile(tmp_path, monkeypatch):
    """The matrix published before the cases moved out (schema 1, one file, read from a pipe as
    `<(git show main:docs/matrix/compat.json)` gives it) against the one published after."""
    split = published(tmp_path, monkeypatch, 1, "aaaa")
    assert json.loads(split.read_text())["schema"] == "wslpin-kit.compat/2"
    whole = render_json.to_document(build_report([f"results/{CELL}.xml"], kit_commit="aaaa"))
    assert whole["schema"] == "wslpin-kit.compat/1" and "cases" in whole["versions"][0]["cells"][0]
    one_file = tmp_path / "elsewhere" / "compat.json"
    one_file.parent.mkdir()
    one_file.write_text(json.dumps(whole))
    done = subprocess.run(
        f"{sys.executable} {SCRIPT} --volatile <(cat {one_file}) {split}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    produced = published(tmp_path, monkeypatch, 2, "bbbb", failure='<failure message="observed False">False</failure>')
    done = compat_diff("--volatile", one_file, produced)
    assert done.returncode == 1 and ".cases[0].attempts[0].outcome" in done.stdout


def test_a_case_file_that_is_not_the_one_compat_json_names_cannot_be_compared(tmp_path, monkeypatch):
    committed = published(tmp_path, monkeypatch, 1, "aaaa")
    (case_file,) = (committed.parent / "cases").iterdir()
    case_file.write_text(case_file.read_text().replace('"passed"', '"failed"'))
    done = compat_diff("--volatile", committed, committed)
    assert done.returncode == 2
    assert f"error: {case_file} is not the file {committed} names (its SHA-256 differs)" in done.stderr
    case_file.unlink()
    done = compat_diff("--volatile", committed, committed)
    assert done.returncode == 2 and f"error: {case_file} does not exist" in done.stderr


def test_where_the_kit_was_cloned_is_no_difference_under_volatile_but_a_file_or_a_url_is(tmp_path):
    def report(message: str) -> Path:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        document = {"schema": "wslpin-kit.compat/1", "versions": [{"cells": [{"cases": [{"message": message}]}]}]}
        path.write_text(json.dumps(document))
        return path

    circular = "circular import ({}/.nox/releases/0.25.1/lib/python3.11/site-packages/vllm/utils/torch_utils.py)"
    here, there = report(circular.format("/work/kit")), report(circular.format("/tmp/ci-4f2a/k"))
    assert compat_diff("--volatile", here, there).returncode == 0
    assert (
        compat_diff("--volatile", here, report(circular.format("/work/kit").replace("torch_", "platform_"))).returncode
        == 1
    )
    issue = report("see https://github.com/vllm-project/vllm/issues/49861")
    assert (
        compat_diff("--volatile", issue, report("see https://github.com/vllm-project/vllm/issues/50126")).returncode
        == 1
    )
