"""Answers remembered across a test session's processes: asked once, given again only where nothing they depend on
changed, never for a child that gave no answer, never past the time a caller allows now."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.answers import CACHE_VARIABLE, run_remembered
from repro.isolation import DEADLINE_VARIABLE


def counted(arg: tuple[str, str]) -> dict:
    """A child that leaves a mark for each time it really ran, and answers with what it saw."""
    marks, value = arg
    with open(marks, "a") as f:
        f.write("ran\n")
    return {"value": value, "probe": os.environ.get("VLLM_TEST_PROBE")}


def slow(arg: tuple[str, float]) -> str:
    marks, seconds = arg
    with open(marks, "a") as f:
        f.write("ran\n")
    time.sleep(seconds)
    return "done"


def runs(marks: Path) -> int:
    return len(marks.read_text().splitlines()) if marks.exists() else 0


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    where = tmp_path / "answers"
    monkeypatch.setenv(CACHE_VARIABLE, str(where))
    monkeypatch.delenv(DEADLINE_VARIABLE, raising=False)
    monkeypatch.delenv("VLLM_TEST_PROBE", raising=False)
    return where


def test_an_answer_is_asked_once_and_given_again(cache, tmp_path):
    marks = tmp_path / "marks"
    args = [(str(marks), "a"), (str(marks), "b")]
    preloads = []
    first = run_remembered("t.counted", counted, args, timeout=60, before=preloads.append)
    again = run_remembered("t.counted", counted, args, timeout=60, before=preloads.append)
    assert [o.value["value"] for o in first] == ["a", "b"] and [o.value for o in again] == [o.value for o in first]
    assert runs(marks) == 2, "the second call started no child"
    assert preloads == [2], "the parent preloads only when a child must start, told how many"


def test_without_the_variable_every_call_asks_afresh(cache, tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_VARIABLE)
    marks = tmp_path / "marks"
    for _ in range(2):
        (outcome,) = run_remembered("t.counted", counted, [(str(marks), "a")], timeout=60)
        assert outcome.ok
    assert runs(marks) == 2 and not cache.exists()


def test_a_variable_vllm_reads_is_part_of_the_key(cache, tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    (before,) = run_remembered("t.counted", counted, [(str(marks), "a")], timeout=60)
    monkeypatch.setenv("VLLM_TEST_PROBE", "1")
    (after,) = run_remembered("t.counted", counted, [(str(marks), "a")], timeout=60)
    assert (before.value["probe"], after.value["probe"]) == (None, "1")
    assert runs(marks) == 2
    # A variable no child reads (the test's own bookkeeping) keeps the answer.
    monkeypatch.setenv("PYTEST_SOMETHING_ELSE", "x")
    run_remembered("t.counted", counted, [(str(marks), "a")], timeout=60)
    assert runs(marks) == 2


def test_a_child_that_gave_no_answer_is_asked_again(cache, tmp_path):
    marks = tmp_path / "marks"
    for _ in range(2):
        (outcome,) = run_remembered("t.slow", slow, [(str(marks), 5.0)], timeout=0.5)
        assert outcome.status == "timeout"
    assert runs(marks) == 2


def test_an_answer_that_took_longer_than_now_allowed_is_not_given(cache, tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    (first,) = run_remembered("t.slow", slow, [(str(marks), 1.0)], timeout=60)
    assert first.ok and first.seconds > 0.5
    # The run's deadline leaves less than the answer took: a fresh process would not have answered in time.
    monkeypatch.setenv(DEADLINE_VARIABLE, str(time.time() + 0.3))
    (late,) = run_remembered("t.slow", slow, [(str(marks), 1.0)], timeout=60)
    # Killed at the deadline, or not started at all where the deadline passed first: no answer either way.
    assert late.status == "timeout" and late.value is None


def test_a_cut_or_foreign_file_in_the_cache_is_asked_again(cache, tmp_path):
    marks = tmp_path / "marks"
    run_remembered("t.counted", counted, [(str(marks), "a")], timeout=60)
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(entry.read_bytes()[:10])
    (outcome,) = run_remembered("t.counted", counted, [(str(marks), "a")], timeout=60)
    assert outcome.ok and outcome.value["value"] == "a" and runs(marks) == 2


def test_the_kits_own_test_session_keeps_answers_for_every_process_it_starts():
    # Set by the kit's conftest before any test, so that every nested pytest and nox run inherits it.
    where = os.environ.get(CACHE_VARIABLE)
    assert where and Path(where).is_dir()


def test_a_copy_of_the_kit_has_its_key_whatever_lies_beside_its_sources(tmp_path):
    """The kit's part of the key is its matrix/ and repro/ sources alone: not the venvs under it (torch has
    folders of those names too), nor where it was copied to (the kit's tests run nox in copies of it)."""
    root = Path(__file__).resolve().parents[2]
    kit = tmp_path / "kit"
    for folder in ("matrix", "repro"):
        shutil.copytree(root / folder, kit / folder, ignore=shutil.ignore_patterns("__pycache__"))

    # A PATH through the kit's own folders (a venv made inside the checkout, as on the fresh machine of .ci/run)
    # names the kit by its place, which a copy is not: both sides are asked without those folders.
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if not p.startswith(str(root)))
    env = {**os.environ, "PATH": path}

    def key(where: Path) -> str:
        code = f"import sys; sys.path.insert(0, {str(where)!r}); import repro.answers as a; print(a.environment_key())"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
        return done.stdout

    copied = key(kit)
    assert copied == key(root)
    beside = kit / ".nox" / "tests" / "lib" / "site-packages" / "torch" / "_dynamo" / "repro"
    beside.mkdir(parents=True)
    (beside / "after_aot.py").write_text("CHANGED = True\n")
    assert key(kit) == copied
    (kit / "repro" / "gate_extra.py").write_text("CHANGED = True\n")
    assert key(kit) != copied


