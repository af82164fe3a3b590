"""The history: the key of a release's results (matrix.store.history_key), the cache and committed archive that keep
them (history_archive), and the run that reuses or computes them (history)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

from matrix.case_facts import CaseFacts, spelled
from matrix.errors import MatrixError
from matrix.store import history_archive
from matrix.store.groups import GROUP_TESTS
from matrix.store.history import Outcome, recheck_choice, run_history
from matrix.store.history_key import KeyInputs, key_files, key_inputs
from matrix.text.progress import progress

COMMANDS = ("env", "plan", "split")
TESTS = GROUP_TESTS["gate"]


def inputs_of(root: Path, version: str = "0.33.0", lock: str = "torch==2.13.0\n") -> KeyInputs:
    return key_inputs(
        root,
        version,
        lock=lock,
        torch="torch==2.13.0",
        python="3.11.7",
        executions=[("cuda-linux-v1-graph", "gate-only")],
        recipe="def _test_cells(): ...",
        files=key_files(root, TESTS, COMMANDS),
        commands=COMMANDS,
    )


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A copy of the kit's code and data, to change files in."""
    root = tmp_path_factory.mktemp("kit")
    ignore = shutil.ignore_patterns("__pycache__")
    for tree in ("matrix", "repro", "tests/cell"):
        shutil.copytree(ROOT / tree, root / tree, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, root / name)
    return root


@contextlib.contextmanager
def appended(path: Path, text: str = "\n# changed\n") -> Iterator[None]:
    """``path`` with ``text`` added, until the block ends."""
    before = path.read_bytes()
    path.write_bytes(before + text.encode())
    try:
        yield
    finally:
        path.write_bytes(before)


def test_the_key_files_are_the_tests_what_they_import_of_the_kit_and_the_data_it_reads(kit):
    files = key_files(kit, TESTS, COMMANDS)
    for needed in (*TESTS, "tests/cell/conftest.py", "matrix/judge/expectations.toml", "repro/tinymodel.py"):
        assert needed in files
    for unrelated in ("matrix/report/render_html.py", "matrix/report/templates/page.js", "README.md"):
        assert unrelated not in files
    assert not any(name.startswith("tests/kit/") for name in files)


@pytest.mark.parametrize(
    "changed", ["matrix/judge/expectations.toml", "repro/tinymodel.py", "tests/cell/conftest.py", "matrix/envelope.py"]
)
def test_a_changed_kit_file_of_the_run_changes_the_key(kit, changed):
    before = inputs_of(kit).key
    with appended(kit / changed):
        assert inputs_of(kit).key != before
    assert inputs_of(kit).key == before


@pytest.mark.parametrize("unrelated", ["matrix/report/render_html.py", "README.md", "matrix/report/templates/page.css"])
def test_a_file_the_run_never_touches_leaves_the_key(kit, unrelated):
    before = inputs_of(kit).key
    with appended(kit / unrelated):
        assert inputs_of(kit).key == before


def test_of_the_matrix_entry_point_only_the_code_a_run_executes_is_in_the_key(kit):
    """A change to a command the history never runs (the report's), or a comment, leaves the key; a change to a
    command it runs (plan's), or to the parser they share, changes it."""
    main = kit / "matrix" / "__main__.py"
    source = main.read_text()
    before = inputs_of(kit).key

    def key_with(text: str) -> str:
        assert text != source
        main.write_text(text)
        try:
            return inputs_of(kit).key
        finally:
            main.write_text(source)

    report = "def cmd_report(args: argparse.Namespace) -> int:\n"
    plan = "def cmd_plan(args: argparse.Namespace) -> int:\n"
    assert key_with(source.replace(report, report + "    print()\n")) == before
    assert key_with(source.replace("\ndef cmd_plan(", "\n# a comment\ndef cmd_plan(")) == before
    assert key_with(source.replace(plan, plan + "    print()\n")) != before
    assert key_with(source.replace('help="print the terminal table', 'help="print the table')) != before


def test_the_release_and_the_lock_are_in_the_key(kit):
    key = inputs_of(kit).key
    assert inputs_of(kit, version="0.32.0").key != key
    assert inputs_of(kit, lock="torch==2.13.0\ntransformers==5.16.1\n").key != key


