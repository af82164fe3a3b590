"""The offline GPU run (tools/gpu_run.sh), dry-run here, and the import of what it hands back.

No GPU here: every cell is planned gate-only, so the gate tests run, the probe and repro groups
reach pytest with every case skipped for want of a GPU, and the engine bench is skipped, none of
its cells having one (tests/kit/test_engine_bench.py runs it with its stand-in engine). The kit's
test venv stands in for the device's python3, and its vLLM 0.33.0 (gate-only) for the carried
0.26.0. The run gets the kit's tree as a device call sends it (tracked and untracked-not-ignored
files) plus what it carries.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from builders import kit_as_sent
from conftest import ROOT, require_gate_only, run_module

from matrix.cells import select
from matrix.commands.offline import (
    BENCH_RECORD,
    IMPORTED_PROBE,
    PLAN_RECORD,
    PROBE_RECORD,
    GroupRun,
    GroupStatus,
    group_junit,
)
from matrix.host.facts import torch_info, vllm_info
from matrix.junit import outcome_word, parse, properties
from matrix.plan import CellPlan, Execution
from repro import gpu_run

# What the device tool hands back (its README): at most 8 files, 16 MiB each, 64 MiB together.
MAX_FILES, MAX_FILE, MAX_FILES_TOTAL = 8, 16 << 20, 64 << 20
FILE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
GROUPS = {"gate", "probe", "repro"}


@pytest.fixture(scope="module")
def device_kit(tmp_path_factory) -> Path:
    """The kit as the run's device call sends it: its tree, and the dependencies ``prepare`` staged."""
    prepared = run_module("repro.gpu_run", "prepare")
    assert prepared.returncode == 0, prepared.stderr
    kit = kit_as_sent(tmp_path_factory.mktemp("device") / "kit")
    shutil.copytree(ROOT / gpu_run.DEPS, kit / gpu_run.DEPS)
    return kit


def ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_on_device(kit: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    """``bash tools/gpu_run.sh`` as the device runs it, this venv's Python as its python3.

    Started with SIGINT ignored, as a launcher that runs it in the background leaves it: the run must still stop
    its pytest at the deadline (``test_a_run_past_its_deadline_records_every_case_as_not_run``).
    """
    bin_dir = out.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    python3 = bin_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python3.chmod(0o755)
    env = {**os.environ, "OUT": str(out), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(kit / "tools" / "gpu_run.sh"), *args],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        preexec_fn=ignore_interrupts,
    )


# The dry runs take a native-Linux and a WSL2 cell of the device's cuda-* set: the same groups, files and
# deadline as the whole set, in a quarter of the gate's time (each cell runs three times in CI). The device's
# own command, with every cuda-* cell, is checked against the tool's limits above.
DRY_CELLS = "cuda-linux-v1-graph,cuda-wsl2new-v2-graph"


@pytest.fixture(scope="module")
def dry_run(device_kit, tmp_path_factory):
    require_gate_only(DRY_CELLS)
    out = tmp_path_factory.mktemp("dry") / "out"
    started = time.monotonic()
    done = run_on_device(device_kit, out, "--cells", DRY_CELLS)
    print(f"dry run: {time.monotonic() - started:.0f} s")
    return out, done


def import_run(folder: Path, where: Path) -> subprocess.CompletedProcess:
    return run_module(
        "matrix", "import-run", str(folder), "--results", str(where / "results"), "--report", str(where / "report")
    )


def test_the_device_calls_fit_the_tool_and_are_the_documented_ones(device_kit):
    docs = (ROOT / "docs" / "device-run.md").read_text()
    for command, carry in gpu_run.DEVICE_CALLS:
        assert len(command) <= gpu_run.COMMAND_LIMIT
        assert command in docs and all(f'"{path}"' in docs for path in carry)
        assert len(carry) <= 8
    parts = gpu_run.carried_bytes()
    assert parts[gpu_run.DEPS] > 0, "prepare staged nothing"
    assert sum(parts.values()) <= gpu_run.CALL_LIMIT, parts


