"""The offline GPU run: every ``cuda-*`` cell's gate, probe and repro groups, then the engine bench, in one command,
within a deadline.

Made for a machine that takes one command of at most 10 minutes, has no network, nox or uv, and
hands back only the files of one folder (docs/runners.md): the device machine of this workplace,
an air-gapped runner, a runner with vLLM preinstalled. ``tools/gpu_run.sh`` runs::

    python -m repro.gpu_run --out DIR [--budget S] [--jobs N] [--bench-seconds S]

against the vLLM and torch of the Python that runs it (installing nothing), and writes into DIR
the environment record, one raw JUnit per group, the probe record, the engine bench's record, a
log, and ``run.json`` (matrix/commands/offline.py), which says what ran: 8 files, the most the device hands
back. The plan, made once from the environment record (as a cell session does), stays in a folder
of the run's own: the import makes it again from that record. ``python -m matrix import-run DIR``
turns the folder into ``results/`` and the report.

One deadline bounds everything: every child the run starts (gate evaluations, engines, probe
sections) ends by it (``WSLPIN_DEADLINE``, repro/isolation.py); a group whose turn comes after it
is not started; a pytest still running at it is interrupted, which keeps the JUnit of the cases
that finished. The groups run in the order that spends the budget best: the gate (no GPU, cheap),
the probe on an idle GPU, the engines, ``--jobs`` at a time, then the engine bench
(repro/engine_bench.py). The bench is kept ``--bench-seconds`` of the budget: the groups before it
end that long before the deadline (their children STOP_GRACE earlier still), and it gets whatever
is left when they end.

``python -m repro.gpu_run prepare`` (here, before the device calls) stages the kit's pure-Python
dependencies the run carries (pytest and what it needs: the machine may lack them) and checks
that what travels fits the call.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from matrix.cells import select
from matrix.commands.offline import (
    BENCH_RECORD,
    ENV_RECORD,
    LOG,
    PLAN_RECORD,
    PROBE_RECORD,
    RUN_RECORD,
    GroupRun,
    GroupStatus,
    OfflineRun,
)
from matrix.errors import MatrixError
from matrix.junit import ERROR, FAILED, PASSED, SKIPPED, XFAIL, UnreadableError, kit_relative, outcome_word, parse
from matrix.plan import cell_pytest_args, load_plan
from matrix.store.groups import BENCH_GROUP, GROUP_TESTS
from matrix.text.cli import KIT_ROOT, run_command_line
from repro.engine_bench import nothing_to_bench
from repro.isolation import DEADLINE_VARIABLE

CELLS = "cuda-*"
# Gate first (no GPU, quick), the probe while the GPU is idle, the engines with what is left; then the bench.
GROUPS = ("gate", "probe", "repro")
# The groups, then the bench: what the log's lines count ("gate, 1 of 4: started").
STEPS = len(GROUPS) + 1
DEFAULT_BUDGET = 540.0
# What the engine bench is kept: at least two minutes, whatever the groups before it would take.
DEFAULT_BENCH_SECONDS = 150.0
# Ten engines of the tiny model ran at once on the lent H200 (docs/device-run.md, "What runs there").
DEFAULT_JOBS = 10
# After the children's deadline: pytest judges what came back and writes its JUnit; one still
# running STOP_GRACE s later is interrupted, and killed KILL_GRACE s after that.
STOP_GRACE, KILL_GRACE = 15.0, 10.0
RESERVE = STOP_GRACE + KILL_GRACE + 5.0

# What travels with the kit's tree to the device machine, beside the chunk of vLLM the last call carries.
DEPS = "build/gpu-run/deps"
VLLM_CHUNKS = ".gpu-carry"  # written by tools/vllm_carry.py prepare; each chunk runs tools/vllm_carry_install.sh
CALL_LIMIT = 64 << 20  # bytes a device call carries: the tree, shared/ and the carried paths
# tools/vllm_carry.py cuts vLLM at 40 MiB (vLLM 0.26.0 in three), leaving the last call room for the kit's tree, which
# carries the published matrix; a chunk adds its install.sh, a count and a checksum.
CHUNK_LIMIT = (40 << 20) + (64 << 10)
COMMAND_LIMIT = 2000  # characters of one device command
# Pygments is most of what the kit's dependencies weigh (5 of 7.7 MiB), and pytest imports it only to colour the
# code in its reports; the run's go to a log file, so it stays behind and pytest prints plain text.
LEFT_BEHIND = ("pygments", "pygments-*.dist-info")

# The three device-tool calls, back to back (docs/device-run.md): the first two carry a chunk of
# vLLM each; the third carries the last one and the kit's dependencies, and runs the whole thing.
DEVICE_CALLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (f"bash {VLLM_CHUNKS}/chunk-1/install.sh {VLLM_CHUNKS}/chunk-1", (f"{VLLM_CHUNKS}/chunk-1",)),
    (f"bash {VLLM_CHUNKS}/chunk-2/install.sh {VLLM_CHUNKS}/chunk-2", (f"{VLLM_CHUNKS}/chunk-2",)),
    (
        # $SECONDS is read when gpu_run.sh starts: the install's time comes off the budget.
        f"bash {VLLM_CHUNKS}/chunk-3/install.sh {VLLM_CHUNKS}/chunk-3 && "
        "export PYTHONPATH=${TMPDIR:-/tmp}/vllm-gpu/site && bash tools/gpu_run.sh --budget $((570 - SECONDS))",
        (f"{VLLM_CHUNKS}/chunk-3", DEPS),
    ),
)


def _unplaced(text: str, places: Mapping[str, Path]) -> str:
    """``text`` naming each of the run's folders by its name in ``places`` (``$OUT``) and the kit's files relative
    to the kit: where this machine keeps them is no part of the run, and the folder comes back to be shared and
    published."""
    for name, place in places.items():
        text = text.replace(str(place.resolve()), name)
    return kit_relative(text)


class Log:
    """Lines to the run's log file and to stdout (the device returns the tail of stdout), named by ``_unplaced``."""

    def __init__(self, path: Path, places: Mapping[str, Path]) -> None:
        self._file: TextIO = path.open("w", buffering=1)
        self._places = places
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        text = _unplaced(text, self._places)
        with self._lock:
            self._file.write(text)
            sys.stdout.write(text)
            sys.stdout.flush()

    def say(self, line: str) -> None:
        self.write(f"[gpu-run {dt.datetime.now(dt.UTC):%H:%M:%S}] {line}\n")

    def close(self) -> None:
        self._file.close()


