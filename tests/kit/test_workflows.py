"""Invariants of the GitHub workflows that keep self-hosted GPU runners safe and the matrix whole."""

from __future__ import annotations

import json
import re
from importlib import metadata

import pytest
import yaml
from conftest import ROOT, run_module
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from matrix.cells import CELLS

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def load(path):
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


@pytest.fixture(scope="module")
def matrix_workflow():
    return load(ROOT / ".github" / "workflows" / "matrix.yml")


def self_hosted(job) -> bool:
    runs_on = job.get("runs-on", "")
    return "self-hosted" in str(runs_on) or "matrix.runs_on" in str(runs_on)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_and_no_pull_request_target(path):
    workflow = load(path)
    assert workflow["permissions"] == {}, "permissions: {} at the top, granted per job"
    assert "pull_request_target" not in workflow["on"]
    for name, job in workflow["jobs"].items():
        assert "timeout-minutes" in job, f"{path.name}: job {name} has no timeout"
        assert "permissions" in job, f"{path.name}: job {name} does not state its permissions"
        if self_hosted(job):
            assert "pull_request" not in workflow["on"], f"{path.name}: self-hosted job {name} reachable from a PR"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_piped_step_fails_when_any_command_of_its_pipe_fails(path):
    """GitHub runs a step without a shell as bash -e, where a pipe's last command alone decides; `shell: bash`
    is bash -eo pipefail."""
    workflow = load(path)
    default = workflow.get("defaults", {}).get("run", {}).get("shell")
    for name, job in workflow["jobs"].items():
        shell = job.get("defaults", {}).get("run", {}).get("shell", default)
        for step in job.get("steps", []):
            piped = re.search(r"[^|]\|[^|]", step.get("run", ""))
            if piped:
                assert step.get("shell", shell) == "bash", f"{path.name}: job {name}: {step.get('name')} lacks pipefail"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_version(path):
    uses = re.findall(r"uses:\s*(\S+)(.*)", path.read_text())
    assert uses
    for action, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action), action
        assert re.match(r"\s*#\s*v\d", comment), f"{action} has no version comment"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_untrusted_input_never_reaches_a_script(path):
    for job in load(path)["jobs"].values():
        for step in job.get("steps", []):
            script = step.get("run", "")
            assert not re.search(r"\$\{\{\s*(inputs|github\.event|github\.head_ref|matrix)", script), script


def test_the_plan_jobs_run_each_of_the_noxfiles_cell_sessions_once(nox_listing):
    plan = run_module("matrix", "plan", "--format", "github")
    assert plan.returncode == 0, plan.stderr
    jobs = json.loads(plan.stdout)["include"]
    planned = [cell for job in jobs for cell in job["cells"]]
    assert sorted(planned) == sorted(c.id for c in CELLS) and len(planned) == len(set(planned))
    # Both are made from matrix.cells: the sessions a job runs are the noxfile's, and a cell job's script
    # lists them through `--format sessions`.
    listed = sorted(s["session"] for s in json.loads(nox_listing) if s["name"] == "cell")
    assert sorted(s for job in jobs for s in job["sessions"]) == listed
    for job in jobs:
        named = run_module("matrix", "plan", "--cells", job["pattern"], "--format", "sessions")
        assert named.stdout.splitlines() == job["sessions"], named.stderr
    names = [job["artifact"] for job in jobs]
    assert len(set(names) | {"junit-gate"}) == len(jobs) + 1, "artifact names must be unique, and not the gate's"
    for job in jobs:
        assert job["runs_on"][0] == "self-hosted" and len(job["runs_on"]) == 3
    # A Windows host serves both WSL2 kernels: their jobs share its group, and no group holds more
    # than two jobs (GitHub cancels all but one pending job per group).
    groups = [job["concurrency"] for job in jobs]
    assert max(groups.count(g) for g in groups) <= 2


# What GitHub gives every self-hosted runner besides the labels it is registered with (its OS and architecture).
GITHUB_DEFAULT_LABELS = {"self-hosted", "linux", "x64", "arm64"}


def test_no_runner_carrying_githubs_default_labels_takes_another_kinds_job():
    # A job goes to any runner holding all of its labels. With `linux` as native Linux's own label, every CUDA
    # WSL2 runner (GitHub calls it linux too) took native-Linux jobs, and the night's native cells were misrouted.
    plan = run_module("matrix", "plan", "--format", "github")
    jobs = json.loads(plan.stdout)["include"]
    for runner in jobs:
        registered = set(runner["runs_on"]) | GITHUB_DEFAULT_LABELS
        taken = [job["name"] for job in jobs if set(job["runs_on"]) <= registered]
        assert taken == [runner["name"]], (runner["name"], taken)
    docs = (ROOT / "docs" / "runners.md").read_text()
    for job in jobs:
        labels = ", ".join(f"`{label}`" for label in job["runs_on"])
        assert labels in docs, f"docs/runners.md does not name {job['name']}'s labels: {labels}"


def test_a_dispatch_pattern_narrows_the_plan():
    plan = run_module("matrix", "plan", "--format", "github", "--cells", "cuda-wsl2*-*-graph")
    jobs = json.loads(plan.stdout)["include"]
    assert [(j["name"], j["cells"]) for j in jobs] == [
        ("cuda-wsl2old", ["cuda-wsl2old-v1-graph", "cuda-wsl2old-v2-graph"]),
        ("cuda-wsl2new", ["cuda-wsl2new-v1-graph", "cuda-wsl2new-v2-graph"]),
    ]