@pytest.mark.reads_host
def test_the_dry_run_writes_every_group_within_the_limits(dry_run):
    out, done = dry_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    files = list(out.iterdir())
    assert len(files) <= MAX_FILES and all(f.is_file() and FILE_NAME.match(f.name) for f in files)
    assert all(f.stat().st_size <= MAX_FILE for f in files) and sum(f.stat().st_size for f in files) <= MAX_FILES_TOTAL
    groups = {f"{group}.xml" for group in GROUPS}
    # The plan stays behind (the import makes it again from env.json); the skipped bench writes no record.
    names = {f.name for f in files}
    assert names >= {"run.json", "env.json", "gpu-run.log", *groups} and not names & {PLAN_RECORD, BENCH_RECORD}
    run = json.loads((out / "run.json").read_text())
    assert [(g["group"], g["status"], g["exit_code"]) for g in run["groups"]] == [
        *((group, "finished", 0) for group in gpu_run.GROUPS),
        ("bench", "skipped", None),
    ]
    why = "no cell of the bench has a GPU here: cuda-linux-v1-graph: no GPU for this cell: gate-only ("
    reason = run["groups"][-1]["reason"]
    assert reason.startswith(why) and reason.endswith(
        "cuda-wsl2new-v1-eager, cuda-wsl2new-v2-eager: not in the run's plan"
    )
    log = (out / "gpu-run.log").read_text()
    assert f"bench: skipped: {why}" in log and "--plan=$RUN_TMP/plan.json" in log
    # As it goes, the log says which group has started, then how it ended, after how long, with its cases' tally.
    for number, group in enumerate(gpu_run.GROUPS, 1):
        assert re.search(rf"\] {group}, {number} of 4: started, \d+ s left for the groups: -m pytest ", log), group
        ended = re.search(rf"\] {group}: finished after \d+ s, exit 0: (.+)\n", log)
        assert ended, group
        said = {word: int(n) for n, word in (part.split(" ", 1) for part in ended[1].split(", "))}
        assert said == Counter(outcome_word(case) for case in parse(out / f"{group}.xml").iter("testcase"))
    assert gpu_run.tally(out / "bench.xml").startswith("no JUnit to read (")
    # The groups before the bench end the bench's seconds before the run's deadline, their children earlier still.
    kept = gpu_run.DEFAULT_BENCH_SECONDS + gpu_run.STOP_GRACE
    assert run["groups_deadline_s"] == pytest.approx(run["deadline_s"] - kept, abs=0.2)
    # The record says which vLLM and torch ran: the Python's own, nothing installed.
    packages = json.loads((out / "env.json").read_text())["packages"]
    assert packages["vllm"]["version"] == vllm_info()["version"]
    assert packages["torch"]["version"] == torch_info()["version"]
    for group in ("probe", "repro"):
        cases = list(parse(out / f"{group}.xml").iter("testcase"))
        assert cases and all(c.find("skipped") is not None for c in cases)
        assert all("no GPU for this cell: gate-only" in c.find("skipped").get("message") for c in cases)
    gate = list(parse(out / "gate.xml").iter("testcase"))
    assert {properties(c)["cell"] for c in gate} == {cell.id for cell in select(DRY_CELLS)}


@pytest.mark.reads_host
def test_the_folder_names_neither_the_machines_checkout_nor_its_own_place(dry_run, device_kit):
    """pytest names a skip by its test file's absolute path, and the run's commands name $OUT: the folder comes
    back to be shared and published, so it names the kit's files relative to the kit and its own as $OUT."""
    out, _ = dry_run
    texts = {f.name: f.read_text(errors="replace") for f in out.iterdir()}
    assert [name for name, text in texts.items() if str(device_kit) in text or str(out) in text] == []
    assert "tests/cell/test_repro.py:" in texts["probe.xml"] and "$OUT/env.json" in texts["gpu-run.log"]