def _copy_lines(source: TextIO | None, log: Log) -> None:
    for line in source or ():
        log.write(line)


def _stream(argv: list[str], env: dict[str, str], log: Log, stop_at: float) -> tuple[int | None, bool]:
    """Run ``argv`` with its output into the log; interrupt it at ``stop_at`` (Unix time), kill it if it lingers.

    Returns its exit status (None: killed) and whether it was stopped.
    """
    proc = subprocess.Popen(
        argv, cwd=KIT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    reader = threading.Thread(target=_copy_lines, args=(proc.stdout, log), daemon=True)
    reader.start()
    stopped = False
    try:
        code: int | None = proc.wait(timeout=max(0.0, stop_at - time.time()))
    except subprocess.TimeoutExpired:
        stopped = True
        log.say(f"{argv[2]} still running at its deadline: interrupted (it writes what finished)")
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=KILL_GRACE)
        except subprocess.TimeoutExpired:
            log.say(f"{argv[2]} did not end {KILL_GRACE:g} s after the interrupt: killed")
            proc.kill()
            proc.wait()
            code = None
    reader.join(timeout=5)
    return code, stopped


def tally(junit: Path) -> str:
    """What a group's JUnit says of its cases, by outcome (``24 passed, 3 skipped``), or why it says nothing."""
    try:
        counts = Counter(outcome_word(case) for case in parse(junit).iter("testcase"))
    except UnreadableError as exc:
        return f"no JUnit to read ({exc})"
    return ", ".join(f"{counts[word]} {word}" for word in (PASSED, FAILED, ERROR, SKIPPED, XFAIL) if counts[word]) or (
        "no case ran"
    )


def bench_command(python: str, plan: str, env: str, out: str, jobs: int) -> list[str]:
    """The bench group's one process (repro/engine_bench.py)."""
    return [python, "-m", "repro.engine_bench", "--plan", plan, "--env", env, "--out", out, "--jobs", str(jobs)]