# A real run's process, as far as it goes without a release's venv: pytest collects the gate tests of all 24
# cells, and `python -m matrix env`, `plan` and `split` run; it then names every kit file imported or opened.
REAL_RUN = """
import json, os, sys
from pathlib import Path

root = Path(sys.argv[1]).resolve()
tmp = Path(sys.argv[2])
opened = set()


def hook(event, args):
    if event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        opened.add(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(hook)
import pytest

from matrix.__main__ import main

assert pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[3:]]) == 0
assert main(["env", "--out", str(tmp / "env.json")]) == 0
assert main(["plan", "--cells", "all", "--env", str(tmp / "env.json"), "--out", str(tmp / "plan.json")]) == 0
split = ["split", str(tmp / "none.xml"), "--cells", "all", "--plan", str(tmp / "plan.json"), "--env"]
assert main([*split, str(tmp / "env.json"), "--out", str(tmp / "out"), "--crashed-if-missing"]) == 0
used = {m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)} | opened
mine = set()
for name in used:
    path = Path(name).resolve()
    if path.is_file() and root in path.parents and path.suffix != ".pyc" and tmp not in path.parents:
        if not path.relative_to(root).parts[0].startswith("."):
            mine.add(str(path.relative_to(root)))
print(json.dumps(sorted(mine)))
"""


