"""The offline GPU run's engine bench (repro/engine_bench.py) with its stand-in engine, and the import of its record.

No GPU here: ``WSLPIN_BENCH_ENGINE=stand-in`` makes each engine process time the bench's stand-in generate
(12% faster with pinned memory on a WSL2 host, no faster on native Linux, where both arms have it; its V2 runner
does not start without pinned memory) instead of vLLM. The plan and the environment record are the H200 run's,
kept in docs/evidence/gpu-runs/, with one cell of the bench made gate-only. Everything but vLLM is the real code:
the planning, the rounds, one process per arm, the deadline, the statistics, the record and the import.
"""

import json
import re
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, run_module

from matrix.cells import Host, select
from matrix.commands.offline import (
    BENCH_RECORD,
    ENV_RECORD,
    IMPORTED_BENCH,
    PLAN_RECORD,
    GroupRun,
    GroupStatus,
    OfflineRun,
    import_run,
)
from matrix.errors import MatrixError
from matrix.host.record import EnvironmentRecord
from matrix.plan import CellPlan, Execution, Plan, load_plan
from matrix.store.engine_bench import Configuration, EngineBench, read_engine_bench, summary
from matrix.store.groups import BENCH_GROUP
from matrix.variables import BENCH_ENGINE
from repro import engine_bench, gpu_run
from repro.isolation import DEADLINE_VARIABLE

KEPT = ROOT / "docs" / "evidence" / "gpu-runs" / "h200-vllm-0.26.0-2026-12-04"
GATE_ONLY = "cuda-wsl2new-v1-graph"
# Whose stand-in has the effect, none, and an arm that does not start.
EFFECT, CONTROL, FAILING = "cuda-wsl2new-v1-eager", "cuda-linux-v1-graph", "cuda-wsl2new-v2-eager"
ROUNDS, JOBS = 3, 4  # 6 engine processes a round: two waves, the second of 2
LINE = re.compile(r"^bench: (\S+) (\S+) (pin unset|pin=1) round (\d+): ")


def bench_plan(tmp: Path) -> Path:
    """The H200's plan with ``GATE_ONLY`` left without a GPU."""
    kept = load_plan(KEPT / PLAN_RECORD)
    cells = tuple(
        CellPlan(p.cell, Execution.GATE_ONLY, "no GPU for it in this test") if p.cell.id == GATE_ONLY else p
        for p in kept.cells
    )
    path = tmp / PLAN_RECORD
    Plan(cells, kept.here, kept.env_hash).write(path)
    return path