def _bench(
    python: str, out: Path, env_record: str, plan_record: str, env: dict[str, str], log: Log, deadline: float, jobs: int
) -> GroupRun:
    """The engine bench until the run's deadline: skipped where none of its cells has a GPU here."""
    reason = nothing_to_bench(load_plan(Path(plan_record)))
    if reason:
        log.say(f"{BENCH_GROUP}: skipped: {reason}")
        return GroupRun(BENCH_GROUP, GroupStatus.SKIPPED, None, 0.0, reason)
    if time.time() >= deadline:
        log.say(f"{BENCH_GROUP}: not started, the deadline has passed")
        return GroupRun(BENCH_GROUP, GroupStatus.NOT_STARTED, None, 0.0, "the run's deadline had passed")
    argv = bench_command(python, plan_record, env_record, str(out / BENCH_RECORD), jobs)
    left = f"{deadline - time.time():.0f} s to the deadline"
    log.say(f"{BENCH_GROUP}, {STEPS} of {STEPS}: started, {left}: {' '.join(argv[1:])}")
    began = time.time()
    code, stopped = _stream(argv, env, log, deadline + STOP_GRACE)
    status = GroupStatus.STOPPED if stopped else GroupStatus.FINISHED
    log.say(f"{BENCH_GROUP}: {status} after {time.time() - began:.0f} s, exit {code}")
    return GroupRun(BENCH_GROUP, status, code, round(time.time() - began, 1))


def run(out: Path, budget: float, jobs: int, cells: str = CELLS, bench_seconds: float = DEFAULT_BENCH_SECONDS) -> int:
    """The whole offline run into ``out``; 0 when every group ran to its end (failed tests are results)."""
    started, started_at = time.time(), dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    deadline = started + budget - RESERVE
    # The groups before the bench end by ``cut``; their children STOP_GRACE earlier, for pytest to judge them.
    cut = deadline - bench_seconds
    groups_deadline = cut - STOP_GRACE
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    # The plan stays here: the folder that comes back has room for 8 files, and the import makes it again.
    scratch = Path(tempfile.mkdtemp(prefix="wslpin-gpu-run-"))
    places = {"$OUT": out, "$RUN_TMP": scratch}
    log = Log(out / LOG, places)
    base = dict(os.environ) | {
        # The machine's own pytest plugins stay out of the run (the carried pytest is the kit's).
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env = base | {DEADLINE_VARIABLE: f"{groups_deadline:.3f}"}
    python = sys.executable
    ends = f"+{deadline - started:.0f} s, the other groups' by +{groups_deadline - started:.0f} s"
    log.say(f"budget {budget:g} s, the bench's children end by {ends}, {jobs} engines at a time; {python}")
    groups: list[GroupRun] = []
    try:
        env_record, plan_record = str(out / ENV_RECORD), str(scratch / PLAN_RECORD)
        for what, argv in (
            ("environment record", [python, "-m", "matrix", "env", "--out", env_record]),
            ("plan", [python, "-m", "matrix", "plan", "--cells", cells, "--env", env_record, "--out", plan_record]),
        ):
            # Without these two nothing can be judged: they may run into the grace the groups have.
            code, _ = _stream(argv, env, log, deadline + STOP_GRACE)
            if code != 0:
                log.say(f"no {what} (exit {code}): nothing can be planned, so no group runs")
                return 1
        for number, group in enumerate(GROUPS, 1):
            if time.time() >= groups_deadline:
                log.say(f"{group}: not started, the deadline has passed")
                groups.append(GroupRun(group, GroupStatus.NOT_STARTED, None, 0.0, "the deadline had passed"))
                continue
            junit, probe = str(out / f"{group}.xml"), str(out / PROBE_RECORD)
            argv = [python, "-m", "pytest", *GROUP_TESTS[group], *cell_pytest_args(cells, junit, probe, plan_record)]
            argv.append(f"--repro-jobs={jobs}")
            left = f"{cut - time.time():.0f} s left for the groups"
            log.say(f"{group}, {number} of {STEPS}: started, {left}: {' '.join(argv[1:])}")
            began = time.time()
            code, stopped = _stream(argv, env, log, cut)
            if os.path.isfile(junit):
                # pytest names a skip by the test file's absolute path: the checkout of this machine.
                Path(junit).write_text(_unplaced(Path(junit).read_text(errors="replace"), places))
            status = GroupStatus.STOPPED if stopped else GroupStatus.FINISHED
            groups.append(GroupRun(group, status, code, round(time.time() - began, 1)))
            log.say(f"{group}: {status} after {time.time() - began:.0f} s, exit {code}: {tally(Path(junit))}")
        groups.append(
            _bench(
                python, out, env_record, plan_record, base | {DEADLINE_VARIABLE: f"{deadline:.3f}"}, log, deadline, jobs
            )
        )
        ended = [
            g.status is GroupStatus.SKIPPED or (g.status is GroupStatus.FINISHED and g.exit_code in (0, 1))
            for g in groups
        ]
        return 0 if all(ended) else 1
    finally:
        record = OfflineRun(
            cells,
            started_at,
            budget,
            round(deadline - started, 1),
            jobs,
            tuple(groups),
            round(groups_deadline - started, 1),
        )
        record.write(out / RUN_RECORD)
        log.say(f"done in {time.time() - started:.0f} s: {', '.join(sorted(p.name for p in out.iterdir()))}")
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


def tree_files(root: Path = KIT_ROOT) -> list[Path]:
    """The kit's files as a device call sends them: tracked, and untracked but not ignored."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise MatrixError(f"cannot list the kit's files with git ({exc}): run this in a clone of the kit") from None
    return [root / name for name in done.stdout.decode().split("\0") if name and (root / name).is_file()]


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def carried_bytes(root: Path = KIT_ROOT) -> dict[str, int]:
    """What the run's device call carries, by part; the vLLM chunk at its bound where it is not prepared here."""
    chunk = root / VLLM_CHUNKS / "chunk-3"
    return {
        "kit tree": sum(p.stat().st_size for p in tree_files(root)),
        DEPS: size_of(root / DEPS) if (root / DEPS).exists() else 0,
        f"{VLLM_CHUNKS}/chunk-3": size_of(chunk) if chunk.exists() else CHUNK_LIMIT,
    }


def prepare(root: Path = KIT_ROOT) -> Path:
    """Stage the kit's pure-Python dependencies at ``DEPS`` (from this environment) and check what travels."""
    from repro.container.vendor import stage_dependencies

    staged = stage_dependencies(root / "build")
    target = root / DEPS
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(staged, target, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    parts = carried_bytes(root)
    total = sum(parts.values())
    for name, size in parts.items():
        print(f"{name:<24} {size / 2**20:6.1f} MiB")
    print(f"{'total':<24} {total / 2**20:6.1f} MiB of {CALL_LIMIT / 2**20:g}")
    if total > CALL_LIMIT:
        over = f"{total / 2**20:.1f} MiB, over {CALL_LIMIT >> 20} MiB"
        raise MatrixError(f"the run's device call would carry {over}: carry less")
    return target


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m repro.gpu_run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT"), help="the folder that comes back (default: $OUT)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="seconds until everything is written")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="engines at a time on the one GPU")
    parser.add_argument("--cells", default=CELLS, help="cell ids or globs (default: every cuda-* cell)")
    parser.add_argument(
        "--bench-seconds",
        type=float,
        default=DEFAULT_BENCH_SECONDS,
        help="seconds of the budget kept for the engine bench: the groups before it end that long before the deadline",
    )
    parser.set_defaults(func=_cmd_run)
    sub = parser.add_subparsers(dest="command")
    prep = sub.add_parser("prepare", help="stage what the run carries (here, before the device calls) and size it")
    prep.set_defaults(func=_cmd_prepare)
    return parser


