"""Nights of .github/workflows/matrix.yml under nektos/act (tests/act/night.py says what is real and what stands in).

Each test is one night; they share the origin and the Pages site, which outlive a night as the repository and
GitHub Pages do. Each test reads the state it starts from, so none depends on another having run.
"""

from __future__ import annotations

import hashlib
import json
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


def test_a_night_with_native_results_for_two_cells_keeps_them_and_deploys_every_release(nights: Nights):
    before = json.loads(in_origin(nights, "show", "main:docs/matrix/compat.json"))
    # The store already holds a maintainer's records (the H200 run): the night adds its own beside them.
    stored = set(in_origin(nights, "ls-tree", "-r", "--name-only", "main", STORE).split())
    night = nights.run("workflow_dispatch", "cuda-wsl2new", cells=",".join(TWO_CELLS))
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
    # The store after the merge step: the two cells' records, pushed with the matrix made from them.
    assert night.outputs("publish") == {"added": "2", "deploy": "true"}
    records = set(in_origin(nights, "ls-tree", "-r", "--name-only", "main", STORE).split()) - stored
    assert sorted(Path(r).parts[3:6] for r in records) == [(VLLM_VERSION, c, "runner") for c in TWO_CELLS]
    assert in_origin(nights, "log", "-1", "--format=%s", "main").startswith("Evidence: 2 new GPU result(s) from ")
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


def test_a_night_with_every_runner_down_deploys_nothing_and_leaves_the_site_as_it_was(nights: Nights):
    deployed, head = site(nights.pages), in_origin(nights, "rev-parse", "main")
    night = nights.run("schedule", "none")
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
    records = in_origin(nights, "ls-tree", "-r", "--name-only", "main", STORE).split()
    assert not any("rocm" in record for record in records)
    # The CUDA runner's two cells are kept where they are new (this night alone) and deployed with them; where an
    # earlier night kept the same answers, nothing is added and the site stays as it was.
    if night.outputs("publish")["added"] == "0":
        assert "deploy" not in results and site(nights.pages) == deployed
    else:
        assert (night.outputs("publish")["added"], results["deploy"]) == ("2", "success")
