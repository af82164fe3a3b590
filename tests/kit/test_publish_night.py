"""tools/publish-night.sh, the matrix workflow's publish job, run for real against a bare repository as its origin.

The night's records land on the evidence branch, on top of the nights not yet merged, with one pull request into
main, which is never pushed; a push the origin refuses (the branch moved) makes the night again; a runner's file
without an attestation of this run is never read. GitHub's CLI is the act nights' stand-in
(tests/act/github-cli/gh): pull requests and attestations are GitHub's, which cannot exist here. tests/act runs
the same script inside the whole workflow.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import NIGHT, claims_file, night
from conftest import ROOT

from matrix.releases import VLLM_VERSION

GITHUB_CLI = ROOT / "tests" / "act" / "github-cli"
EVIDENCE = "evidence/main"
# The origin's hook refuses the first push to the evidence branch, as GitHub does when the branch moved.
REFUSE_ONCE = """#!/bin/sh
if [ ! -e "$GIT_DIR/refused-once" ]; then
  touch "$GIT_DIR/refused-once"
  echo "the branch moved (refused once by the test's origin)" >&2
  exit 1
fi
"""


pytestmark = pytest.mark.skipif(
    subprocess.run(["sh", "-c", "command -v xz"], capture_output=True, check=False).returncode != 0,
    reason="the publish job unpacks the committed history with tar's xz, which GitHub's runners have and this "
    "machine lacks (Debian: xz-utils)",
)


def git(*args: str, cwd: Path | None = None) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    done = subprocess.run(["git", *identity, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def origin(tmp_path_factory) -> Path:
    """A bare repository whose main holds this working tree, as the workflow's checkout sees it committed."""
    bare = tmp_path_factory.mktemp("origin") / "kit.git"
    git("clone", "--quiet", "--bare", str(ROOT), str(bare))
    tree = ["--git-dir", str(bare), "--work-tree", str(ROOT)]
    git(*tree, "symbolic-ref", "HEAD", "refs/heads/main")
    git(*tree, "reset", "--quiet", git("-C", str(ROOT), "rev-parse", "HEAD"))
    git(*tree, "add", "--all")
    git(*tree, "commit", "--quiet", "--allow-empty", "-m", "the working tree")
    return bare


def publish(origin: Path, tmp_path: Path, artifacts: Path) -> subprocess.CompletedProcess:
    """The publish job's script in a fresh checkout of ``origin``, as the job's step runs it."""
    checkout, temp = tmp_path / "checkout", tmp_path / "runner-temp"
    git("clone", "--quiet", str(origin), str(checkout))
    temp.mkdir()
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(GITHUB_CLI), str(Path(sys.executable).parent), os.environ["PATH"]]),
        "BASE": "main",
        "RUN_URL": NIGHT,
        "ATTEST": "true",
        "GITHUB_TOKEN": "the-nights-token",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "owner/kit",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "RUNNER_TEMP": str(temp),
        "WSLPIN_ACT_PULLS": str(tmp_path / "pulls.json"),
        "WSLPIN_ACT_ATTESTATIONS": str(tmp_path / "attestations.txt"),
    }
    script = [str(checkout / "tools" / "publish-night.sh"), str(artifacts), str(claims_file(tmp_path))]
    return subprocess.run(script, cwd=checkout, env=env, capture_output=True, text=True, timeout=900, check=False)


def attest(tmp_path: Path, files: list[Path]) -> None:
    """What the cell jobs' attestations say (the GitHub CLI stand-in reads them): each file's digest, this run."""
    (tmp_path / "attestations.txt").write_text(
        "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()} {NIGHT}/attempts/1\n" for p in files)
    )


def test_a_night_lands_on_the_evidence_branch_after_a_refused_push_and_never_reads_the_unattested(origin, tmp_path):
    # An earlier night, not merged yet: the branch holds a commit main lacks.
    earlier = tmp_path / "earlier"
    git("clone", "--quiet", str(origin), str(earlier))
    git("checkout", "--quiet", "-b", EVIDENCE, cwd=earlier)
    (earlier / "NOTE-earlier-night").write_text("an earlier night's commit\n")
    git("add", "NOTE-earlier-night", cwd=earlier)
    git("commit", "--quiet", "-m", "an earlier night", cwd=earlier)
    git("push", "--quiet", "origin", EVIDENCE, cwd=earlier)
    before = git("--git-dir", str(origin), "rev-parse", EVIDENCE)
    main = git("--git-dir", str(origin), "rev-parse", "main")
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(REFUSE_ONCE)
    hook.chmod(0o755)

    artifacts = night(tmp_path)
    # The cell jobs attested every file but one cell's result.
    unattested = artifacts / "junit-cuda-wsl2new" / VLLM_VERSION / "cell" / "cuda-wsl2new-v1-eager.xml"
    attest(tmp_path, [p for p in sorted(artifacts.rglob("*")) if p.is_file() and p != unattested])
    done = publish(origin, tmp_path, artifacts)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    assert f"{EVIDENCE} moved during the night: starting again from it (try 2 of 3)" in done.stdout
    summary = (tmp_path / "summary.md").read_text()
    assert f"not kept: {unattested} has no attestation of this run (none verifies)" in summary
    # Three of the runner's four cells: the fourth's result was never read.
    assert (tmp_path / "output").read_text() == "added=3\ndeploy=true\n"
    assert git("--git-dir", str(origin), "rev-parse", "main") == main
    kept = git("--git-dir", str(origin), "diff", "--name-only", before, EVIDENCE, "--", "docs/evidence/runs")
    assert sorted(Path(p).parts[4] for p in kept.splitlines()) == [
        "cuda-wsl2new-v1-graph",
        "cuda-wsl2new-v2-eager",
        "cuda-wsl2new-v2-graph",
    ]
    # On top of the earlier night, which is kept; one pull request carries both into main.
    assert git("--git-dir", str(origin), "merge-base", "--is-ancestor", before, EVIDENCE) == ""
    (pull,) = json.loads((tmp_path / "pulls.json").read_text())
    assert (pull["head"], pull["base"], pull["repo"]) == (EVIDENCE, "main", "owner/kit")
    assert json.loads((tmp_path / "checkout" / "site" / "compat.json").read_text())["versions"]


def test_a_night_that_adds_nothing_pushes_opens_and_deploys_nothing(origin, tmp_path):
    branches = git("--git-dir", str(origin), "for-each-ref", "--format=%(refname) %(objectname)")
    artifacts = night(tmp_path)
    for runner in ("junit-cuda-wsl2new", "junit-rocm-wsl2new"):  # every runner down: the predictions alone
        shutil.rmtree(artifacts / runner)
    done = publish(origin, tmp_path, artifacts)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "output").read_text() == "added=0\n"
    assert (tmp_path / "summary.md").read_text().startswith("0 new record(s) in docs/evidence/runs, 0 the same")
    assert git("--git-dir", str(origin), "for-each-ref", "--format=%(refname) %(objectname)") == branches
    assert not (tmp_path / "pulls.json").exists() and not (tmp_path / "checkout" / "site").exists()
