"""Community bundles: a user's cell session sent back as one file, ingested as *community*, and a tampered one refused.

The session is the cell sessions' own path (environment record, plan, pytest, split: noxfile's _test_cells) run
under the kit's emulated WSL2 host, from a copy of the kit committed to a repository of its own, so the bundle
names a kit commit that exists there (this checkout may have changes of its own). Without a GPU the session's
cell is gate-only: the bundle carries what the user's machine predicted, and the report shows it as theirs,
beside the kit's own prediction and never above it; on a machine with a GPU it ran natively, and the user's
result outranks the prediction. The stand-in GPU of the kit's GPU variant is taken off the session's PATH: this
test presents its own host.
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
from matrix.groups import GROUP_TESTS
from matrix.plan import cell_pytest_args
from matrix.releases import VLLM_VERSION
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


def test_a_bundle_after_a_session_under_the_emulated_wsl2_host_is_ingested_as_community(session, bundle):
    document = json.loads(bundle.read_text())
    assert (document["schema"], document["vllm"], [c["cell"] for c in document["cells"]]) == (
        "wslpin-kit.bundle/1",
        VLLM_VERSION,
        [CELL],
    )
    # Kept in the store as a user's own, once.
    store = session / "docs" / "evidence" / "runs"
    done = kit(session, "matrix", "evidence", "add", str(bundle), "--source", "community")
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.splitlines()[0] == f"1 new record(s) in {store.relative_to(session)}, 0 the same as one kept before"
    )
    (record,) = store.glob(f"{VLLM_VERSION}/{CELL}/community/*-{ran(session)}-*.xml")
    again = kit(session, "matrix", "evidence", "add", str(bundle), "--source", "community")
    assert again.stdout.startswith(f"0 new record(s) in {store.relative_to(session)}, 1 the same as one kept before")
    # Read by the report beside the kit's own prediction (the committed history), as the user's.
    report = kit(session, "matrix", "report", f"history/{VLLM_VERSION}", "--community", "bundles", "--out", "report")
    assert report.returncode == 0, report.stderr
    assert "--community: 1 bundle(s), 1 cell result(s) read as a user's own" in report.stdout
    compat = json.loads((session / "report" / "compat.json").read_text())
    (cell,) = [c for c in compat["versions"][0]["cells"] if c["id"] == CELL]
    if ran(session) == "gate-only":  # a prediction on the user's machine: never above the kit's own
        assert [s["execution"] for s in cell["superseded"]] == ["community-gate-only"]
        assert cell["evidence"][0].startswith("predicted: vLLM") and "a user's own run" not in cell["evidence"][0]
    else:  # a GPU's answer: above any prediction, at the community level
        assert [s["execution"] for s in cell["superseded"]] == ["gate-only"]
        assert {v["level"] for v in cell["verdicts"].values()} <= {"community", "predicted", "documented"}
    alone = kit(session, "matrix", "report", str(store), "--out", "alone", "--evidence", str(store))
    assert alone.returncode == 0, alone.stderr
    compat = json.loads((session / "alone" / "compat.json").read_text())
    (cell,) = [c for c in compat["versions"][0]["cells"] if c["id"] == CELL]
    assert "a user's own run, sent as a bundle: not verified by the kit's runners" in cell["evidence"][0]
    assert cell["evidence_records"][0]["origin"] == "community"


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
        ("commit", "names kit commit '0123456789ab', which is not a commit of this kit's repository"),
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
    assert kept.stdout.startswith("1 new record(s)"), kept.stdout
