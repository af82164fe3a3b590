"""The report's outputs are written whole or not at all, by one writer at a time, never through a link.

Faults against the real command: a SIGKILL while it writes, a write that fails midway (a file-size limit
set on the child: the disk running out looks the same to the writer, and this needs no mount), a second
report into the same directory while one holds it, a link planted at an output's name or at the directory of
the per-release files, and a release the next report no longer holds.
"""

from __future__ import annotations

import fcntl
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from builders import gate_case, write_suite
from conftest import ROOT, run_module

# The inputs below name vLLM 0.33.0: its page and its case file are outputs beside the five.
OUTPUTS = (
    "COMPATIBILITY.md",
    "index.html",
    "strips.svg",
    "bandwidth.svg",
    "compat.json",
    "releases/0.33.0.html",
    "cases/0.33.0.json",
)


def files(out: Path) -> list[str]:
    """Every file under ``out``, by its path relative to it."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if not p.is_dir())


def small_input(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_suite(folder / "a.xml", "cuda-linux-v1-graph", [gate_case("t", "pin", "unset", "True")])
    return folder


def large_input(folder: Path, cases: int = 60_000) -> Path:
    """Enough test cases that writing compat.json takes a while."""
    folder.mkdir(parents=True, exist_ok=True)
    many = [f'<testcase classname="big" name="case_{i:06d}_with_a_name_of_some_length"/>' for i in range(cases)]
    write_suite(folder / "big.xml", "cuda-linux-v1-graph", many)
    return folder


def last_report(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    out = tmp_path / "out"
    done = run_module("matrix", "report", str(small_input(tmp_path / "small")), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out, {name: (out / name).read_bytes() for name in OUTPUTS}


def as_it_was(out: Path, before: dict[str, bytes]) -> None:
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == before
    assert files(out) == sorted(OUTPUTS), "a partial file was left behind"


def test_a_report_killed_while_it_writes_leaves_the_last_report_whole(tmp_path):
    out, before = last_report(tmp_path)
    big = large_input(tmp_path / "big")
    proc = subprocess.Popen(
        [sys.executable, "-m", "matrix", "report", str(big), "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not any(p.name.endswith(".partial") for p in out.rglob("*")):
            assert proc.poll() is None, "the report ended before it wrote anything: give it a larger input"
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == before
    # The next report removes what the killed one left, and writes its own.
    done = run_module("matrix", "report", str(big), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert files(out) == sorted(OUTPUTS)
    assert (out / "index.html").read_text().endswith("</html>\n")


def _file_size_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_write_that_fails_midway_is_one_line_and_changes_nothing(tmp_path):
    out, before = last_report(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "matrix", "report", str(large_input(tmp_path / "big", 20_000)), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=_file_size_limit(256 << 10),
        check=False,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"cannot write the report into {out} (File too large): the report there is as it was" in done.stderr
    as_it_was(out, before)


def test_a_second_report_into_a_directory_being_written_is_refused(tmp_path):
    out, before = last_report(tmp_path)
    held = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a report writing there holds it
        done = run_module("matrix", "report", str(small_input(tmp_path / "other")), "--out", str(out))
    finally:
        os.close(held)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "another report is being written there now: wait for it to end, or give another --out" in done.stderr
    as_it_was(out, before)


def test_an_output_name_holding_a_link_is_replaced_not_written_through(tmp_path):
    out, _ = last_report(tmp_path)
    outside = tmp_path / "outside.html"
    outside.write_text("keep me")
    (out / "index.html").unlink()
    (out / "index.html").symlink_to(outside)
    done = run_module("matrix", "report", str(small_input(tmp_path / "small")), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert outside.read_text() == "keep me"
    assert not (out / "index.html").is_symlink() and (out / "index.html").read_text().endswith("</html>\n")


def test_the_per_release_directory_is_never_followed_through_a_link(tmp_path):
    out, before = last_report(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("cases", "releases"):
        (out / name / "0.33.0.json").unlink(missing_ok=True)
        (out / name / "0.33.0.html").unlink(missing_ok=True)
        (out / name).rmdir()
    (out / "cases").symlink_to(outside)
    done = run_module("matrix", "report", str(small_input(tmp_path / "small")), "--out", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"cannot write the report into {out}" in done.stderr
    assert list(outside.iterdir()) == [] and (out / "compat.json").read_bytes() == before["compat.json"]


def test_a_release_the_next_report_no_longer_holds_leaves_no_file_behind(tmp_path):
    """Its page and case file go once the new report is in place; a file of another shape there is not the
    report's to remove."""
    out, _ = last_report(tmp_path)
    (out / "cases" / "notes.txt").write_text("mine")
    newer = tmp_path / "newer"
    newer.mkdir()
    write_suite(newer / "a.xml", "cuda-linux-v1-graph", [gate_case("t", "pin", "unset", "True")], vllm="0.34.0")
    done = run_module("matrix", "report", str(newer), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert [p for p in files(out) if "/" in p] == ["cases/0.34.0.json", "cases/notes.txt", "releases/0.34.0.html"]
