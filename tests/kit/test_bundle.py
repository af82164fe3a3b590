"""Community bundles: a user's cell session sent back as one file, checked at intake, a tampered one refused.

The session is the cell sessions' own path (environment record, plan, pytest, split: noxfile's _test_cells) run
under the kit's emulated WSL2 host, from a copy of the kit committed to a repository of its own, so the bundle
names a kit commit that exists there (this checkout may have changes of its own). It runs the gate's cases, which
need no GPU: its environment record shows no GPU ran them, so intake refuses the bundle in one line, whatever the
machine (a GPU's bundle, accepted as *community*, is tests/kit/test_evidence.py's). The stand-in GPU of the
kit's GPU variant is taken off the session's PATH: this test presents its own host.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, committed_history

from matrix.cells import Host
from matrix.plan import cell_pytest_args
from matrix.releases import VLLM_VERSION
from matrix.store.groups import GROUP_TESTS
from matrix.variables import PRESENT_HOST
from repro import emulation

CELL = "cuda-wsl2new-v2-graph"
pytestmark = pytest.mark.reads_host  # the session reads the machine, its GPU included


def kit(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m ARGS`` in the kit copy at ``cwd``, as its user runs it there: the copy's code only (a host
    variant's presentation loads the kit under test first, which would answer for another repository)."""
    environ = {k: v for k, v in os.environ.items() if k != PRESENT_HOST.name} | {"PYTHONPATH": str(cwd)} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    """A copy of the kit, committed, after one cell session under the emulated WSL2 host: its root."""
    root = tmp_path_factory.mktemp("kit")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    git = ["git", "-C", str(root), "-c", "user.name=u", "-c", "user.email=u@u"]
    subprocess.run([*git, "init", "--quiet"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "the kit"], check=True)
    # What a WSL2 machine shows every process: its uname, and WSL's own variable (noxfile's _stand_in_env).
    wsl2 = emulation.presenting(Host.WSL2NEW, {"PYTHONPATH": str(root)}) | {"WSL_DISTRO_NAME": "wslpin-emulated"}
    stand_in = str(ROOT / "tests" / "stand-in-gpu")
    wsl2["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != stand_in)
    tmp, out = root / "tmp", root / "results" / VLLM_VERSION / "cell"
    tmp.mkdir()
    steps = [
        ("matrix", "env", "--out", str(tmp / "env.json")),
        ("matrix", "plan", "--cells", CELL, "--env", str(tmp / "env.json"), "--out", str(tmp / "plan.json")),
        ("pytest", *GROUP_TESTS["gate"], *cell_pytest_args(CELL, str(tmp / "junit.xml"), str(tmp / "p.json"),
                                                           str(tmp / "plan.json"))),
        ("matrix", "split", str(tmp / "junit.xml"), "--cells", CELL, "--plan", str(tmp / "plan.json"),
         "--env", str(tmp / "env.json"), "--out", str(out), "--started-at", dt.datetime.now(dt.UTC).isoformat()),
    ]  # fmt: skip
    for step in steps:
        done = kit(root, *step, env=wsl2)
        assert done.returncode == 0, (step, done.stdout[-2000:], done.stderr[-2000:])
    committed_history(root / "history")
    return root


def ran(session: Path) -> str:
    """How the session ran its cell: gate-only here, natively where the machine has a GPU."""
    (planned,) = json.loads((session / "tmp" / "plan.json").read_text())["cells"]
    return str(planned["execution"])


@pytest.fixture(scope="module")
def bundle(session) -> Path:
    done = kit(session, "matrix", "bundle", "--out", "bundles")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"wrote bundles/wslpin-bundle-{VLLM_VERSION}-") and first.endswith(f"1 cell(s): {CELL}")
    assert ".github/ISSUE_TEMPLATE/community-result.yml" in done.stdout
    (made,) = (session / "bundles").glob("*.json")
    return made