def test_the_same_installation_in_another_place_finds_the_same_answers(tmp_path):
    """Each of `nox -s act`'s nights runs its gate job in a workspace, a venv and a runner directory of its own: a
    path under one of those is named by its place, in the key and in the question, so the second night finds the
    first's answer; any other difference (what is installed, where else PATH looks) is still asked afresh."""
    root = Path(__file__).resolve().parents[2]
    marks = tmp_path / "marks"
    code = (
        f"import os, sys; sys.path.insert(0, {str(root)!r}); from repro.answers import run_remembered\n"
        "def asked(path):\n"
        f"    open({str(marks)!r}, 'a').write('ran\\n')\n"
        "    return os.path.basename(path)\n"
        "(outcome,) = run_remembered('t.placed', asked, [os.environ['RUNNER_TEMP'] + '/model'], timeout=60)\n"
        "print(outcome.value)\n"
    )

    def made(place: Path) -> Path:
        """A venv there with a stand-in vLLM installed as a wheel installs it: its RECORD names its files by hash,
        the script in the venv's bin/ too, whose first line names the venv's Python."""
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(place / "venv")], check=True)
        (site,) = (place / "venv" / "lib").glob("python3*/site-packages")
        (site / "vllm").mkdir()
        (site / "vllm" / "__init__.py").write_text("")
        info = site / "vllm-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.0.1\n")
        script = f"#!{place / 'venv' / 'bin' / 'python'}\n"
        (info / "RECORD").write_text(
            f"../../../bin/vllm,sha256={hash(script)},{len(script)}\nvllm/__init__.py,sha256=e3b0,0\n"
        )
        return place

    def ask(place: Path, elsewhere: str = "") -> int:
        """The question asked from the venv there, with the runner's directory there; how many children ran so far."""
        temp = place / "runner-temp"
        paths = [str(place / "venv" / "bin"), str(temp / "setup-python" / "bin"), *filter(None, [elsewhere])]
        env = {
            "PATH": os.pathsep.join([*paths, os.environ["PATH"]]),
            "RUNNER_TEMP": str(temp),
            CACHE_VARIABLE: str(tmp_path / "answers"),
        }
        python = str(place / "venv" / "bin" / "python")
        done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0 and done.stdout == "model\n", done.stderr
        return runs(marks)

    one, two = made(tmp_path / "night-1"), made(tmp_path / "night-2")
    assert ask(one) == 1
    assert ask(two) == 1
    assert ask(two, elsewhere=str(tmp_path / "stand-in-gpu")) == 2
    (site,) = (two / "venv" / "lib").glob("python3*/site-packages")
    (site / "something_else-1.0.dist-info").mkdir()
    assert ask(two) == 3
    record = site / "vllm-0.0.1.dist-info" / "RECORD"
    record.write_text(record.read_text().replace("vllm/__init__.py,sha256=e3b0,0", "vllm/__init__.py,sha256=f00d,1"))
    assert ask(two) == 4  # a file of the package itself changed
