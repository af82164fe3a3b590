"""Time `python -m matrix report` against `junitparser merge` on the same synthetic results.

    python benchmarks/bench_report.py [--work DIR]

24 cells x 8 vLLM releases x 200 cases, then the same x10 (2,000 cases per
file). Each command runs in a fresh process; peak memory is that process's
maximum resident set. Prints the figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from matrix.cells import CELLS

VERSIONS = ["0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.30.0", "0.33.0"]
KEYS = ["pin", "uva", "warning", "v2_buffer", "offload_path", "platform_pin"]
_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter(); code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)\n"
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
    done = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True)
    seconds, kib, code = done.stdout.split()
    if code not in ("0", "1"):  # the report exits 1 for regressions: synthetic failures are some
        raise SystemExit(f"{argv[:3]} exited {code}")
    return float(seconds), int(kib) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", help="keep the synthetic files here (default: a temporary directory)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-report-"))
    junitparser = shutil.which("junitparser") or str(Path(sys.executable).with_name("junitparser"))
    figures = {}
    for label, per_file in (("1x", 200), ("10x", 2000)):
        inputs = work / label
        total = synthesize(inputs, per_file)
        files = sorted(str(p) for p in inputs.glob("*.xml"))
        merge_s, merge_mb = measure([junitparser, "merge", *files, str(work / f"merged-{label}.xml")])
        report_s, report_mb = measure(
            [sys.executable, "-m", "matrix", "report", str(inputs), "--out", str(work / f"report-{label}")]
        )
        figures[label] = (report_s, merge_s)
        print(
            f"{label:>3}: {len(files)} files, {total:,} cases | report {report_s:6.2f} s, peak {report_mb:5.0f} MB "
            f"| junitparser merge {merge_s:6.2f} s, peak {merge_mb:5.0f} MB | report/merge {report_s / merge_s:.2f}"
        )
    scaling = figures["10x"][0] / figures["1x"][0]
    print(f"10x the input costs the report {scaling:.1f}x the time (limit 12x)")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