def test_a_bundle_without_a_gpu_is_refused_in_one_line_and_never_shown_at_a_gpu_level(session, bundle):
    document = json.loads(bundle.read_text())
    assert (document["schema"], document["vllm"], [c["cell"] for c in document["cells"]]) == (
        "wslpin-kit.bundle/1",
        VLLM_VERSION,
        [CELL],
    )
    # The session ran the gate's cases (as a machine without a GPU, and so here): its record shows no GPU ran.
    store = session / "docs" / "evidence" / "runs"
    done = kit(session, "matrix", "evidence", "add", str(bundle), "--source", "community")
    assert done.returncode == 0, done.stderr
    first, refused = done.stdout.splitlines()
    assert first == f"0 new record(s) in {store.relative_to(session)}, 0 the same as one kept before"
    assert refused.startswith(f"  not kept, 1 suite(s): refused: {CELL}: its environment record ")
    assert not list(store.glob(f"{VLLM_VERSION}/{CELL}/community/*"))
    # Read beside the kit's own prediction, it is refused as well, and said: the report fails, and says why.
    report = kit(session, "matrix", "report", f"history/{VLLM_VERSION}", "--community", "bundles", "--out", "report")
    assert report.returncode != 0 and "refused" in report.stdout + report.stderr


def rehashed(document: dict) -> dict:
    for cell in document["cells"]:
        for part in ("junit", "env"):
            cell[part]["sha256"] = hashlib.sha256(cell[part]["text"].encode()).hexdigest()
    return document


def tampered(document: dict, how: str) -> dict:
    junit = document["cells"][0]["junit"]
    if how == "hash":
        junit["text"] = junit["text"].replace("<testcase ", "<testcase  ", 1)
        return document
    if how == "execution":  # the other of the two a session plans for this cell, with or without a GPU
        said, other = ('"gate-only"', '"native"') if '"gate-only"' in junit["text"] else ('"native"', '"gate-only"')
        junit["text"] = junit["text"].replace(f'name="execution" value={said}', f'name="execution" value={other}')
        return rehashed(document)
    if how == "release":  # a release that would name a directory outside the store, consistent everywhere
        junit["text"] = junit["text"].replace(f'value="{VLLM_VERSION}"', 'value="../../outside"')
        document["vllm"] = "../../outside"
        return rehashed(document)
    if how == "commit":
        junit["text"] = junit["text"].replace(document["kit_commit"], "0123456789ab")
        document["kit_commit"] = "0123456789ab"
        return rehashed(document)
    return {"schema": "something-else"}


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("hash", f"{CELL}'s junit file does not match its hash: changed after it was bundled"),
        ("execution", f"{CELL}'s envelope says {{other}}, but its own environment record plans the cell {{ran}}"),
        ("commit", "names kit commit '0123456789ab', which is not a commit of this kit's history that makes bundles"),
        ("shape", "is not a bundle (schema wslpin-kit.bundle/1)"),
        ("release", "names no vLLM release ('../../outside')"),
    ],
)
def test_a_tampered_bundle_is_refused_in_one_line_and_nothing_of_it_is_kept(session, bundle, tmp_path, how, reason):
    bad = tmp_path / "bundles" / "bad.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(tampered(json.loads(bundle.read_text()), how)))
    planned = ran(session)
    reason = reason.format(ran=planned, other="native" if planned == "gate-only" else "gate-only")
    store = tmp_path / "store"
    done = kit(session, "matrix", "evidence", "add", str(bad), "--source", "community", "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert f"not kept, 1 suite(s): refused: {reason}" in done.stdout
    assert not store.exists() and not (tmp_path.parent / "outside").exists()
    history = f"history/{VLLM_VERSION}"
    report = kit(session, "matrix", "report", history, "--community", str(bad.parent), "--out", str(tmp_path / "r"))
    assert report.returncode == 1
    (line,) = [line for line in report.stderr.splitlines() if line.startswith("error: bundle")]
    assert line.startswith(f"error: bundle {bad} refused: {reason}")


def test_a_commit_of_the_repository_outside_the_kits_history_is_refused(session, bundle, tmp_path):
    """A commit the repository holds but the kit's history does not (another branch's, an object made by hand)."""
    git = ["git", "-C", str(session), "-c", "user.name=u", "-c", "user.email=u@u"]
    empty = subprocess.run([*git, "mktree"], input=b"", capture_output=True, check=True).stdout.decode().strip()
    orphan = subprocess.run([*git, "commit-tree", empty, "-m", "not the kit"], capture_output=True, check=True)
    commit = orphan.stdout.decode().strip()
    document = json.loads(bundle.read_text())
    (cell,) = document["cells"]
    cell["junit"]["text"] = cell["junit"]["text"].replace(document["kit_commit"], commit)
    document["kit_commit"] = commit
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(rehashed(document)))
    done = kit(session, "matrix", "evidence", "add", str(bad), "--source", "community", "--store", str(tmp_path / "s"))
    assert f"refused: names kit commit '{commit}', which is not a commit of this kit's history" in done.stdout