def bench(tmp: Path, rounds: int, deadline: float, marker: str = "") -> tuple[Path, str, float]:
    """The bench group's command as the run gives it, with the stand-in engine: its record, stdout and seconds."""
    out = tmp / BENCH_RECORD
    command = gpu_run.bench_command(sys.executable, str(bench_plan(tmp)), str(KEPT / ENV_RECORD), str(out), JOBS)
    assert command[1:3] == ["-m", "repro.engine_bench"]
    env = {BENCH_ENGINE.name: "stand-in", DEADLINE_VARIABLE: f"{deadline:.3f}", "WSLPIN_TEST_MARKER": marker}
    options = ("--rounds", str(rounds), "--repetitions", "5", "--tokens", "8", "--model-cache", str(ROOT / "build"))
    started = time.monotonic()
    done = run_module("repro.engine_bench", *command[3:], *options, env=env, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    return out, done.stdout, time.monotonic() - started


@dataclass(frozen=True)
class Benched:
    out: Path
    record: EngineBench
    stdout: str
    round_s: float  # what a round took


@pytest.fixture(scope="module")
def benched(tmp_path_factory) -> Benched:
    out, stdout, seconds = bench(tmp_path_factory.mktemp("bench"), ROUNDS, time.time() + 100)
    print(f"stand-in bench: {ROUNDS} rounds in {seconds:.1f} s")
    return Benched(out, read_engine_bench(out), stdout, seconds / ROUNDS)


def by_pair(record):
    return {(b.cell, b.configuration): b for b in record.benches}


def test_rounds_are_whole_and_each_arm_is_a_process_of_its_own_interleaved(benched):
    record, stdout = benched.record, benched.stdout
    order = [m.groups() for m in map(LINE.match, stdout.splitlines()) if m]
    pairs = [
        (cell.id, c)
        for cell, configurations in engine_bench.BENCH_CELLS
        if cell.id != GATE_ONLY
        for c in configurations
    ]
    expected = []
    for number in range(1, ROUNDS + 1):
        arms = ("pin unset", "pin=1") if number % 2 else ("pin=1", "pin unset")
        expected += [(cell, str(c), arm, str(number)) for cell, c in pairs for arm in arms]
    assert order == expected
    assert record.rounds_run == ROUNDS and record.stopped == "" and record.settings.engines_at_once == JOBS
    for pair in record.benches:
        assert [[p.round for p in arm.processes] for arm in pair.arms] == [[1, 2, 3]] * 2


def test_the_stand_ins_effect_is_resolved_and_its_absence_is_not(benched):
    record = benched.record
    pairs = by_pair(record)
    for comparison in pairs[EFFECT, Configuration.OFFLOAD].comparisons:
        assert comparison.resolved and -0.2 < comparison.relative < -0.05, comparison
        assert comparison.high < 0 and comparison.rounds == (1, 2, 3)
        assert re.match(r"ITL at batch \d: pin=1 \d+\.\d% faster than pin unset \[", comparison.verdict)
        assert [arm.n for arm in comparison.arms] == [15, 15]
    for comparison in pairs[CONTROL, Configuration.NO_OFFLOAD].comparisons:
        assert not comparison.resolved and comparison.low < 0 < comparison.high, comparison
        assert "no difference resolved" in comparison.verdict
    assert "no difference is expected" in pairs[CONTROL, Configuration.NO_OFFLOAD].note
    assert "not WSL2's cost" in pairs[EFFECT, Configuration.OFFLOAD].note
    assert pairs[EFFECT, Configuration.OFFLOAD].execution is Execution.EMULATED
    assert record.stand_in and BENCH_ENGINE.name in record.stand_in_reason and record.gpu == "NVIDIA H200"
    process = pairs[EFFECT, Configuration.OFFLOAD].arms[1].processes[0]
    assert process.ok and process.pin_memory is True and process.profile is None
    assert "stand-in runs no GPU" in process.profile_reason
    assert [(s.batch, len(s.itl_ms), len(s.tokens_per_s)) for s in process.samples] == [(1, 5, 5), (8, 5, 5)]


def test_an_arm_that_does_not_start_is_a_result_and_a_comparison_not_made(benched):
    record = benched.record
    for configuration in (Configuration.NO_OFFLOAD,):
        pair = by_pair(record)[FAILING, configuration]
        unset, opted_in = pair.arms
        assert [p.outcome for p in unset.processes] == ["uva-not-available"] * ROUNDS
        assert all("UVA is not available" in p.message and "\n" not in p.message for p in unset.processes)
        assert all(p.ok for p in opted_in.processes)
        for comparison in pair.comparisons:
            assert comparison.relative is None and not comparison.resolved and comparison.rounds == ()
            assert "could not be made: pin unset measured in no round (uva-not-available)" in comparison.verdict
    assert [(s.cell, s.reason) for s in record.skipped] == [
        (GATE_ONLY, "no GPU for this cell: gate-only (no GPU for it in this test)")
    ]
    lines = summary(record)
    assert "a stand-in, not vLLM" in lines[1] and f"  {GATE_ONLY}: skipped: no GPU for this cell" in lines[-1]


def test_the_record_round_trips_and_a_damaged_one_is_one_line(benched, tmp_path):
    out, record = benched.out, benched.record
    assert record.to_json() == out.read_text()
    assert out.stat().st_size < 64 << 10
    good = json.loads(out.read_text())
    for damage, says in (
        (lambda d: d.pop("settings"), "'settings' is a required property"),
        (lambda d: d["benches"][0]["arms"][0]["processes"][0]["samples"][0]["itl_ms"].append("7"), "a string"),
        (lambda d: d["benches"][0].update(configuration="offloaded"), "is not one of"),
        (lambda d: d["host"].update(kernel=[6, -1, 0]), "less than the minimum"),
    ):
        broken = json.loads(json.dumps(good))
        damage(broken)
        path = tmp_path / "bench.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(MatrixError) as raised:
            read_engine_bench(path)
        message = str(raised.value)
        assert "\n" not in message and str(path) in message and says in message, message
    path.write_text('{"schema": "wslpin-kit.engine-bench/1", ')
    with pytest.raises(MatrixError, match="is not an engine-level benchmark record"):
        read_engine_bench(path)


def live(marker: str) -> list[int]:
    """This machine's processes whose environment carries ``marker``: what the bench started and left running."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"WSLPIN_TEST_MARKER={marker}".encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue  # ended while listed, or not ours to read
    return found


def test_the_deadline_leaves_whole_rounds_and_no_child_past_it(benched, tmp_path):
    marker = uuid.uuid4().hex
    # Time for two rounds or so, by what one took on this machine just now: far fewer than the 50 asked for.
    deadline = time.time() + 2.5 * benched.round_s
    out, stdout, _ = bench(tmp_path, 50, deadline, marker)
    # The bench waits for every child of a wave: it ends soon after its children (the run gives it 15 s).
    assert time.time() < deadline + 3, "the bench outlived its deadline"
    assert live(marker) == []
    record = read_engine_bench(out)
    assert 1 <= record.rounds_run < 50 and " not started: " in record.stopped, record.stopped
    assert f"bench: {record.stopped}" in stdout
    for pair in record.benches:
        measured = [{p.round for p in arm.processes if p.ok} for arm in pair.arms]
        if pair.cell != FAILING:
            assert set(range(1, record.rounds_run + 1)) <= measured[0] & measured[1], pair


def test_the_import_copies_the_record_beside_the_results_and_refuses_a_link(benched, tmp_path):
    out = benched.out
    folder = tmp_path / "h200-bench"
    folder.mkdir()
    shutil.copy(KEPT / ENV_RECORD, folder)
    shutil.copy(out, folder / BENCH_RECORD)
    groups = (GroupRun(BENCH_GROUP, GroupStatus.FINISHED, 0, 20.0),)
    OfflineRun("cuda-*", "2026-12-05T10:00:00+00:00", 543.0, 513.0, 10, groups, 348.0).write(folder / "run.json")
    imported = import_run(folder, tmp_path / "results")
    assert imported.bench == tmp_path / "results" / "0.26.0" / "bench" / IMPORTED_BENCH
    assert imported.bench.read_bytes() == out.read_bytes() and imported.directories == {}
    (folder / BENCH_RECORD).unlink()
    (folder / BENCH_RECORD).symlink_to(out)
    with pytest.raises(MatrixError, match="a symbolic link, where the file itself is expected"):
        import_run(folder, tmp_path / "again")
    (folder / BENCH_RECORD).unlink()
    (folder / BENCH_RECORD).write_text('{"schema": "wslpin-kit.engine-bench/1"}')
    with pytest.raises(MatrixError, match="is not an engine-level benchmark record"):
        import_run(folder, tmp_path / "again")
    assert not (tmp_path / "again").exists()


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_kept_first_run_imports_the_same_with_its_plan_or_with_one_made_from_its_record(tmp_path):
    env = EnvironmentRecord.read(KEPT / ENV_RECORD, "env.json", "")
    assert Plan.from_record(select("cuda-*"), env) == load_plan(KEPT / PLAN_RECORD)
    with_plan = import_run(KEPT, tmp_path / "with")
    without = tmp_path / "folder" / KEPT.name
    shutil.copytree(KEPT, without)
    (without / PLAN_RECORD).unlink()
    made = import_run(without, tmp_path / "without")
    assert with_plan.bench is None is made.bench
    written = tree(tmp_path / "with")
    assert written and written == tree(tmp_path / "without")


def test_a_cell_the_plan_gives_no_gpu_or_does_not_hold_is_skipped_with_why():
    kept = load_plan(KEPT / PLAN_RECORD)
    linux = Plan(tuple(p for p in kept.cells if p.cell.host is Host.LINUX), kept.here, kept.env_hash)
    pairs, skipped = engine_bench.bench_pairs(linux)
    assert [pair.label for pair in pairs] == [f"{CONTROL} no-offload"]
    assert [cell.reason for cell in skipped] == ["not in the run's plan"] * 3
    assert engine_bench.nothing_to_bench(linux) == ""
    gate_only = Plan(tuple(CellPlan(p.cell, Execution.GATE_ONLY, "no GPU") for p in linux.cells), kept.here, "")
    reason = engine_bench.nothing_to_bench(gate_only)
    assert reason == (
        f"no cell of the bench has a GPU here: {CONTROL}: no GPU for this cell: gate-only (no GPU); "
        f"{GATE_ONLY}, {EFFECT}, {FAILING}: not in the run's plan"
    )


def test_mistakes_are_one_line(tmp_path):
    out = tmp_path / BENCH_RECORD
    command = gpu_run.bench_command(sys.executable, str(bench_plan(tmp_path)), str(KEPT / ENV_RECORD), str(out), JOBS)
    for options, env, says in (
        (("--rounds", "0"), {}, "--rounds 0 leaves nothing to measure"),
        ((), {BENCH_ENGINE.name: "fake"}, "WSLPIN_BENCH_ENGINE='fake': the bench knows only 'stand-in'"),
        (("--plan", str(tmp_path / "none.json")), {}, "does not exist"),
    ):
        done = run_module("repro.engine_bench", *command[3:], *options, env=env)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and says in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1 and not out.exists()


def test_a_stand_ins_record_is_shown_as_one_and_never_kept_as_evidence(benched, tmp_path):
    """The stand-in's figures measure the bench: the report of such a run says so on every line that shows them,
    and the evidence store refuses the record, so no published page shows them as a measurement."""
    from matrix.report.model import build_report
    from matrix.report.outputs import report_outputs
    from matrix.store.evidence import Source, add_probes

    held = tmp_path / "bench"
    held.mkdir()
    shutil.copy(benched.out, held / IMPORTED_BENCH)
    report = build_report([], kit_commit="test", engine_benches=str(held))
    outputs = {name: "".join(chunks) for name, chunks in report_outputs(report).items()}
    page, md = outputs["index.html"], outputs["COMPATIBILITY.md"]
    assert "engine on NVIDIA H200 (stand-in)" in page and "a stand-in engine, not vLLM" in page
    assert "engine on NVIDIA H200 (stand-in)" in md and "no difference resolved" in md
    (bench,) = json.loads(outputs["compat.json"])["engine_benches"]
    assert bench["stand_in"] is True and {c["cell"] for c in bench["cells"]} == {EFFECT, CONTROL, FAILING}
    added = add_probes([str(held)], tmp_path / "store", Source.MAINTAINER)
    assert added.new == [] and "a stand-in's benchmark" in added.not_kept[0].reason
    assert not (tmp_path / "store").exists()


def test_a_gpus_record_is_kept_once_and_published_without_the_stand_in_word(benched, tmp_path):
    """What a record from a GPU would be (the stand-in's, its flag turned off as a GPU's run writes it): kept in
    the store's engine-bench folder once, and shown with its GPU and model."""
    from matrix.report.model import build_report
    from matrix.report.outputs import report_outputs
    from matrix.store.evidence import Source, add_probes

    held = tmp_path / "bench"
    held.mkdir()
    document = json.loads(benched.out.read_text()) | {"stand_in": False, "stand_in_reason": ""}
    (held / IMPORTED_BENCH).write_text(json.dumps(document))
    store = tmp_path / "store"
    (kept,) = add_probes([str(held)], store, Source.MAINTAINER).new
    assert kept.parent == store / "engine-bench" / "maintainer" and kept.name.endswith(".engine-bench.json")
    assert add_probes([str(held)], store, Source.MAINTAINER).new == []
    report = build_report([], kit_commit="test", engine_benches=str(store / "engine-bench"))
    md = "".join(report_outputs(report)["COMPATIBILITY.md"])
    assert "engine on NVIDIA H200" in md and "(stand-in)" not in md and "LlamaForCausalLM of 2 layers" in md
