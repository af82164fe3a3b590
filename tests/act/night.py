"""One night of .github/workflows/matrix.yml, run for real by nektos/act on this host, with no Docker and no GitHub.

Every job runs on this host (``-P <label>=-self-hosted``). What cannot exist here is stood in for, and only that:
GitHub's actions (checkout, Python, artifacts, Pages: tests/act/actions/, given to act by --local-repository), its
CLI's pull requests (tests/act/github-cli/gh, first on every job's PATH as on a hosted runner) and the GPU runner's
machine (WSL2 and a CUDA GPU as the kit presents them, and the cells' sessions: tests/act/gpu-runner/).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from matrix.cells import Host
from matrix.text.progress import clock
from matrix.variables import ANSWER_CACHE
from repro import emulation

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = Path(".github/workflows/matrix.yml")
ACTIONS = Path(__file__).resolve().parent / "actions"
GITHUB_CLI = Path(__file__).resolve().parent / "github-cli"
# The stand-in GPU runner's name, as GitHub's runner sets RUNNER_NAME for its jobs (act sets none).
GPU_RUNNER = "stand-in-wsl2new-h200"
# A night is a few minutes at most; a hung act must not hold CI for its 30 minutes.
NIGHT_TIMEOUT_S = 600


def _jobs() -> dict[str, dict]:
    return yaml.safe_load((ROOT / WORKFLOW).read_text())["jobs"]


def stand_ins() -> list[str]:
    """``--local-repository`` for every marketplace action the workflow uses, pinned as the workflow pins it."""
    uses = {s["uses"] for job in _jobs().values() for s in job.get("steps", []) if "uses" in s}
    missing = sorted(u for u in uses if not (ACTIONS / u.split("@")[0].split("/")[1]).is_dir())
    if missing:
        raise LookupError(f"no stand-in under {ACTIONS} for {', '.join(missing)}")
    return [f"--local-repository={u}={ACTIONS / u.split('@')[0].split('/')[1]}" for u in sorted(uses)]


def platforms(runner_labels: list[list[str]]) -> list[str]:
    """``-P`` for every label a job runs on: the workflow's own and the GPU runners' (the plan's ``runs_on``)."""
    labels = {job["runs-on"] for job in _jobs().values() if "${{" not in job["runs-on"]}
    labels |= {label for labels_ in runner_labels for label in labels_}
    return [f"-P={label}=-self-hosted" for label in sorted(labels)]


def gpu_jobs() -> list[str]:
    """The jobs that run on a self-hosted GPU runner: those whose runner the plan names (``matrix.runs_on``)."""
    return [name for name, job in _jobs().items() if "${{" in job["runs-on"]]


def gpu_runner_shell(where: Path, bash: str) -> Path:
    """A ``bash`` first on act's PATH that gives the GPU runner's jobs that runner's machine, the others this one's.

    act runs every job on this one host and runs each ``run:`` script through the ``bash`` it finds on PATH, and
    only GITHUB_JOB tells the jobs apart. The GPU runner's machine is WSL2 with a CUDA GPU as the kit presents one
    (noxfile's ``_stand_in_env("wsl2new", True)``), whose nox stands in for the cells' sessions; the other jobs see
    this machine as it is (a WSL2 presentation would have the gate job install vLLM for the GPU).
    """
    gpu_runner = Path(__file__).resolve().parent / "gpu-runner"
    env = emulation.presenting(Host.WSL2NEW, {"PYTHONPATH": str(gpu_runner)})
    env |= {"WSL_DISTRO_NAME": "wslpin-emulated", "RUNNER_NAME": GPU_RUNNER}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    stand_in_gpu = shlex.quote(str(ROOT / "tests" / "stand-in-gpu"))
    jobs = "|".join(gpu_jobs())
    where.mkdir(parents=True, exist_ok=True)
    shell = where / "bash"
    shell.write_text(
        "#!/bin/sh\n"
        f'case "$GITHUB_JOB" in {jobs}) export {exports} PATH={stand_in_gpu}:"$PATH" ;; esac\n'
        f'exec {shlex.quote(bash)} "$@"\n'
    )
    shell.chmod(0o755)
    return where


@dataclass
class Nights:
    """The nights' origin (a bare repository holding the kit as it is in this working tree), their Pages site and
    the origin's pull requests (the GitHub CLI stand-in's JSON)."""

    act: str
    tmp: Path
    origin: Path
    pages: Path
    pulls: Path
    attestations: Path
    answers: Path  # vLLM's answers, kept across the nights (WSLPIN_ANSWER_CACHE)
    # Where a line goes as each night starts, as each of its jobs ends, and as it ends (the nights take minutes).
    say: Callable[[str], None] = print
    count: int = 0

    @classmethod
    def start(cls, act: str, tmp: Path, say: Callable[[str], None] = print) -> Nights:
        origin = tmp / "origin.git"
        git = ["git", f"--git-dir={origin}", f"--work-tree={ROOT}"]
        subprocess.run(["git", "clone", "--quiet", "--bare", str(ROOT), str(origin)], check=True)
        # The night runs what this working tree holds, committed on main in the origin as CI would run a push.
        subprocess.run([*git, "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
        subprocess.run([*git, "reset", "--quiet", _head()], check=True)
        subprocess.run([*git, "add", "--all"], check=True)
        identity = ["-c", "user.name=act nights", "-c", "user.email=act-nights@localhost"]
        subprocess.run(
            [*git[:1], *identity, *git[1:], "commit", "--quiet", "--allow-empty", "-m", "the working tree"], check=True
        )
        return cls(
            act=act,
            tmp=tmp,
            origin=origin,
            pages=tmp / "pages",
            pulls=tmp / "pulls.json",
            attestations=tmp / "attestations.txt",
            answers=tmp / "answers",
            say=say,
        )

    def run(self, event: str, runner_kinds: str, cells: str = "", attest: bool = False) -> Night:
        """One night: ``event`` with WSLPIN_RUNNER_KINDS=``runner_kinds`` (and ``cells`` for a dispatch), the
        cell jobs attesting their results where ``attest`` (WSLPIN_ATTEST)."""
        self.count += 1
        night = self.tmp / f"night-{self.count}"
        clone, artifacts = night / "clone", night / "artifacts"
        artifacts.mkdir(parents=True)
        subprocess.run(["git", "clone", "--quiet", str(self.origin), str(clone)], check=True)
        runs_on = [job["runs_on"] for job in _plan_jobs(clone)]
        bash = shutil.which("bash")
        assert bash is not None
        # One place for every night: the gate jobs' PATH names it, and vLLM's answers are kept by what that names.
        shell = gpu_runner_shell(self.tmp / "gpu-runner-shell", bash)
        argv = [
            self.act,
            event,
            "--json",
            f"--workflows={WORKFLOW}",
            "--no-skip-checkout",
            "--no-cache-server",
            f"--action-cache-path={night / 'act-cache'}",
            f"--var=WSLPIN_RUNNER_KINDS={runner_kinds}",
            f"--var=WSLPIN_ATTEST={str(attest).lower()}",
            f"--env=WSLPIN_ACT_ORIGIN={self.origin}",
            f"--env=WSLPIN_ACT_ARTIFACTS={artifacts}",
            f"--env=WSLPIN_ACT_PAGES={self.pages}",
            f"--env=WSLPIN_ACT_PULLS={self.pulls}",
            f"--env=WSLPIN_ACT_ATTESTATIONS={self.attestations}",
            # vLLM's answers, kept across the nights (repro/answers.py): the first night's gate job asks vLLM in
            # its children, and the others', the same installation asking the same questions, read its answers.
            f"--env={ANSWER_CACHE.name}={self.answers}",
            # What GitHub gives every run as github.token; the local origin and the CLI stand-in ask for no more.
            "--secret=GITHUB_TOKEN=the-nights-token",
            *([f"--input=cells={cells}"] if event == "workflow_dispatch" else []),
            *platforms(runs_on),
            *stand_ins(),
        ]
        path = os.pathsep.join([str(shell), str(GITHUB_CLI), _host_environment()["PATH"]])
        env = {**_host_environment(), "PATH": path}
        name = f"night {self.count}"
        self.say(f"{name}: {event}, runner kinds {runner_kinds}{f', cells {cells}' if cells else ''}: started")
        started = time.monotonic()
        returncode, log = _watch(argv, clone, env, night, lambda line: self.say(f"{name}: {line}"))
        done = Night(returncode, log, artifacts, self.pages)
        jobs = ", ".join(f"{job} {result}" for job, result in done.results().items())
        self.say(
            f"{name}: ended in {clock(time.monotonic() - started)}, act exit {returncode} ({jobs or 'no job ran'})"
        )
        return done


def _watch(argv: list[str], cwd: Path, env: dict[str, str], night: Path, say: Callable[[str], None]):
    """Run act, saying each job's result as act's JSON log ends that job; the log kept in ``night``.

    Returns act's exit status and its log; raises ``subprocess.TimeoutExpired`` past ``NIGHT_TIMEOUT_S``, as
    ``subprocess.run`` did.
    """
    started = time.monotonic()
    lines: list[str] = []
    with (night / "act.stderr").open("w") as stderr:
        act = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        timed_out = threading.Event()
        timer = threading.Timer(NIGHT_TIMEOUT_S, lambda: (timed_out.set(), act.kill()))
        timer.start()
        try:
            assert act.stdout is not None
            for line in act.stdout:
                lines.append(line)
                entry = _entry(line)
                if entry is not None and "jobResult" in entry:
                    say(f"job {_job(entry)}: {entry['jobResult']} at +{clock(time.monotonic() - started)}")
            returncode = act.wait()
        finally:
            timer.cancel()
    stdout = "".join(lines)
    (night / "act.jsonl").write_text(stdout)
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(argv, NIGHT_TIMEOUT_S, output=stdout)
    return returncode, _log(stdout)


def _host_environment() -> dict[str, str]:
    """This process's environment less the venv it runs in (a nox session's): the jobs get the machine's Python."""
    env = dict(os.environ)
    if sys.prefix != sys.base_prefix:
        env.pop("VIRTUAL_ENV", None)
        venv_bin = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    return env


def _head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def _plan_jobs(clone: Path) -> list[dict]:
    """Every runner kind's job, as the plan writes them: their ``runs_on`` are the labels act must map."""
    plan = [sys.executable, "-m", "matrix", "plan", "--cells", "all", "--online", "", "--format", "github"]
    done = subprocess.run(plan, cwd=clone, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["include"]


def _log(stdout: str) -> list[dict]:
    return [entry for line in stdout.splitlines() if (entry := _entry(line)) is not None]


def _entry(line: str) -> dict | None:
    """One line of act's ``--json`` log, or None for a line it printed otherwise."""
    return json.loads(line) if line.startswith("{") else None


def _job(entry: dict) -> str:
    """A job's name in act's log; a matrix job's with its runner kind (``cell cuda-wsl2new``)."""
    return " ".join(filter(None, [entry["jobID"], entry["matrix"].get("name")]))


@dataclass
class Night:
    """What one act run did: its exit status, its JSON log, and the directories its stand-ins wrote."""

    returncode: int
    log: list[dict]
    artifacts: Path
    pages: Path

    def results(self) -> dict[str, str]:
        """Each job's result as act logs it when the job ends; a matrix job's under ``<job> <runner kind>``.

        act keeps one result per job, which its matrix jobs share: once one runner kind's job fails, every kind's
        logs "failure" (``failed_steps`` tells them apart).
        """
        return {_job(line): line["jobResult"] for line in self.log if "jobResult" in line}

    def outputs(self, job: str) -> dict[str, str]:
        """The outputs a job's steps set, as act read them from GITHUB_OUTPUT."""
        return {
            line["name"]: line["arg"]
            for line in self.log
            if line.get("jobID") == job and line.get("command") == "set-output"
        }

    def failed_steps(self, job: str, kind: str) -> list[str]:
        """The steps that failed in one runner kind's job of a matrix job."""
        return [
            line["step"]
            for line in self.log
            if line.get("jobID") == job and line["matrix"].get("name") == kind and line.get("stepResult") == "failure"
        ]

    def printed(self, job: str) -> str:
        """What a job's steps printed."""
        return "\n".join(line["msg"] for line in self.log if line.get("jobID") == job and line.get("raw_output"))
