"""Nights of .github/workflows/matrix.yml under nektos/act (tests/act/night.py says what is real and what stands in).

Each test is one night; they share the origin and the Pages site, which outlive a night as the repository and
GitHub Pages do. Each test reads the state it starts from, so none depends on another having run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from night import GPU_RUNNER, ROOT, Night, Nights

from matrix.cells import CELLS
from matrix.releases import VLLM_VERSION

TWO_CELLS = ["cuda-wsl2new-v1-graph", "cuda-wsl2new-v2-graph"]
# What the workflow's own runs upload beside the runners' artifacts (and the gate's of each release newer than the
# published matrix, new-release-gate-<release>, where this machine's package index has one).
NOT_A_RUNNERS = {"junit-gate", "github-pages"}
NEW_RELEASE_GATE = "new-release-gate-"
STORE = "docs/evidence/runs"
# Where the publish job keeps the nights a protected main has not taken yet (tools/publish-night.sh).
EVIDENCE = "evidence/main"


def runner_artifacts(night: Night) -> set[str]:
    return {p.name for p in night.artifacts.iterdir() if not p.name.startswith(NEW_RELEASE_GATE)} - NOT_A_RUNNERS


def site(pages: Path) -> dict[str, str]:
    """The deployed site, file by file: its digests (empty before any deploy)."""
    files = sorted(p for p in pages.rglob("*") if p.is_file()) if pages.is_dir() else []
    return {str(p.relative_to(pages)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def in_origin(nights: Nights, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={nights.origin}", *args], capture_output=True, text=True, check=True
    ).stdout


def evidence_head(nights: Nights) -> str:
    """The evidence branch's commit, or empty before any night kept a record."""
    done = subprocess.run(
        ["git", f"--git-dir={nights.origin}", "rev-parse", "--verify", "--quiet", f"refs/heads/{EVIDENCE}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip()


def stored(nights: Nights) -> set[str]:
    """The store's records as the nights left them: on the evidence branch, or main's before the first."""
    return set(in_origin(nights, "ls-tree", "-r", "--name-only", evidence_head(nights) or "main", STORE).split())


def pulls(nights: Nights) -> list[dict]:
    return json.loads(nights.pulls.read_text()) if nights.pulls.exists() else []


def test_a_night_with_native_results_for_two_cells_keeps_them_and_deploys_every_release(nights: Nights):
    before = json.loads(in_origin(nights, "show", "main:docs/matrix/compat.json"))
    # The store already holds a maintainer's records (the H200 run): the night adds its own beside them.
    kept, main = stored(nights), in_origin(nights, "rev-parse", "main")
    night = nights.run("workflow_dispatch", "cuda-wsl2new", cells=",".join(TWO_CELLS), attest=True)
    assert night.results() == {
        "plan": "success",
        "gate": "success",
        "cell cuda-wsl2new": "success",
        "report": "success",
        "publish": "success",
        "deploy": "success",
    }, night.printed("publish")
    assert night.returncode == 0
    runners = json.loads(night.outputs("plan")["runners"])
    assert [job["cells"] for job in runners["include"]] == [TWO_CELLS]
    assert runner_artifacts(night) == {job["artifact"] for job in runners["include"]}
    # The store after the publish job: the two cells' records, pushed with the matrix made from them to the
    # evidence branch, never to main (a protected main refuses the workflow's token), and a pull request of it.
    assert night.outputs("publish") == {"added": "2", "deploy": "true"}
    records = stored(nights) - kept
    assert sorted(Path(r).parts[3:6] for r in records) == [(VLLM_VERSION, c, "runner") for c in TWO_CELLS]
    assert in_origin(nights, "log", "-1", "--format=%s", EVIDENCE).startswith("Evidence: 2 new GPU result(s) from ")
    assert in_origin(nights, "rev-parse", "main") == main
    assert [(p["head"], p["base"], p["state"]) for p in pulls(nights)] == [(EVIDENCE, "main", "open")]
    assert f"The night's records are on `{EVIDENCE}`, in {pulls(nights)[0]['url']}" in night.printed("publish")
    # The cell job attested each result and record (the stand-in keeps their digests), and each verified as this
    # run's: none was set aside.
    assert len(nights.attestations.read_text().splitlines()) >= 4
    assert "has no attestation of this run" not in night.printed("publish")
    # Each record names the workflow run that made it, which intake checked against the night's.
    record = in_origin(nights, "show", f"{EVIDENCE}:{sorted(records)[0]}")
    assert '<property name="workflow_run" value="' in record and '<property name="workflow_job" value="cell"' in record
    # The deployed site: every release, the two cells resting on the runner's native results, and a diff that
    # names no cell missing (like with like).
    assert night.outputs("deploy")["page_url"] == f"file://{night.pages}/"
    deployed = json.loads((night.pages / "compat.json").read_text())
    assert [v["vllm"] for v in deployed["versions"]] == [v["vllm"] for v in before["versions"]]
    (release,) = [v for v in deployed["versions"] if v["vllm"] == VLLM_VERSION]  # the runner's release
    cells = {c["id"]: c for c in release["cells"]}
    for cell in TWO_CELLS:
        native = cells[cell]["evidence_records"][0]
        assert (native["kind"], native["runner"], native["origin"]) == ("native", GPU_RUNNER, "runner")
    assert all(cells[c.id]["evidence_records"][0]["kind"] == "gate-only" for c in CELLS if c.id not in TWO_CELLS)
    assert deployed["diff"]["went_missing"] == []
    # The doctor, asked about that set-up against the deployed matrix, answers from the runner's run.
    asked = ["--stack", "cuda", "--kernel", "6.6.87.2-microsoft-standard-WSL2", "--runner", "v2"]
    doctor = [sys.executable, "-m", "matrix", "doctor", *asked, "--vllm", VLLM_VERSION]
    answer = subprocess.run([*doctor, "--matrix", str(night.pages / "compat.json")], cwd=ROOT, capture_output=True,
                            text=True, check=False)  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    assert f"runner {GPU_RUNNER}" in answer.stdout and "a self-hosted runner's nightly result" in answer.stdout
    assert "measured" in answer.stdout


def kept_answers(nights: Nights) -> set[str]:
    return {p.name for p in nights.answers.iterdir()} if nights.answers.is_dir() else set()


def test_a_night_with_every_runner_down_deploys_nothing_and_leaves_the_site_as_it_was(nights: Nights):
    deployed, head, evidence = site(nights.pages), in_origin(nights, "rev-parse", "main"), evidence_head(nights)
    asked = kept_answers(nights)
    night = nights.run("schedule", "none")
    if asked:
        # After a night that asked vLLM, this night's gate job, the same installation in a workspace of its own,
        # was given every answer (repro/answers.py) and asked vLLM nothing: it kept no new one.
        assert kept_answers(nights) == asked
    results = night.results()
    # No cell job at all: an empty matrix would fail, so the job's condition skips it.
    assert not any(job.startswith("cell") for job in results), results
    assert (results["plan"], results["gate"], results["report"], results["publish"]) == ("success",) * 4
    assert "deploy" not in results  # its condition is false: nothing was added
    assert runner_artifacts(night) == set()
    assert len(json.loads(night.outputs("plan")["runners"])["not_planned"]) == 6
    assert (night.outputs("report")["not_planned"], night.outputs("publish")) == ("6", {"added": "0"})
    assert "Nothing deployed: the night added nothing to the evidence store" in night.printed("publish")
    assert site(nights.pages) == deployed and in_origin(nights, "rev-parse", "main") == head
    assert evidence_head(nights) == evidence


def test_a_misrouted_runner_fails_the_night_and_its_cells_are_never_kept(nights: Nights):
    """The rocm-wsl2new runner kind's job lands on the GPU runner, a CUDA WSL2 machine: its host check refuses the
    cells and uploads a result saying so; the report fails the night, and the store keeps none of them."""
    deployed = site(nights.pages)
    rocm = [c.id for c in CELLS if c.id.startswith("rocm-wsl2new-")]
    night = nights.run("workflow_dispatch", "cuda-wsl2new,rocm-wsl2new", cells=",".join([*TWO_CELLS, *rocm]))
    results = night.results()
    assert night.failed_steps("cell", "cuda-wsl2new") == []
    (refused,) = night.failed_steps("cell", "rocm-wsl2new")
    assert refused.startswith("Is this runner the cells' host?")
    assert runner_artifacts(night) == {"junit-cuda-wsl2new", "junit-rocm-wsl2new"}
    assert night.outputs("report")["misrouted"] == "4"
    assert (results["report"], night.returncode) == ("failure", 1)
    assert "regressed, crashed, misrouted or missing" in night.printed("report")
    publish = night.printed("publish")
    assert "a misrouted runner's cell: no answer of vLLM's" in publish
    assert not any("rocm" in record for record in stored(nights))
    # The CUDA runner's two cells are kept where they are new (this night alone) and deployed with them; where an
    # earlier night kept the same answers, nothing is added and the site stays as it was.
    if night.outputs("publish")["added"] == "0":
        assert "deploy" not in results and site(nights.pages) == deployed
    else:
        assert (night.outputs("publish")["added"], results["deploy"]) == ("2", "success")


def test_a_night_whose_store_cannot_be_written_fails_its_publish_job_and_changes_nothing(nights: Nights, tmp_path):
    """The evidence branch's folder for the night's release is a file: `evidence add` fails in a piped step, and
    the job fails with it (pipefail), pushing, opening and deploying nothing."""
    before = evidence_head(nights)
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "--quiet", str(nights.origin), str(work)], check=True)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "checkout", "--quiet", "-B", EVIDENCE, f"origin/{EVIDENCE}" if before else "origin/main"],
                   check=True)  # fmt: skip
    blocker = work / STORE / VLLM_VERSION
    shutil.rmtree(blocker, ignore_errors=True)
    blocker.write_text("not a folder\n")
    subprocess.run([*git, "add", "--all"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "a store the night cannot write"], check=True)
    subprocess.run([*git, "push", "--quiet", "origin", f"HEAD:refs/heads/{EVIDENCE}"], check=True)
    broken, deployed, opened = evidence_head(nights), site(nights.pages), pulls(nights)
    try:
        night = nights.run("workflow_dispatch", "cuda-wsl2new", cells=TWO_CELLS[1])
        assert (night.results()["publish"], night.returncode) == ("failure", 1), night.printed("publish")
        assert f"error: cannot write results in {STORE}/{VLLM_VERSION}/" in night.printed("publish")
        assert "deploy" not in night.results()
        assert (evidence_head(nights), site(nights.pages), pulls(nights)) == (broken, deployed, opened)
    finally:
        ref = f"refs/heads/{EVIDENCE}"
        restore = ["update-ref", ref, before] if before else ["update-ref", "-d", ref]
        in_origin(nights, *restore)