def test_the_bundle_names_the_form_to_send_it_to_warns_it_is_gate_only_and_is_written_whole(session, tmp_path):
    git = ["git", "-C", str(session)]
    subprocess.run([*git, "remote", "add", "origin", "git@github.com:owner/wslpin-kit.git"], check=True)
    try:
        done = kit(session, "matrix", "bundle", "--out", str(tmp_path / "out"))
    finally:
        subprocess.run([*git, "remote", "remove", "origin"], check=True)
    assert done.returncode == 0, done.stderr
    form = "https://github.com/owner/wslpin-kit/issues/new?template=community-result.yml&labels=community-result"
    assert f"send it: open {form} and attach the file" in done.stdout
    if ran(session) == "gate-only":
        assert f"warning: {CELL} ran gate-only (vLLM's decisions, no GPU)" in done.stdout
    # --out naming a file, or a folder that cannot be written: one line, and no part of a bundle left behind.
    afile = tmp_path / "afile"
    afile.write_text("mine")
    named = kit(session, "matrix", "bundle", "--out", str(afile))
    assert (named.returncode, named.stderr) == (2, f"error: --out {afile} is a file: give the directory the bundle "
                                                   "is written into\n")  # fmt: skip
    # /proc/sys: a folder no user can make a file in, root included (CI runs as root).
    locked = Path("/proc/sys")
    before = sorted(p.name for p in locked.iterdir())
    refused = kit(session, "matrix", "bundle", "--out", str(locked))
    assert refused.returncode == 2 and refused.stderr.startswith(f"error: cannot write {locked}/wslpin-bundle-")
    assert len(refused.stderr.splitlines()) == 1 and not any(p.name.startswith(".wslpin") for p in locked.iterdir())
    assert "wslpin" not in " ".join(before)


def test_no_session_no_bundle_and_a_kit_with_changes_makes_none(session, tmp_path):
    none = kit(session, "matrix", "bundle", "--results", str(tmp_path), "--out", str(tmp_path))
    assert (none.returncode, none.stdout) == (2, "")
    assert none.stderr.startswith(f"error: no cell results in {tmp_path}/{VLLM_VERSION}/cell: run your cell first")
    changed = tmp_path / "results"
    shutil.copytree(session / "results", changed)
    (result,) = changed.glob(f"{VLLM_VERSION}/cell/{CELL}.xml")
    result.write_text(result.read_text().replace('name="kit_commit" value="', 'name="kit_commit" value="+dirty', 1))
    dirty = kit(session, "matrix", "bundle", "--results", str(changed), "--out", str(tmp_path))
    assert dirty.returncode == 2 and "run the cell session from a clean clone of the kit" in dirty.stderr


def test_what_a_failure_says_of_the_users_home_or_a_token_is_scrubbed_and_the_bundle_still_reads(session, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(session / "results", results)
    (result,) = results.glob(f"{VLLM_VERSION}/cell/{CELL}.xml")
    secret = "ghp_C4naryGitHubTokenC4naryGitHubToken01"
    failing = f'<failure message="could not read /home/alice/models with --token {secret}">trace</failure>'
    result.write_text(result.read_text().replace("</testcase>", f"{failing}</testcase>", 1))
    done = kit(session, "matrix", "bundle", "--results", str(results), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    (made,) = (tmp_path / "out").glob("*.json")
    (cell,) = json.loads(made.read_text())["cells"]
    assert secret not in made.read_text() and "alice" not in made.read_text()
    assert "could not read ~/models with --token &lt;redacted&gt;" in cell["junit"]["text"]
    kept = kit(session, "matrix", "evidence", "add", str(made), "--source", "community", "--store", str(tmp_path / "s"))
    # It still reads as a bundle: what refuses it is the machine it ran on (no GPU), never its scrubbed text.
    assert f"refused: {CELL}: its environment record " in kept.stdout, kept.stdout
    assert secret not in kept.stdout and "alice" not in kept.stdout
