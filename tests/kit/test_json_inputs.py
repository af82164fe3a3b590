"""The report's JSON inputs (--previous, --nox-report, --probes, --bench, --runners) through the real command:
a bad one is one line naming the file and what was wrong, exit 2, and the last report's files stay as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import gate_case, write_suite
from conftest import ROOT, run_module

from matrix.io.bounded_json import MAX_DIGITS

CELL = "cuda-wsl2new-v2-graph"
LAST_REPORT = "the last report, which a bad input must not overwrite\n"
OUTPUTS = ("COMPATIBILITY.md", "index.html", "compat.json")

# One good document per option: what the report reads of each kind, and nothing more.
GOOD = {
    "--previous": {"schema": "wslpin-kit.compat/1", "versions": [{"vllm": "0.33.0", "cells": []}]},
    "--nox-report": {"sessions": [{"signatures": ["cell(cuda, wsl2new, v2, graph)"], "result": "success"}]},
    "--probes": {
        "schema": "wslpin-kit.probe/1",
        "host": {"stack": "cuda", "host": "linux", "gpu": "H200"},
        "sections": {"pinned": {"status": "ok"}},
    },
    "--bench": {
        "schema": "wslpin-kit.bench/1",
        "cell": CELL,
        "started_at": "2026-11-29T12:00:00+00:00",
        "server": "vllm",
        "vllm_version": "0.33.0",
        "outcome": "ok",
        "headline": {"concurrency": 4, "verdict": "faster"},
    },
    # A runner given no cells: one given this file's cell would make its absent native result exit 1.
    "--runners": {"include": [{"artifact": "junit-cuda-wsl2new", "cells": []}]},
}
# A field each kind must have, and a field whose type the report relies on: (path of keys, a value of another type).
REQUIRED = {
    "--previous": "versions",
    "--nox-report": "sessions",
    "--probes": "host",
    "--bench": "cell",
    "--runners": "include",
}
WRONG_TYPE = {
    "--previous": (("versions", 0, "vllm"), 33),
    "--nox-report": (("sessions", 0, "signatures"), "cell(cuda, wsl2new, v2, graph)"),
    "--probes": (("sections", "pinned", "status"), 1),
    "--bench": (("headline", "concurrency"), "four"),
    "--runners": (("include", 0, "cells"), "cuda-wsl2new-v2-graph"),
}


def _without(option: str) -> bytes:
    doc = dict(GOOD[option])
    del doc[REQUIRED[option]]
    return json.dumps(doc).encode()


def _wrong_type(option: str) -> bytes:
    doc = json.loads(json.dumps(GOOD[option]))
    keys, value = WRONG_TYPE[option]
    inner = doc
    for key in keys[:-1]:
        inner = inner[key]
    inner[keys[-1]] = value
    return json.dumps(doc).encode()


# (name, the file's bytes for an option, what the error line must say was wrong)
SHAPES = [
    ("a list", lambda option: b"[]", "at $, an array where an object was expected"),
    ("a field missing", _without, "is a required property"),
    ("a field of another type", _wrong_type, "was expected"),
    ("nested 100,000 deep", lambda option: b"[" * 100_000 + b"]" * 100_000, "nested deeper than"),
    ("a 10,000-digit number", lambda option: b'{"n": ' + b"9" * 10_000 + b"}", f"10000 digits (at most {MAX_DIGITS})"),
    ("invalid UTF-8", lambda option: b'{"schema": "\xff\xfe"}', "not UTF-8: byte 0xff at offset 12"),
    ("not JSON", lambda option: b"<testsuites/>", "not JSON: Expecting value at line 1 column 1"),
    ("a number JSON does not have", lambda option: b'{"n": NaN}', "NaN, which JSON does not have"),
]


def place(option: str, data: bytes, where: Path) -> tuple[str, Path]:
    """The option's value and the file the report will read: the file itself, or a record in the directory given."""
    directory = {"--probes": where / "probes", "--bench": where / "bench"}.get(option)
    if directory is None:
        path = where / "input.json"
    else:
        path = directory / ("probe.json" if option == "--probes" else f"{CELL}/bench.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(directory or path), path


def report(tmp_path: Path, *args: str):
    junit = write_suite(tmp_path / "junit.xml", CELL, [gate_case("p", "pin", "unset", "False")])
    return run_module("matrix", "report", str(junit), "--out", str(tmp_path / "out"), *args)


@pytest.mark.parametrize("option", list(GOOD))
@pytest.mark.parametrize(("shape", "content", "said"), SHAPES, ids=[s[0] for s in SHAPES])
def test_a_bad_json_input_is_one_line_exit_2_and_the_last_report_stays(tmp_path, option, shape, content, said):
    out = tmp_path / "out"
    out.mkdir()
    for name in OUTPUTS:
        (out / name).write_text(LAST_REPORT)
    value, path = place(option, content(option), tmp_path)
    done = report(tmp_path, option, value)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {option} ") and done.stderr.count("\n") == 1
    assert str(path) in done.stderr and said in done.stderr, done.stderr
    assert [(out / name).read_text() for name in OUTPUTS] == [LAST_REPORT] * 3


@pytest.mark.parametrize("option", list(GOOD))
def test_a_good_json_input_is_read(tmp_path, option):
    value, _ = place(option, json.dumps(GOOD[option]).encode(), tmp_path)
    done = report(tmp_path, option, value)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "COMPATIBILITY.md").is_file()


def test_every_published_compat_json_is_a_good_previous(tmp_path):
    done = report(tmp_path, "--previous", str(ROOT / "docs" / "matrix" / "compat.json"))
    assert done.returncode == 0, done.stderr
    assert "Changes since the previous report" in (tmp_path / "out" / "COMPATIBILITY.md").read_text()


def test_a_previous_whose_cells_are_all_gone_names_them(tmp_path):
    """The previous report had a release no input mentions now: each of its cells that had a result went missing."""
    previous = tmp_path / "previous"
    was = write_suite(tmp_path / "was.xml", CELL, [gate_case("p", "pin", "unset", "False")], vllm="0.32.0")
    assert run_module("matrix", "report", str(was), "--out", str(previous)).returncode == 0
    done = report(tmp_path, "--previous", str(previous / "compat.json"))
    assert done.returncode == 0, done.stderr
    diff = json.loads((tmp_path / "out" / "compat.json").read_text())["diff"]
    assert diff["went_missing"] == [{"vllm": "0.32.0", "cell": CELL, "was": "pass", "now": "missing"}]
    text = (tmp_path / "out" / "COMPATIBILITY.md").read_text()
    assert f"**Went missing**: <code>{CELL}</code> (vLLM 0.32.0, was pass)" in text
