"""tools/compat_diff.py: what the publish check in .ci/run relies on to prove the report publishes the same."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

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
