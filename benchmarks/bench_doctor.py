"""Time the doctor against `python -c pass` on the same interpreter: CPU time and peak memory, with ratios.

    python benchmarks/bench_doctor.py [--python PYTHON] [--pairs N] [--no-wheel] [-- DOCTOR ARGUMENTS]

PYTHON defaults to the first python3 on PATH outside the venv running this script: the one a person runs the
doctor with. `nox -s bench_doctor` runs it with hatchling installed, which builds the wheel.
Two forms: the checkout's `PYTHON -m matrix doctor` (run from the kit's root), and the wheel's `wslpin-doctor`
(the kit's wheel built here, installed alone in a fresh venv of PYTHON, run from an empty directory) against that
venv's `python -c pass`. Each pair runs the two commands one after the other, which goes first alternating, so
that a machine busy with other work weighs on both alike; the ratio is the median of the pairs' ratios. CPU time
is the child's own, user and system, as wait4 reports it (other processes' turns on a shared machine are not in
it), and peak memory its maximum resident set. The doctor's arguments default to `--stack cuda`, which answers
on any machine (without a GPU, this machine's own question is refused before the matrix is read).

Bytecode as a user has it: the children write theirs to a temporary PYTHONPYCACHEPREFIX (a checkout's first run
writes its __pycache__, and pip compiles a wheel's on install), and one untimed run of each command comes first.
Prints the figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def system_python() -> str:
    """The first python3 on PATH, this venv's own left out."""
    here = Path(sys.prefix) / "bin"
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != here)
    return shutil.which("python3", path=path) or sys.executable


@dataclass(frozen=True)
class Run:
    cpu: float  # seconds, user + system
    rss: float  # peak resident set, MiB


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """One child's CPU time and peak memory; its output is discarded, its exit status may be anything (a refusal
    is an answer too)."""
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(child.pid, 0)
    return Run(usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024 / MIB)  # Linux: KiB


def compare(label: str, bare: list[str], doctor: list[str], cwd: Path, env: dict[str, str], pairs: int) -> None:
    run(bare, cwd, env), run(doctor, cwd, env)  # bytecode written, caches warm
    measured: list[tuple[Run, Run]] = []
    for index in range(pairs):
        if index % 2:
            second = run(doctor, cwd, env)
            measured.append((run(bare, cwd, env), second))
        else:
            first = run(bare, cwd, env)
            measured.append((first, run(doctor, cwd, env)))
    ratios = sorted(d.cpu / b.cpu for b, d in measured)
    quartiles = statistics.quantiles(ratios, n=4)
    bare_cpu = statistics.median(b.cpu for b, _ in measured)
    doctor_cpu = statistics.median(d.cpu for _, d in measured)
    bare_rss, doctor_rss = max(b.rss for b, _ in measured), max(d.rss for _, d in measured)
    print(
        f"{label}: CPU {doctor_cpu * 1e3:.1f} ms against {bare_cpu * 1e3:.1f} ms: {statistics.median(ratios):.2f}x "
        f"(middle half of the pairs {quartiles[0]:.2f}x to {quartiles[2]:.2f}x); peak memory {doctor_rss:.1f} MiB "
        f"against {bare_rss:.1f} MiB"
    )


def installed_doctor(python: str, work: Path) -> Path:
    """``wslpin-doctor`` of the kit's wheel, built by this Python's hatchling and installed alone in a venv of
    ``python``, as a person installs it (pip compiles its bytecode)."""
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(work / "dist")],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = (work / "dist").glob("vllm_wslpin_kit-*.whl")
    subprocess.run([python, "-m", "venv", str(work / "venv")], check=True)
    pip = [str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    subprocess.run([*pip, str(wheel)], check=True)
    return work / "venv" / "bin" / "wslpin-doctor"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=system_python(), help="the interpreter measured (default: python3)")
    parser.add_argument("--pairs", type=int, default=30, help="pairs of runs per form (default: 30)")
    parser.add_argument("--no-wheel", action="store_true", help="the checkout's form alone (no wheel built)")
    parser.add_argument("doctor", nargs="*", default=["--stack", "cuda"], help="the doctor's arguments, after --")
    args = parser.parse_args()
    # The interpreter itself, not a launcher that starts it (pyenv's shims are shell scripts: their time would count).
    said = [args.python, "-c", "import sys; print(sys.executable); print(sys.version.split()[0])"]
    python, version = subprocess.run(said, capture_output=True, text=True, check=True).stdout.split()
    print(f"Python {version} ({python}), {args.pairs} pairs, the doctor's arguments: {' '.join(args.doctor)}")
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as scratch:
        work = Path(scratch)
        # The environment a person's shell gives: no venv of the caller's, bytecode kept (in the scratch directory).
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "VIRTUAL_ENV")}
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        compare(
            "checkout  python -m matrix doctor",
            [python, "-c", "pass"],
            [python, "-m", "matrix", "doctor", *args.doctor],
            ROOT,
            env,
            args.pairs,
        )
        if not args.no_wheel:
            doctor = installed_doctor(python, work)
            (work / "elsewhere").mkdir()
            compare(
                "wheel     wslpin-doctor          ",
                [str(doctor.with_name("python")), "-c", "pass"],
                [str(doctor), *args.doctor],
                work / "elsewhere",
                env,
                args.pairs,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
