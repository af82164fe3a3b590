"""``python -m matrix``: the matrix's command line, a thin layer over the library."""

# `doctor`, `env` and `plan` (--misrouted-out included) are what a person or a self-hosted runner runs with the
# system Python, before any venv exists: Ubuntu 20.04's is 3.8, 22.04's 3.10. So every module they (and
# `pipeline`) import, this one included, uses the standard library only and nothing newer than Python 3.8 at run
# time (no enum.StrEnum, typing.Self, datetime.UTC, zip(strict=), dataclass slots): pyproject.toml has ruff
# check those modules as py38, and tests/kit/test_system_pythons.py runs the commands on those Pythons. The
# other commands import third-party packages lazily, and need the kit's Python (3.11+).
# ruff: noqa: E402 - the doctor is dispatched before the other commands' imports (below)

from __future__ import annotations

import sys


def cmd_doctor(argv: list[str]) -> int:
    # Here, not at the top: what the history's `env`, `plan` and `split` import is its cache key
    # (matrix/store/history_key.py walks only the commands a run uses), and the doctor changes no release's results.
    from matrix.doctor import cli

    return cli.main(argv, prog="python -m matrix doctor")


# The doctor costs little more than Python's own start (benchmarks/bench_doctor.py); the imports of the other
# commands below would cost it as much again, so `python -m matrix doctor` is answered before them.
if __name__ == "__main__" and sys.argv[1:2] == ["doctor"]:
    sys.exit(cmd_doctor(sys.argv[2:]))

import argparse
import datetime as dt
import glob
import json
import shutil
import tempfile
from pathlib import Path

from matrix import __version__
from matrix.cells import Cell, select
from matrix.commands.here import detected_plan
from matrix.errors import MatrixError
from matrix.host import facts
from matrix.host.record import EnvironmentRecord
from matrix.plan import Execution, Plan, load_plan
from matrix.releases import VLLM_VERSION
from matrix.store.layout import EVIDENCE_STORE
from matrix.text.cli import require_kit_python, run_command_line
from matrix.text.visible import visible
from matrix.variables import GATE_PIN_VALUES


def _cells_arg(args: argparse.Namespace) -> str | None:
    return args.cell or args.cells