def test_cell_jobs_check_their_host_and_always_upload(matrix_workflow):
    cell = matrix_workflow["jobs"]["cell"]
    assert cell["strategy"]["fail-fast"] is False
    scripts = [step.get("run", "") for step in cell["steps"]]
    assert any("--require native --misrouted-out results/" in s for s in scripts), (
        "a misrouted runner must fail before running cells, and its artifact say so"
    )
    assert any('-s "${sessions[@]}"' in s for s in scripts), "all sessions after one -s (nox keeps only the last -s)"
    upload = next(s for s in cell["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "${{ !cancelled() }}" and upload["with"]["name"] == "${{ matrix.artifact }}"


def test_the_nightly_publish_pushes_only_its_evidence_branch_one_night_at_a_time(matrix_workflow):
    """A protected main refuses a push by the workflow's token (no ruleset lets it bypass a rule): the publish
    job pushes the evidence branch alone and reaches main by pull request (tests/act proves it runs)."""
    publish = matrix_workflow["jobs"]["publish"]
    assert publish["concurrency"]["cancel-in-progress"] is False
    assert publish["permissions"] == {"contents": "write", "pull-requests": "write"}
    script = (ROOT / "tools" / "publish-night.sh").read_text()
    assert 'branch="evidence/$base"' in script and "set -euo pipefail" in script
    pushes = [line for line in script.splitlines() if re.search(r"\bpush\b", line) and "remote" in line]
    assert pushes and all(line.rstrip().endswith('"HEAD:refs/heads/$branch"; then') for line in pushes), pushes
    assert any("tools/publish-night.sh" in step.get("run", "") for step in publish["steps"])


def test_the_report_runs_even_when_cells_failed(matrix_workflow):
    report = matrix_workflow["jobs"]["report"]
    assert {"cell", "gate"} <= set(report["needs"])
    assert report["if"] == "${{ !cancelled() }}"
    deploy = matrix_workflow["jobs"]["deploy"]
    assert "refs/heads/main" in deploy["if"] and deploy["permissions"] == {"pages": "write", "id-token": "write"}


def test_buildkite_pipeline_has_the_same_jobs_and_a_report_that_always_runs():
    done = run_module("matrix", "pipeline", "--format", "buildkite")
    steps = json.loads(done.stdout)["steps"]
    cells = [s for s in steps if s.get("key", "").startswith("cells-")]
    assert [s["key"] for s in cells] == [
        f"cells-{j}"
        for j in ("cuda-linux", "cuda-wsl2old", "cuda-wsl2new", "rocm-linux", "rocm-wsl2old", "rocm-wsl2new")
    ]
    assert all("--require native --misrouted-out results/" in s["commands"][0] for s in cells)
    assert {"wait": None, "continue_on_failure": True} in steps and steps[-1]["key"] == "report"
    nox_files = [s["commands"][1].split()[2] for s in cells]
    assert all(f in s["artifact_paths"] for f, s in zip(nox_files, cells, strict=True))
    commands = steps[-1]["commands"]
    assert [c for c in commands if "pip install" in c] == ["python -m pip install --no-deps -r requirements/report.txt"]
    report = next(c for c in commands if "matrix report" in c)
    assert "--nox-report 'nox-*.json'" in report and "--max-age-days" in report
    # Each agent's files land in its artifact's directory, which the report's --runners names.
    assert "artifacts/ --runners runners.json" in report
    downloads = [c for c in commands if c.startswith("buildkite-agent artifact download 'results/")]
    assert downloads == [
        f"buildkite-agent artifact download 'results/**/*' artifacts/junit-{s['key'][6:]}/ --step {s['key']} || true"
        for s in cells
    ]
    runners = next(c for c in commands if "--format github" in c).split(">")[0].split()[3:]
    planned = json.loads(run_module("matrix", *runners).stdout)["include"]
    assert [f"junit-{s['key'][6:]}" for s in cells] == [job["artifact"] for job in planned]


def _needed(requirement: Requirement, extras: frozenset[str] = frozenset()) -> set[str]:
    """The distributions ``requirement`` brings into this Python, its own included: installed metadata, offline."""
    seen: set[str] = set()
    pending = [(requirement, extras)]
    while pending:
        req, wanted = pending.pop()
        name = canonicalize_name(req.name)
        if name in seen and not wanted:
            continue
        seen.add(name)
        for text in metadata.requires(req.name) or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in wanted or {""}):
                pending.append((sub, frozenset(sub.extras)))
    return seen


def test_the_report_jobs_install_every_distribution_the_report_needs_pinned_from_the_lock():
    # The jobs install the lock alone (--no-deps) and run the kit from the checkout: a distribution the report
    # extra brings that the lock lacks would be missing there, and one left unpinned would change by night.
    lock = (ROOT / "requirements" / "report.txt").read_text()
    pinned = {
        canonicalize_name(m["name"]): m["version"]
        for m in re.finditer(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)", lock, re.M)
    }
    needed = _needed(Requirement("vllm-wslpin-kit[report]"), frozenset({"report"})) - {"vllm-wslpin-kit"}
    assert needed and needed <= set(pinned), sorted(needed - set(pinned))
    assert all(line.startswith(("#", " ")) or "==" in line for line in lock.splitlines() if line.strip())