@pytest.mark.reads_host
def test_the_key_files_cover_every_kit_file_a_real_run_imports_or_reads(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", REAL_RUN, str(ROOT), str(tmp_path), *TESTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    used = set(json.loads(done.stdout.splitlines()[-1]))
    assert {"pyproject.toml", "tests/cell/conftest.py", "matrix/junit.py"} <= used  # what the probe sees: reads too
    # `nox -s tests -- --as-host` puts its start-up hook on every process's PYTHONPATH; no history run has it.
    hooked = "present_host" in os.environ.get("PYTHONPATH", "")
    hook = {"repro/bench/present_host/sitecustomize.py"} if hooked else set()
    assert used - set(key_files(ROOT, TESTS, COMMANDS)) - hook == set()


# --- the cache, driven by a stand-in for a release's run ------------------------------------------------


def cell_xml(observed: str, seconds: str, started: str) -> str:
    """A cell's results as `matrix split` writes them: an envelope and one gate case."""
    return (
        '<testsuites><testsuite name="cuda-linux-v1-graph"><properties>'
        f'<property name="vllm_version" value="0.33.0"/><property name="started_at" value="{started}"/>'
        '</properties><testcase classname="tests.cell.test_gate" name="test_gate_value[pin]" time="1.5">'
        f'<properties><property name="observed" value="{observed}"/><property name="gate_seconds" value="{seconds}"/>'
        "</properties></testcase></testsuite></testsuites>"
    )


class Release:
    """A stand-in for one release's run: writes its cell, and counts how often it ran."""

    def __init__(self, observed: str = "True") -> None:
        self.observed, self.runs = observed, []

    def __call__(self, version: str, out: Path) -> None:
        self.runs.append(version)
        started = f"2026-12-0{len(self.runs)}T09:00:00+00:00"  # another time and duration each run: volatile
        (out / "cuda-linux-v1-graph.xml").write_text(cell_xml(self.observed, f"{len(self.runs)}.0", started))
        (out / "cuda-linux-v1-graph.env.json").write_text(json.dumps({"started_at": started}))


def history(tmp_path: Path, compute, versions=("0.32.0", "0.33.0"), **options) -> list[Outcome]:
    releases = [KeyInputs(v, "lock", "torch==2.13.0", "3.11.7", (), "recipe", ()) for v in versions]
    said: list[str] = []
    outcomes = run_history(
        releases,
        compute,
        results=tmp_path / "results",
        cache=tmp_path / "cache",
        scratch=tmp_path / "scratch",
        say=said.append,
        **options,
    )
    # A line as each computation starts; after each release, what was done and how far the history is.
    started = [line for line in said if line.endswith(f" of {len(versions)} releases")]
    ended = [line for line in said if line not in started]
    assert ended[::2] == [o.line() for o in outcomes]
    assert [line.split(" releases in ")[0] for line in ended[1::2]] == [
        f"{i} of {len(versions)}" for i in range(1, len(versions) + 1)
    ]
    copy = {"cache": "its cached copy", "committed": "its committed copy"}
    doing = [
        (i, o, f"recomputing to check {copy[o.source]}" if o.action == "recomputed" else "computing")
        for i, o in enumerate(outcomes, 1)
        if o.action != "reused"
    ]
    assert started == [f"vLLM {o.version}: {d} (key {o.key}), {i} of {len(versions)} releases" for i, o, d in doing]
    for line in started:  # said before its release's outcome
        version = line.split(":")[0]
        assert said.index(line) < next(
            i for i, end in enumerate(said) if end.startswith(f"{version}: ") and end != line
        )
    return outcomes


def test_each_release_is_followed_by_how_far_the_history_is_and_what_is_left(tmp_path):
    history(tmp_path, Release(), versions=("0.32.0",))  # cached from here on
    said: list[str] = []
    releases = [
        KeyInputs(v, "lock", "torch==2.13.0", "3.11.7", (), "recipe", ()) for v in ("0.31.0", "0.32.0", "0.33.0")
    ]
    run_history(
        releases, Release(), results=tmp_path / "r", cache=tmp_path / "cache", scratch=tmp_path / "s", say=said.append
    )
    assert said[0] == f"vLLM 0.31.0: computing (key {releases[0].key}), 1 of 3 releases"
    said = [line for line in said if not line.endswith(" of 3 releases")]
    computed, reused, last = said[1], said[3], said[5]
    # The stand-in's second or so under load is no figure to hold: only the words around the times are.
    left = r"; about \d+ s left \(1 to compute at ~\d+ s each\)"
    assert re.fullmatch(rf"1 of 3 releases in \d+ s{left}", computed), computed
    assert re.fullmatch(rf"2 of 3 releases in \d+ s{left}", reused), reused
    assert last.startswith("3 of 3 releases in ") and "left" not in last
    assert progress(1, 3, 5.0, 0, [5.0]) == "1 of 3 releases in 5 s; the rest are cached"
    assert progress(1, 13, 2.0, 12, []) == "1 of 13 releases in 2 s; 12 still to compute"
    assert progress(2, 13, 190.0, 11, [90.0, 100.0]) == (
        "2 of 13 releases in 3 min 10 s; about 17 min 25 s left (11 to compute at ~95 s each)"
    )


def test_a_second_run_reuses_every_release_and_places_the_same_files(tmp_path):
    release = Release()
    assert [o.action for o in history(tmp_path, release)] == ["computed", "computed"]
    first = (tmp_path / "results" / "0.33.0" / "cuda-linux-v1-graph.xml").read_text()
    (tmp_path / "results" / "0.33.0" / "leftover.xml").write_text("<testsuites/>")
    outcomes = history(tmp_path, release)
    assert [o.action for o in outcomes] == ["reused", "reused"] and release.runs == ["0.32.0", "0.33.0"]
    assert sorted(p.name for p in (tmp_path / "results" / "0.33.0").iterdir()) == [
        "cuda-linux-v1-graph.env.json",
        "cuda-linux-v1-graph.xml",
    ]
    assert (tmp_path / "results" / "0.33.0" / "cuda-linux-v1-graph.xml").read_text() == first
    assert outcomes[0].line().startswith(f"vLLM 0.32.0: reused (key {outcomes[0].key}) in ")


def test_fresh_recomputes_every_release(tmp_path):
    history(tmp_path, Release())
    release = Release()
    assert [o.action for o in history(tmp_path, release, fresh=True)] == ["computed", "computed"]
    assert release.runs == ["0.32.0", "0.33.0"]


def test_a_recheck_that_differs_only_in_timings_passes(tmp_path):
    history(tmp_path, Release())
    (outcome,) = [o for o in history(tmp_path, Release(), recheck=frozenset({"0.33.0"})) if o.version == "0.33.0"]
    assert (outcome.action, outcome.differences) == ("recomputed", ())
    assert "recomputed, same as its cached copy" in outcome.line()


def test_a_recheck_that_differs_names_each_difference_and_keeps_the_cached_copy(tmp_path):
    history(tmp_path, Release())
    outcomes = history(tmp_path, Release(observed="False"), recheck=frozenset({"0.33.0"}))
    assert [o.action for o in outcomes] == ["reused", "recomputed"]
    assert outcomes[1].differences == (
        "cuda-linux-v1-graph.xml: tests.cell.test_gate::test_gate_value[pin]: observed: 'True' -> 'False'",
    )
    assert "DIFFERS" in outcomes[1].line()
    again = Release(observed="False")
    assert [o.action for o in history(tmp_path, again)] == ["reused", "reused"] and again.runs == []
    cached = (tmp_path / "results" / "0.33.0" / "cuda-linux-v1-graph.xml").read_text()
    assert 'value="True"' in cached


def test_a_fresh_clone_reuses_the_committed_results_of_its_own_key_and_publish_keeps_them_current(tmp_path):
    committed = tmp_path / "kit" / "docs" / "evidence" / "history.tar.xz"
    outcomes = history(tmp_path / "a", Release(), committed=committed, record=True)
    assert [o.action for o in outcomes] == ["computed", "computed"]
    archived = history_archive.read_committed(committed)
    assert sorted(archived) == ["0.32.0", "0.33.0"]
    assert sorted(archived["0.33.0"]) == ["cuda-linux-v1-graph.env.json", "cuda-linux-v1-graph.xml", "manifest.json"]
    # Another machine, its user cache empty: the committed results are placed and nothing runs.
    clone = Release()
    outcomes = history(tmp_path / "b", clone, committed=committed)
    assert [o.action for o in outcomes] == ["reused", "reused"] and clone.runs == []
    assert outcomes[0].line().startswith(f"vLLM 0.32.0: reused its committed results (key {outcomes[0].key})")
    placed = tmp_path / "b" / "results" / "0.33.0" / "cuda-linux-v1-graph.xml"
    assert placed.read_text() == (tmp_path / "a" / "results" / "0.33.0" / "cuda-linux-v1-graph.xml").read_text()
    # A recheck compares with the committed copy and leaves the archive byte for byte as it was.
    before = committed.read_bytes()
    rechecked = history(tmp_path / "c", Release(), committed=committed, recheck=frozenset({"0.33.0"}), record=True)
    assert [(o.action, o.differences) for o in rechecked] == [("reused", ()), ("recomputed", ())]
    assert "same as its committed copy" in rechecked[1].line()
    assert committed.read_bytes() == before
    # The same files make the same archive: a publish that changes nothing leaves nothing for git to see.
    history_archive.write_committed(committed, history_archive.read_committed(committed))
    assert committed.read_bytes() == before


def test_committed_results_of_another_key_are_never_used_and_only_publish_replaces_them(tmp_path):
    committed = tmp_path / "history.tar.xz"
    history(tmp_path / "a", Release(), committed=committed, record=True)
    stale = committed.read_bytes()
    other = [KeyInputs(v, "another lock", "torch==2.13.0", "3.11.7", (), "recipe", ()) for v in ("0.33.0",)]

    def run(release: Release, record: bool) -> Outcome:
        (outcome,) = run_history(
            other,
            release,
            results=tmp_path / "r",
            cache=tmp_path / "c",
            scratch=tmp_path / "s",
            committed=committed,
            record=record,
            say=lambda line: None,
        )
        return outcome

    history_run = Release(observed="False")
    assert run(history_run, record=False).action == "computed" and history_run.runs == ["0.33.0"]
    assert committed.read_bytes() == stale
    publish_run = Release(observed="False")
    outcome = run(publish_run, record=True)  # reused from the user cache, and committed under its key
    assert outcome.action == "reused" and publish_run.runs == []
    archived = history_archive.read_committed(committed)
    assert json.loads(archived["0.33.0"]["manifest.json"])["key"] == outcome.key
    assert b'value="False"' in archived["0.33.0"]["cuda-linux-v1-graph.xml"]
    assert json.loads(archived["0.32.0"]["manifest.json"])["key"] != outcome.key  # not run here: kept as it was
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(history_archive.PARTIAL_PREFIX)] == []


