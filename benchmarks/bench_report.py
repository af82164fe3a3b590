"""Time `python -m matrix report` against `junitparser merge` on the same synthetic results.

    python benchmarks/bench_report.py [--work DIR]
    python benchmarks/bench_report.py --scaling

24 cells x 8 vLLM releases x 200 cases, then the same x10 (2,000 cases per
file). Each command runs in a fresh process; peak memory is that process's
maximum resident set. ``--scaling`` instead times the report (read, judge, the
four outputs) on the two shapes that once grew faster than their size: one
file naming 100/200/400 vLLM releases, and one test rerun 20k-200k times.
Prints the figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This checkout's kit, wherever the script is run from and whatever the interpreter has installed.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matrix.cells import CELLS  # noqa: E402

VERSIONS = ["0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.30.0", "0.33.0"]
KEYS = ["pin", "uva", "warning", "v2_buffer", "offload_path", "platform_pin"]
_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter(); code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "use = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(time.perf_counter() - t, use.ru_utime + use.ru_stime, use.ru_maxrss, code)\n"
)


def synthesize(directory: Path, cases_per_file: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for version in VERSIONS:
        for cell in CELLS:
            rows = []
            for i in range(cases_per_file):
                key, pin = KEYS[i % len(KEYS)], ("unset", "1")[i % 2]
                roll = rng.random()
                result = "" if roll < 0.9 else "<skipped/>" if roll < 0.95 else '<failure message="assert False"/>'
                name = f"test_gate_value[{cell.id}-pin_env={pin}-{key}-{i}]"
                rows.append(
                    f'<testcase classname="tests.cell.test_gate" name="{name}" time="0.001">'
                    f'<properties><property name="cell" value="{cell.id}"/>'
                    f'<property name="gate_key" value="{key}"/><property name="pin_env" value="{pin}"/>'
                    f'<property name="observed" value="{rng.choice(["True", "False"])}"/></properties>'
                    f"{result}</testcase>"
                )
            envelope = "".join(
                f'<property name="{k}" value="{v}"/>'
                for k, v in {
                    "cell_id": cell.id,
                    "vllm_version": version,
                    "execution": "gate-only",
                    "started_at": "2026-11-29T12:00:00+00:00",
                    "runner_name": "bench",
                }.items()
            )
            (directory / f"{version}-{cell.id}.xml").write_text(
                f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="{cell.id}">'
                f"<properties>{envelope}</properties>{''.join(rows)}</testsuite></testsuites>"
            )
    return len(VERSIONS) * len(CELLS) * cases_per_file


def measure(argv: list[str]) -> tuple[float, float]:
    done = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True, cwd=ROOT)
    seconds, cpu, kib, code = done.stdout.split()
    if code not in ("0", "1"):  # the report exits 1 for regressions: synthetic failures are some
        raise SystemExit(f"{argv[:3]} exited {code}")
    return float(seconds), float(cpu), int(kib) / 1024


def many_releases(path: Path, releases: int) -> Path:
    """One file, one suite per release (cells in turn), each release a distinct vllm_version."""
    suites = []
    for index in range(releases):
        cell = CELLS[index % len(CELLS)]
        props = {
            "cell_id": cell.id,
            "vllm_version": f"0.{index}.0",
            "execution": "gate-only",
            "started_at": "2026-11-29",
        }
        envelope = "".join(f'<property name="{k}" value="{v}"/>' for k, v in props.items())
        suites.append(
            f'<testsuite name="{cell.id}"><properties>{envelope}</properties>'
            f'<testcase classname="t" name="a"/><testcase classname="t" name="b"><failure message="no"/></testcase>'
            "</testsuite>"
        )
    path.write_text(f"<testsuites>{''.join(suites)}</testsuites>")
    return path


def many_reruns(path: Path, reruns: int) -> Path:
    """One suite in which the same test ran ``reruns`` times, failing now and then."""
    cell = CELLS[0].id
    props = {"cell_id": cell, "vllm_version": "0.33.0", "execution": "gate-only", "started_at": "2026-11-29"}
    envelope = "".join(f'<property name="{k}" value="{v}"/>' for k, v in props.items())
    case = '<testcase classname="t" name="rerun"/>'
    failing = '<testcase classname="t" name="rerun"><failure message="flaked"/></testcase>'
    runs = "".join(failing if i % 10 == 0 else case for i in range(reruns))
    path.write_text(
        f'<testsuites><testsuite name="{cell}"><properties>{envelope}</properties>{runs}</testsuite></testsuites>'
    )
    return path


def time_report(path: Path, out: Path) -> float:
    """Seconds to read and judge ``path`` and write all four outputs as the report command does, in this process."""
    from matrix.report.model import build_report
    from matrix.report.outputs import report_outputs, write_outputs

    start = time.perf_counter()
    report = build_report([str(path)], kit_commit="bench")
    write_outputs(out, report_outputs(report))
    return time.perf_counter() - start


def time_per_unit(work: Path) -> None:
    for label, unit, build, sizes in (
        ("distinct vLLM releases in one file", "release", many_releases, (100, 200, 400)),
        ("reruns of one test", "rerun", many_reruns, (20_000, 40_000, 100_000, 200_000)),
    ):
        print(label)
        for size in sizes:
            seconds = time_report(build(work / f"{unit}-{size}.xml", size), work / f"{unit}-{size}")
            print(f"  {size:>7,} {unit}s: {seconds:7.2f} s, {seconds / size * 1e3:7.3f} ms per {unit}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", help="keep the synthetic files here (default: a temporary directory)")
    parser.add_argument("--scaling", action="store_true", help="time per release and per rerun at growing sizes")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.scaling:
        time_per_unit(work)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    junitparser = shutil.which("junitparser") or str(Path(sys.executable).with_name("junitparser"))
    figures = {}
    for label, per_file in (("1x", 200), ("10x", 2000)):
        inputs = work / label
        total = synthesize(inputs, per_file)
        files = sorted(str(p) for p in inputs.glob("*.xml"))
        merge_s, merge_cpu, merge_mb = measure([junitparser, "merge", *files, str(work / f"merged-{label}.xml")])
        report_s, report_cpu, report_mb = measure(
            [sys.executable, "-m", "matrix", "report", str(inputs), "--out", str(work / f"report-{label}")]
        )
        figures[label] = (report_s, report_cpu)
        print(
            f"{label:>3}: {len(files)} files, {total:,} cases | report {report_s:6.2f} s ({report_cpu:6.2f} s CPU), "
            f"peak {report_mb:5.0f} MB | junitparser merge {merge_s:6.2f} s ({merge_cpu:6.2f} s CPU), "
            f"peak {merge_mb:5.0f} MB "
            f"| report/merge {report_s / merge_s:.2f} ({report_cpu / merge_cpu:.2f} in CPU time)"
        )
    wall, cpu = (figures["10x"][i] / figures["1x"][i] for i in (0, 1))
    # CPU time as well: on a shared machine the wall clock also counts the other processes' turns.
    print(
        f"10x the input costs the report {wall:.1f}x the time, {cpu:.1f}x the CPU time (limit 11x); peak at most 200 MB"
    )
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