def _add_cells(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cells", help="comma-separated ids or globs, e.g. 'cuda-wsl2*-*-graph' (default: all 24)")
    group.add_argument("--cell", help="one cell id, e.g. cuda-wsl2new-v2-graph")


def cmd_env(args: argparse.Namespace) -> int:
    record = facts.collect_environment()
    text = EnvironmentRecord(record).to_json()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        host = record["host"]
        print(
            f"wrote {args.out}: host {host['detected']}, GPU stack {host['stack'] or 'none'} "
            f"({host['stack_reason']}), env hash {record['env_hash']}",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return 0


# Commands whose module keeps a parser of its own (``build_parser(prog)``), imported only when the command runs:
# every argument, --help included, goes to it.
OWN_PARSERS = {
    "annotations": ("matrix.commands.annotations", "the report's cells to look at, as GitHub workflow commands"),
    "vllm-step": ("matrix.ci.vllm_step", "a step for vLLM's own Buildkite pipeline that runs the kit's gate"),
    "doctor-matrix": ("matrix.doctor.published", "write the doctor's part of a compat.json: the matrix it carries"),
    "clean-results": ("matrix.commands.cleanup", "remove the results of cells that crashed (nox -s clean)"),
    "vllm-layer": ("matrix.commands.vllm_source", "lay a vLLM source checkout over this Python's vLLM release"),
}


def cmd_own_parser(args: argparse.Namespace) -> int:
    import importlib

    module = importlib.import_module(OWN_PARSERS[args.command][0])
    return run_command_line(lambda: module.build_parser(f"python -m matrix {args.command}"), args.args)


def cmd_plan(args: argparse.Namespace) -> int:
    from matrix.ci import pipeline

    if args.format in ("github", "runners"):
        jobs = pipeline.github_matrix if args.format == "github" else pipeline.runner_claims
        print(jobs(select(_cells_arg(args)), args.online or ""))
        return 0
    if args.online is not None:
        raise MatrixError("--online plans runner jobs: give it with --format github or --format runners")
    if args.format == "sessions":
        print("\n".join(cell.session for cell in select(_cells_arg(args))))
        return 0
    cells, require_native = select(_cells_arg(args)), args.require == "native"
    if args.misrouted_out and not require_native:
        raise MatrixError("--misrouted-out writes the cells --require native refuses: give both")
    if args.env:
        plan = Plan.from_record(cells, _env_record(Path(args.env)), require_native)
    else:
        plan = detected_plan(cells, require_native)
    if args.out:
        plan.write(Path(args.out))
    if args.format == "json":
        print(json.dumps([p.as_dict() for p in plan.cells], indent=2))
    else:
        width = max(len(p.cell.id) for p in plan.cells)
        for p in plan.cells:
            # The reason can quote an --env record, anyone's file.
            print(f"{p.cell.id.ljust(width)}  {p.execution.value:<9}  {visible(p.reason)}")
    misrouted = [p for p in plan.cells if p.execution is Execution.MISROUTED]
    if misrouted and args.misrouted_out:
        from matrix.commands.misrouted import write_misrouted

        written = write_misrouted(misrouted, args.vllm, Path(args.misrouted_out))
        print(visible(f"wrote {len(written)} misrouted result(s) to {args.misrouted_out}/"), file=sys.stderr)
    if misrouted:
        print(
            f"error: {len(misrouted)} cell(s) misrouted: this runner is not the host its labels claim; "
            "fix the runner's labels or run the cell where it belongs",
            file=sys.stderr,
        )
        return 3
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    from matrix.ci import pipeline

    print(pipeline.buildkite_pipeline(select(_cells_arg(args)), args.vllm))
    return 0


def _env_record(path: Path) -> EnvironmentRecord:
    """The record ``python -m matrix env`` wrote, or one line saying how to write it."""
    return EnvironmentRecord.read(path, f"--env {path}", f"write it with `python -m matrix env --out {path}`")


def cmd_split(args: argparse.Namespace) -> int:
    # The safe XML parser that reads pytest's file is imported here, first, not at the top: `env` and `plan` must
    # work on a bare Python (a fresh runner, the workflow's plan job), and the split says what it lacks at once.
    import defusedxml.ElementTree  # noqa: F401

    from matrix.envelope import RunInfo
    from matrix.junit import write_cell_results

    record = _env_record(Path(args.env))
    plan = load_plan(Path(args.plan))
    raw = Path(args.raw)
    if not raw.exists() and not args.crashed_if_missing:
        raise MatrixError(
            f"{raw} does not exist: give the JUnit file pytest wrote (--junitxml), "
            "or add --crashed-if-missing to record the cells as crashed because pytest wrote none"
        )
    # The session's one plan, so that the suites say what the cases were run as.
    plans = plan.select(_cells_arg(args))
    run = RunInfo(
        env=record,
        kit_commit=facts.kit_commit(),
        runner_name=facts.runner_name(),
        started_at=args.started_at or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    )
    written = write_cell_results(plans, raw if raw.exists() else None, run, Path(args.out))
    print(f"wrote {len(written)} cell result(s) to {args.out}/", file=sys.stderr)
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    from matrix.commands.summary import render, summarize

    out = Path(args.results)
    paths = [out / f"{cell.id}.xml" for cell in select(_cells_arg(args))]
    absent = [p for p in paths if not p.exists()]
    if absent:
        raise MatrixError(f"no result for {', '.join(p.stem for p in absent)} in {out}/: run those cells first")
    summaries = [summarize(p) for p in paths]
    print(render(summaries))
    failed = sum(s.failed for s in summaries)
    if args.strict and failed:
        print(f"error: {failed} test(s) failed; the JUnit files in {out}/ say why", file=sys.stderr)
        return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from matrix.commands.report import write_report

    return write_report(
        args.inputs,
        Path(args.out),
        previous=args.previous,
        nox_reports=_nox_reports(args.nox_report or []),
        runners=args.runners,
        max_age_days=args.max_age_days,
        probes=args.probes,
        benches=args.bench,
        engine_benches=args.engine_bench,
        store=Path(args.evidence) if args.evidence else None,
        community=Path(args.community) if args.community else None,
    )


def _nox_reports(items: list[str]) -> list[str]:
    """The files ``--nox-report`` names. A glob may match nothing: a runner that died before nox wrote none."""
    found: list[str] = []
    for item in items:
        found += sorted(glob.glob(item)) if any(ch in item for ch in "*?[") else [item]
    return found


def cmd_page(args: argparse.Namespace) -> int:
    from matrix.ci import browser

    page = Path(args.report) / "index.html"
    if not page.exists():
        raise MatrixError(
            f"{page} does not exist: write it first with `python -m matrix report ... --out {args.report}`"
        )
    try:
        loaded = browser.load(page.resolve().as_uri())
        shot = browser.screenshot(page.resolve().as_uri(), Path(args.screenshot))
    except browser.BrowserMissingError as exc:
        raise MatrixError(str(exc)) from None
    cells = loaded.dom.count('<td class="cell')
    grids = loaded.dom.count('<table class="grid"')
    print(f"{page}: {grids} grid(s), {cells} cell(s), {len(loaded.console)} console message(s); screenshot {shot}")
    for message in loaded.console:
        print(f"console: {message}")
    if loaded.console or grids == 0 or cells != 24 * grids:
        print("error: the page logged to the console or its grid is not 24 cells per vLLM release", file=sys.stderr)
        return 1
    return 0


def cmd_import_run(args: argparse.Namespace) -> int:
    from matrix.commands.offline import import_run
    from matrix.commands.report import write_report
    from matrix.commands.summary import render, summarize

    imported = import_run(Path(args.folder), Path(args.results), args.name)
    for group, out in imported.directories.items():
        cells = select(imported.run.cells)
        print(f"{visible(group)}: {visible(out)}/")
        print(render([summarize(out / f"{cell.id}.xml") for cell in cells]))
    if imported.bench is not None:
        from matrix.store.engine_bench import read_engine_bench, summary

        print("\n".join(visible(line) for line in summary(read_engine_bench(imported.bench))))
    with tempfile.TemporaryDirectory(prefix="wslpin-probes-") as probes:
        # The report reads every *.json of its probe directory as a probe record: give it only this one.
        if imported.probe is not None:
            shutil.copy(imported.probe, probes)
        inputs = [str(out) for out in imported.directories.values()]
        benches = str(imported.bench.parent) if imported.bench is not None else None
        return write_report(inputs, Path(args.report), probes=probes, engine_benches=benches)


def cmd_bundle(args: argparse.Namespace) -> int:
    from matrix.io.files import write_file
    from matrix.store.bundle import issue_form_url, make, predicted_cells

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise MatrixError(f"--out {out} is a file: give the directory the bundle is written into")
    bundle = make(Path(args.results), args.vllm)
    stamp = bundle.created_at[:19].replace(":", "").replace("-", "")
    # Whole or not at all: a full disk or a read-only folder is one line, and leaves no part of a bundle.
    written = write_file(out, f"wslpin-bundle-{bundle.vllm}-{stamp}.json", bundle.to_json().encode())
    cells = ", ".join(c.cell for c in bundle.cells)
    print(f"wrote {written}: vLLM {bundle.vllm}, kit {bundle.kit_commit}, {len(bundle.cells)} cell(s): {cells}")
    print(
        "every text in it was scrubbed of credentials, addresses, home directories and this machine's and your names;"
        " read it before you send it"
    )
    if predicted := predicted_cells(bundle):
        print(
            f"warning: {', '.join(predicted)} ran gate-only (vLLM's decisions, no GPU): the kit keeps a bundle only "
            "where a GPU ran the reproduction; run the cell where vLLM's GPU build and the GPU are, then bundle again"
        )
    print(
        f"send it: open {issue_form_url()} and attach the file (it is shown as your own run, not verified by the kit)"
    )
    return 0


def cmd_evidence_add(args: argparse.Namespace) -> int:
    from matrix.store.claims import load_claims
    from matrix.store.evidence import WORKFLOW_RUN, Source, add, add_bundles, add_probes, render

    if args.source == "runner" and not args.runners:
        raise MatrixError(
            "--source runner needs --runners FILE, the night's plan: without it any artifact speaks for any cell"
        )
    if args.source == "runner" and not WORKFLOW_RUN.fullmatch(args.workflow_run or ""):
        raise MatrixError(
            "--source runner needs --workflow-run URL, the night's run (…/actions/runs/<id>): without it an "
            "artifact left from another run is taken for the night's"
        )
    store = Path(args.store)
    claims = load_claims(args.runners, args.inputs) if args.runners else None
    try:
        source = Source(args.source)
    except ValueError:
        raise MatrixError(f"--source {args.source!r}: one of {', '.join(Source)}") from None
    if source is Source.COMMUNITY:
        added = add_bundles([Path(item) for item in args.inputs], store)
    else:
        added = add(args.inputs, store, source, claims, workflow_run=args.workflow_run or "")
        probes = add_probes(args.inputs, store, source)
        added.new += probes.new
        added.already += probes.already
        added.not_kept += probes.not_kept
    print(render(added, store))
    if args.github_output:
        with open(args.github_output, "a", encoding="utf-8") as out:
            out.write(f"added={len(added.new)}\n")
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    from matrix.commands.bisect import Question, bisect, render
    from matrix.judge.expectations import GATE_KEYS

    if args.key is not None and args.key not in GATE_KEYS:
        raise MatrixError(f"--key {args.key!r} is not a gate key; one of {', '.join(GATE_KEYS)}")
    question = Question(
        Cell.parse(args.cell),
        keys=(args.key,) if args.key else tuple(GATE_KEYS),
        pin_envs=(args.pin_env,) if args.pin_env else GATE_PIN_VALUES,
    )
    result = bisect(Path(args.checkout), args.good, args.bad, question, say=lambda line: print(line, file=sys.stderr))
    print(render(result))
    return 0


def cmd_branch(args: argparse.Namespace) -> int:
    from matrix.report.branch import against_release
    from matrix.report.render_branch import render
    from matrix.text.visible import visible

    release_results = Path(args.release_results) if args.release_results else None
    diff, source = against_release(Path(args.branch_results), release_results, select(args.cells))
    print(render(diff, source))
    if diff.regressed:
        print(
            f"error: vLLM {visible(diff.branch)} regressed against {diff.release} (rows marked so above)",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_releases(args: argparse.Namespace) -> int:
    from matrix.store.history_archive import COMMITTED_HISTORY
    from matrix.store.release_index import releases, render, to_json
    from matrix.text.cli import KIT_ROOT

    found = releases(KIT_ROOT / COMMITTED_HISTORY)
    print(to_json(found) if args.json else "\n".join(render(found)))
    return 1 if found.new else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m matrix", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser(
        "doctor",
        help="the published answer for this machine (or the set-up the flags describe): what to set or do",
        # Every argument, --help included, goes to the doctor's own parser (matrix.doctor.cli, which
        # wslpin-doctor runs too): no character starts an option of this one.
        add_help=False,
        prefix_chars="\0",
    )
    doctor.add_argument("args", nargs=argparse.REMAINDER)
    doctor.set_defaults(func=lambda args: cmd_doctor(args.args))

    env = sub.add_parser("env", help="collect this machine's environment as schema-versioned JSON")
    env.add_argument("--out", help="write here instead of stdout")
    env.set_defaults(func=cmd_env)

    plan = sub.add_parser("plan", help="how this machine runs each cell: native, emulated, gate-only, misrouted")
    _add_cells(plan)
    plan.add_argument("--require", choices=["native"], help="fail (exit 3) for any cell this host is not")
    plan.add_argument(
        "--format",
        choices=["text", "json", "github", "runners", "sessions"],
        default="text",
        help="github: the job matrix (per runner kind) a workflow feeds to fromJson; runners: those jobs and the "
        "kinds not planned, for the report's --runners; sessions: each cell's nox session, one a line",
    )
    plan.add_argument(
        "--online",
        metavar="KINDS",
        help="with --format github|runners: plan only these runner kinds (e.g. cuda-linux,cuda-wsl2new; `none`; "
        "empty: all), the repository variable WSLPIN_RUNNER_KINDS",
    )
    plan.add_argument("--env", help="plan for the machine this record (`python -m matrix env`) describes")
    plan.add_argument("--out", help="also write the plan here (plan.json) for pytest, split and the container runner")
    plan.add_argument(
        "--misrouted-out",
        metavar="DIR",
        help="with --require native: write a misrouted result for each refused cell here, for the report",
    )
    plan.add_argument("--vllm", default=VLLM_VERSION, help="with --misrouted-out: the release the run was for")
    plan.set_defaults(func=cmd_plan)

    pipe = sub.add_parser("pipeline", help="the cells as a CI pipeline for another system")
    pipe.add_argument("--format", choices=["buildkite"], required=True)
    _add_cells(pipe)
    pipe.add_argument("--vllm", default=VLLM_VERSION, help="the vLLM release the steps install")
    pipe.set_defaults(func=cmd_pipeline)

    split = sub.add_parser("split", help="split a cell session's pytest JUnit into results/<cell>.xml with envelopes")
    split.add_argument("raw", help="the JUnit file pytest wrote (xunit1 family)")
    _add_cells(split)
    split.add_argument("--plan", required=True, help="the session's plan.json (`python -m matrix plan --out`)")
    split.add_argument("--env", required=True, help="the record written by `python -m matrix env`, kept beside results")
    split.add_argument("--out", default="results")
    split.add_argument("--started-at", help="ISO time the run started (default: now)")
    split.add_argument(
        "--crashed-if-missing",
        action="store_true",
        help="if RAW does not exist (pytest died before writing it), record every cell as crashed with that reason",
    )
    split.set_defaults(func=cmd_split)

    summary = sub.add_parser("summary", help="print the terminal table for cells' results")
    _add_cells(summary)
    summary.add_argument("--results", default="results")
    summary.add_argument("--strict", action="store_true", help="exit 1 if any test failed")
    summary.set_defaults(func=cmd_summary)

    report = sub.add_parser(
        "report", help="merge JUnit from any runners into COMPATIBILITY.md, index.html, strips.svg, compat.json"
    )
    report.add_argument("inputs", nargs="+", help="JUnit files, directories or globs")
    report.add_argument("--out", required=True, help="directory for the four outputs")
    report.add_argument("--previous", help="the last published compat.json, for the diff")
    report.add_argument(
        "--nox-report",
        nargs="+",
        action="extend",
        metavar="FILE",
        help="`nox --report` JSON files, or globs (one may match nothing): why cells without results crashed",
    )
    report.add_argument(
        "--runners",
        metavar="FILE",
        help="the plan job's matrix (`plan --format github`): inputs are directories of artifacts by name; "
        "each runner's artifact speaks only for its cells, and each of them needs its native result",
    )
    report.add_argument("--max-age-days", type=float, help="results older than this are stale")
    report.add_argument("--bench", help="a directory of benchmark records (`python -m repro bench`) to show")
    report.add_argument("--probes", help="a directory of probe records (`python -m repro probe --out`) to cite")
    report.add_argument(
        "--engine-bench",
        metavar="DIR",
        help="a directory of the offline GPU run's engine-level benchmark records (*.engine-bench.json) to show",
    )
    report.add_argument(
        "--evidence",
        metavar="STORE",
        help="also every record of this evidence store (docs/evidence/runs), each result saying where it came from",
    )
    report.add_argument(
        "--community",
        metavar="DIR",
        help="also the bundles in DIR (`python -m matrix bundle`), each checked, read as users' own results",
    )
    report.set_defaults(func=cmd_report)

    bundle = sub.add_parser(
        "bundle", help='your cell session\'s results as one file to send to the kit (after `nox -s "cell(...)"`)'
    )
    bundle.add_argument("--results", default="results", help="the results tree the session wrote (default: results)")
    bundle.add_argument("--vllm", default=VLLM_VERSION, help=f"the release the session ran (default: {VLLM_VERSION})")
    bundle.add_argument("--out", default=".", help="where to write the bundle (default: here)")
    bundle.set_defaults(func=cmd_bundle)

    evidence = sub.add_parser("evidence", help="the evidence store: the results GPUs gave, kept in the repository")
    evidence_sub = evidence.add_subparsers(dest="action", required=True)
    keep = evidence_sub.add_parser(
        "add", help="keep each native or emulated cell result of these JUnit files in the store, once"
    )
    keep.add_argument("inputs", nargs="+", help="JUnit files, directories or globs (a results tree, artifacts/)")
    keep.add_argument(
        "--source",
        required=True,
        help="runner: a night's artifacts (give --runners); maintainer: your own run (the offline GPU run's results); "
        "community: bundles users sent (`python -m matrix bundle`), each checked first",
    )
    keep.add_argument("--store", default=str(EVIDENCE_STORE), help=f"the store (default: {EVIDENCE_STORE})")
    keep.add_argument(
        "--runners",
        metavar="FILE",
        help="the night's plan (`plan --format runners`): a result counts only from the artifact of its cell's runner",
    )
    keep.add_argument(
        "--workflow-run",
        metavar="URL",
        help="the night's workflow run (…/actions/runs/<id>): a runner's result counts only where that run made it",
    )
    keep.add_argument("--github-output", metavar="FILE", help="append added=<new records> to this file (a step's)")
    keep.set_defaults(func=cmd_evidence_add)

    imp = sub.add_parser(
        "import-run", help="the folder an offline GPU run gave back ($OUT) into results/<vLLM>/<group>/, and its report"
    )
    imp.add_argument("folder", help="what `tools/gpu_run.sh` wrote: run.json, env.json, plan.json, <group>.xml...")
    imp.add_argument("--results", default="results", help="the results tree to write into")
    imp.add_argument("--report", default="build/report/gpu-run", help="directory for the report of this run")
    imp.add_argument(
        "--name",
        help="what the evidence calls the run, as its runner (default: the folder's name, e.g. h200-vllm-0.26.0-DATE)",
    )
    imp.set_defaults(func=cmd_import_run)

    branch = sub.add_parser(
        "branch",
        help="what a vLLM source tree's gate results change against its release's: each question and checked value "
        "fixed, regressed or unchanged; exit 1 where something regressed",
    )
    branch.add_argument("--branch-results", required=True, help="the tree's results/<version>/gate")
    branch.add_argument(
        "--release-results",
        help="the release's own gate results (results/<release>/gate); default: the kit's committed history",
    )
    branch.add_argument("--cells", help="comma-separated ids or globs (default: all 24)")
    branch.set_defaults(func=cmd_branch)

    bis = sub.add_parser(
        "bisect",
        help="the first commit of a vLLM checkout where a cell's gate answer changed (needs vLLM installed: "
        "each commit is laid over it)",
    )
    bis.add_argument("checkout", help="a vLLM git checkout, with its release tags")
    bis.add_argument("--good", required=True, help="a commit with the old answer (tag, branch or hash)")
    bis.add_argument("--bad", required=True, help="a later commit with the new answer")
    bis.add_argument("--cell", required=True, help="e.g. cuda-wsl2new-v1-graph")
    bis.add_argument("--key", help="compare only this gate key (e.g. pin); default: all of them")
    bis.add_argument("--pin-env", choices=GATE_PIN_VALUES, help="only this value of the opt-in (default: each)")
    bis.set_defaults(func=cmd_bisect)

    rel = sub.add_parser(
        "releases",
        help="vLLM's final releases on the package index (as pip reaches it) that the published matrix covers and "
        "misses; exit 1 when one newer than all it covers is missing, 2 when the index cannot be asked",
    )
    rel.add_argument("--json", action="store_true", help="the same as JSON (found, covered, missing, new)")
    rel.set_defaults(func=cmd_releases)

    page = sub.add_parser("page", help="open the report's index.html in headless Chromium: check it, screenshot it")
    page.add_argument("report", help="the directory `report` wrote")
    page.add_argument("--screenshot", required=True, help="PNG to write")
    page.set_defaults(func=cmd_page)

    for name, (_, said) in OWN_PARSERS.items():
        # As the doctor's: no character starts an option of this parser, so all of them reach the module's.
        own = sub.add_parser(name, help=said, add_help=False, prefix_chars="\0")
        own.add_argument("args", nargs=argparse.REMAINDER)
        own.set_defaults(func=cmd_own_parser)
    return parser


# The commands of a bare system Python, 3.8 and later (the top of this module); the others need the kit's (KIT_PYTHON).
ANY_PYTHON = frozenset({"doctor", "env", "plan", "pipeline"})


def _python_for(args: argparse.Namespace) -> None:
    if args.command not in ANY_PYTHON:
        require_kit_python(f"python -m matrix {args.command}")


def main(argv: list[str] | None = None) -> int:
    return run_command_line(build_parser, argv, _python_for)


if __name__ == "__main__":
    sys.exit(main())