@pytest.mark.parametrize("member", ["../escape", "0.33.0/../../x", "0.33.0/sub/file", "/abs/file"])
def test_an_archive_member_that_is_no_releases_file_is_refused_in_one_line(tmp_path, member):
    archive = tmp_path / "history.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo(member)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(MatrixError, match="which is no release's file"):
        history_archive.read_committed(archive)


def test_a_run_cut_short_stores_nothing_and_a_damaged_entry_is_never_used(tmp_path):
    def cut_short(version: str, out: Path) -> None:
        (out / "cuda-linux-v1-graph.xml").write_text("<testsuites>")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        history(tmp_path, cut_short, versions=("0.33.0",))
    assert not (tmp_path / "cache" / "0.33.0").exists() or not any((tmp_path / "cache" / "0.33.0").iterdir())
    (outcome,) = history(tmp_path, Release(), versions=("0.33.0",))
    assert outcome.action == "computed"
    entry = tmp_path / "cache" / "0.33.0" / outcome.key
    (entry / "cuda-linux-v1-graph.xml").write_text("<testsuites>")  # changed after it was stored: not whole
    # A half-copied entry left by something else, under the partial prefix: never read as an entry.
    shutil.copytree(entry, entry.parent / f"{history_archive.PARTIAL_PREFIX}x")
    release = Release()
    (outcome,) = history(tmp_path, release, versions=("0.33.0",))
    assert outcome.action == "computed" and release.runs == ["0.33.0"]
    assert history_archive.cached_entry(entry) == entry