def _cmd_prepare(args: argparse.Namespace) -> int:
    print(f"staged {prepare()}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    select(args.cells)  # a bad pattern is one line now, not a failed plan later
    if not args.out:
        raise MatrixError("no folder for the results: give --out DIR or set OUT")
    if args.budget <= RESERVE:
        raise MatrixError(f"--budget {args.budget:g} leaves nothing to run: give more than {RESERVE:g} s")
    if args.jobs < 1:
        raise MatrixError(f"--jobs {args.jobs} runs no engine: give 1 or more")
    if args.bench_seconds < 0:
        raise MatrixError(f"--bench-seconds {args.bench_seconds:g} keeps the bench less than nothing: give 0 or more")
    if args.bench_seconds >= args.budget - RESERVE - STOP_GRACE:
        raise MatrixError(
            f"--bench-seconds {args.bench_seconds:g} leaves the groups before the bench nothing of --budget "
            f"{args.budget:g}: give less, or more budget than {args.bench_seconds + RESERVE + STOP_GRACE:g} s"
        )
    # A launcher that starts the run in the background (a non-interactive shell's `&`, nohup) leaves SIGINT
    # ignored, and an ignored signal stays ignored in every child: pytest would not stop at the deadline and
    # write what finished, and would be killed with nothing written. A handled signal is reset in each child.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return run(Path(args.out), args.budget, args.jobs, args.cells, args.bench_seconds)


if __name__ == "__main__":
    sys.exit(run_command_line(build_parser, sys.argv[1:]))