@pytest.mark.reads_host
def test_the_import_turns_the_folder_into_results_and_the_report(dry_run, tmp_path):
    out, _ = dry_run
    done = import_run(out, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    release = vllm_info()["version"]
    for group in GROUPS:
        written = sorted(p.name for p in (tmp_path / "results" / release / group).glob("*.xml"))
        assert written == sorted(f"{cell.id}.xml" for cell in select(DRY_CELLS))
    compat = json.loads((tmp_path / "report" / "compat.json").read_text())
    (version,) = compat["versions"]
    statuses = {c["id"]: c["status"] for c in version["cells"]}
    assert all(statuses[cell.id] == "pass" for cell in select(DRY_CELLS)), statuses
    envelope = parse(tmp_path / "results" / release / "gate" / "cuda-linux-v1-graph.xml").find(".//properties")
    props = {p.get("name"): p.get("value") for p in envelope}
    # The evidence names the run by its folder, which a maintainer names for it (the lent machine's host name says
    # nothing about which run it was).
    assert props["runner_name"] == out.name and props["execution"] == "gate-only"


@pytest.mark.reads_host
def test_a_run_past_its_deadline_records_every_case_as_not_run(device_kit, tmp_path):
    require_gate_only(DRY_CELLS)
    out = tmp_path / "out"
    # Half a second for the children: whichever group starts finds its children cut, and pytest itself
    # may be stopped (the gate's parent imports torch before it finds no child may start). Nothing is kept for
    # the bench, which has no cell with a GPU here anyway.
    budget = str(gpu_run.RESERVE + gpu_run.STOP_GRACE + 0.5)
    done = run_on_device(device_kit, out, "--cells", DRY_CELLS, "--budget", budget, "--bench-seconds", "0")
    assert done.returncode == 1
    run = json.loads((out / "run.json").read_text())
    assert [g["status"] for g in run["groups"]][-2:] == ["not-started", "skipped"]
    imported = import_run(out, tmp_path)
    assert imported.returncode == 0, imported.stderr
    for group in GROUPS:
        for cell in select(DRY_CELLS):
            cases = list(
                parse(tmp_path / "results" / vllm_info()["version"] / group / f"{cell.id}.xml").iter("testcase")
            )
            skipped = [case.find("skipped") for case in cases]
            assert cases and None not in skipped, f"a case of {cell} in {group} ran"
            # Each cell says why; the cases that hang on one it cut say they do (e.g. "see test_vllm_imports").
            assert any(
                s.get("message").startswith("not run: ") and "the run's deadline" in s.get("message") for s in skipped
            )


STOPPED_TESTS = """
import pathlib, time, pytest

@pytest.mark.parametrize("cell", ["cuda-linux-v1-graph", "cuda-linux-v1-eager"])
def test_case(cell, record_property):
    record_property("cell", cell)
    if cell.endswith("eager"):
        pathlib.Path("started").write_text("")
        time.sleep(600)
"""


def test_a_pytest_stopped_at_the_deadline_keeps_what_finished(tmp_path):
    # What pytest itself writes when interrupted mid-case: the finished case, and one without a name.
    (tmp_path / "test_stopped.py").write_text(STOPPED_TESTS)
    # Pytest's own behaviour is the subject: none of the suite's variables (plugins, hooks on PYTHONPATH, the
    # kit's records) reach it. In the full suite under load it once waited out the 60 s below with them.
    # Nor does how this suite was started: SIGINT ignored by a background launcher stays ignored in the child.
    own = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON", "WSLPIN_", "COV"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "test_stopped.py", "-p", "no:cacheprovider", "-o", "junit_family=xunit1"]
        + ["--junitxml=repro.xml", "-q"],
        cwd=tmp_path,
        env=own,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    while not (tmp_path / "started").exists():
        assert proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) != 0
    assert any(not c.get("name") for c in parse(tmp_path / "repro.xml").iter("testcase"))

    plans = [CellPlan(cell, Execution.NATIVE, "stand-in") for cell in select("cuda-linux-v1-*")]
    into = tmp_path / "into"
    into.mkdir()
    raw = group_junit(tmp_path, GroupRun("repro", GroupStatus.STOPPED, 2, 9.0), plans, "the run's deadline", into)
    cases = [(c.get("name"), properties(c)["cell"], c.find("skipped") is not None) for c in parse(raw).iter("testcase")]
    assert cases == [
        ("test_case[cuda-linux-v1-graph]", "cuda-linux-v1-graph", False),
        ("cases_not_run", "cuda-linux-v1-graph", True),
        ("cases_not_run", "cuda-linux-v1-eager", True),
    ]


@pytest.mark.reads_host
def test_the_import_copies_no_file_through_a_link_in_the_folder_or_in_the_results(dry_run, tmp_path):
    out, _ = dry_run
    folder = tmp_path / "run"
    shutil.copytree(out, folder)
    secret = tmp_path / "host-file"
    secret.write_text("a file of this machine's")
    probe = folder / PROBE_RECORD
    record = {
        "schema": "wslpin-kit.probe/1",
        "collected_at": "2026-11-20T10:00:00+00:00",
        "host": {"stack": "cuda", "host": "linux", "gpu": "a GPU (made for the test)", "kernel": "6.8.0"},
        "sections": {"pin_alloc": {"status": "ok"}},
    }
    probe.write_text(json.dumps(record))
    release = vllm_info()["version"]
    # A link already waiting where the probe record is written: replaced, its target untouched.
    target = tmp_path / "results" / release / "probe"
    target.mkdir(parents=True)
    (target / IMPORTED_PROBE).symlink_to(secret)
    done = import_run(folder, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert secret.read_text() == "a file of this machine's" and not (target / IMPORTED_PROBE).is_symlink()
    # A probe record in the folder that is a link to a file of the importing machine: refused in one line,
    # before anything is written.
    probe.unlink()
    probe.symlink_to(secret)
    done = import_run(folder, tmp_path / "again")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "a symbolic link, where the file itself is expected" in done.stderr
    assert not (tmp_path / "again" / "results").exists()


def test_mistakes_are_one_line(tmp_path):
    for args, says in (
        (["--budget", "5"], "leaves nothing to run"),
        (["--cells", "nope"], "bad cell id"),
        (["--jobs", "0"], "runs no engine"),
        (["--bench-seconds", "-1"], "keeps the bench less than nothing"),
        (["--budget", "100", "--bench-seconds", "60"], "leaves the groups before the bench nothing of --budget 100"),
    ):
        done = run_module("repro.gpu_run", "--out", str(tmp_path / "out"), *args)
        assert done.returncode == 2 and says in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    done = run_module("repro.gpu_run", env={"OUT": ""})
    assert done.returncode == 2 and "give --out DIR or set OUT" in done.stderr
    done = import_run(tmp_path, tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "run.json does not exist" in done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()