def _one_failed_case(out: Path, facts: CaseFacts, message: str) -> None:
    props = "".join(f'<property name="{n}" value="{v}"/>' for n, v in facts.to_properties().items())
    (out / "cuda-linux-v1-graph.xml").write_text(
        '<testsuites><testsuite name="cuda-linux-v1-graph"><testcase classname="c" name="n">'
        f'<properties>{props}</properties><failure message="{message}"/></testcase></testsuite></testsuites>'
    )


def test_a_release_whose_vllm_child_timed_out_is_placed_but_never_stored(tmp_path):
    def busy_machine(version: str, out: Path) -> None:
        _one_failed_case(out, CaseFacts(timed_out=spelled(True)), "no answer from vLLM under this host")

    (outcome,) = history(tmp_path, busy_machine, versions=("0.33.0",))
    assert outcome.action == "computed, not stored: a vLLM child timed out"
    assert (tmp_path / "results" / "0.33.0" / "cuda-linux-v1-graph.xml").is_file()
    assert history_archive.cached_entry(tmp_path / "cache" / "0.33.0" / outcome.key) is None


def test_a_timeout_is_the_cases_stated_fact_never_a_word_in_its_message(tmp_path):
    """vLLM's own message may say "(timeout)" (a failure of vLLM's, kept like any other): only the fact the case
    states makes a run the machine's load."""

    def vllm_says_timeout(version: str, out: Path) -> None:
        _one_failed_case(out, CaseFacts(cell="cuda-linux-v1-graph"), "vLLM raised: (timeout) in its own code")

    (outcome,) = history(tmp_path, vllm_says_timeout, versions=("0.33.0",))
    assert outcome.action == "computed"
    assert history_archive.cached_entry(tmp_path / "cache" / "0.33.0" / outcome.key) is not None


def test_recheck_auto_is_the_newest_and_one_other_picked_by_the_commit():
    versions = ("0.30.0", "0.31.0", "0.32.0", "0.33.0")
    picks = {recheck_choice(versions, f"{n:040x}") for n in range(6)}
    assert all(len(p) == 2 and "0.33.0" in p for p in picks) and len(picks) == 3
    assert recheck_choice(versions, "1" * 40) == recheck_choice(versions, "1" * 40)
    assert recheck_choice(("0.33.0",), "1" * 40) == {"0.33.0"}


def test_the_cache_is_named_by_its_variable_else_under_the_user_cache(tmp_path):
    assert history_archive.cache_dir({"WSLPIN_HISTORY_CACHE": str(tmp_path)}) == tmp_path
    expected = tmp_path / "wslpin-kit" / "history"
    assert history_archive.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == expected
    assert history_archive.cache_dir({}) == Path.home() / ".cache" / "wslpin-kit" / "history"


def test_the_history_reads_its_own_files_without_the_safe_parser(tmp_path):
    """The noxfile runs the history in nox's own Python, before any venv (and its defusedxml) exists."""
    _one_failed_case(tmp_path, CaseFacts(timed_out=spelled(True)), "no answer")
    code = (
        "import sys; sys.modules['defusedxml'] = None\n"
        "from pathlib import Path\n"
        "from matrix.store.history import normalised, timed_out\n"
        f"print(timed_out(Path({str(tmp_path)!r})), len(normalised(Path({str(tmp_path)!r}))))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, "True 1\n"), done.stderr
