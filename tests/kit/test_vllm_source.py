"""A vLLM source checkout run as its own vLLM (matrix.commands.vllm_source), the bisection over its commits, and the
gate session of a branch, which ends with what the branch changes against its release (`python -m matrix branch`).

The checkout is made here from the installed release (the one the kit pins): its package's ``__init__`` and
platform modules committed and tagged as the release, then a one-line change to the CUDA kernel gate, with
commits that change nothing the gate reads before and after it. The release's other files come from the
installed wheel, as they would for a maintainer's checkout. Each answer is vLLM's own, asked gate-only in a
fresh process (the same on any machine).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from matrix.__main__ import main
from matrix.commands.vllm_source import describe, installed_release, lay_over, python_path
from matrix.errors import MatrixError
from matrix.text.cli import KIT_ROOT

pytestmark = pytest.mark.needs_vllm

GATE = "vllm/platforms/cuda.py"
# The CUDA gate's kernel floor: raised past the kernel a new-kernel cell presents, so that cell stops pinning.
FLOOR, RAISED = "version < (4, 19, 121)", "version < (99, 0, 0)"


def _git(repo: Path, *args: str) -> str:
    who = ["-c", "user.name=kit", "-c", "user.email=kit@example.invalid", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", "-C", str(repo), *who, *args], check=True, capture_output=True, text=True).stdout


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A checkout whose four commits are: the release (tagged), a note, the gate change, another note."""
    release = installed_release()
    repo = tmp_path_factory.mktemp("checkout") / "vllm"
    for name in ("vllm/__init__.py", *(str(f) for f in release.files if str(f).startswith("vllm/platforms/"))):
        if name.endswith(".py"):
            target = repo / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(Path(str(release.locate_file(name))).read_bytes())
    _git(repo.parent, "init", "-q", str(repo))
    commits = {"release": _commit(repo, f"vLLM {release.version}")}
    _git(repo, "tag", f"v{release.version}")
    (repo / "NOTES.md").write_text("a note the gate never reads\n")
    commits["note"] = _commit(repo, "a note")
    gate = (repo / GATE).read_text()
    assert gate.count(FLOOR) == 1, f"{release.version}'s {GATE} has no kernel floor {FLOOR}: the test needs another"
    (repo / GATE).write_text(gate.replace(FLOOR, RAISED))
    commits["gate"] = _commit(repo, "raise the WSL2 kernel floor")
    (repo / "NOTES.md").write_text("another note\n")
    commits["later"] = _commit(repo, "another note")
    return repo, release.version, commits


def test_a_checkout_is_named_by_its_release_and_commit(history):
    repo, release, commits = history
    tree = describe(repo)
    assert (tree.release, tree.distance, tree.commit, tree.dirty) == (release, 3, commits["later"], False)
    assert tree.label == f"{release}+g{commits['later'][:9]}"
    gate = repo / GATE
    text = gate.read_text()
    try:
        gate.write_text(text + "# not committed\n")
        assert describe(repo).label == f"{release}+g{commits['later'][:9]}.dirty"
    finally:
        gate.write_text(text)
    assert not describe(repo).dirty


def test_what_is_no_tagged_vllm_checkout_is_refused_in_one_line(tmp_path, history):
    with pytest.raises(MatrixError, match="not a vLLM source checkout") as plain:
        describe(tmp_path)
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    with pytest.raises(MatrixError, match="not a git checkout") as untracked:
        describe(tmp_path)
    _git(tmp_path, "init", "-q")
    _commit(tmp_path, "no tag")
    with pytest.raises(MatrixError, match="git fetch --tags") as untagged:
        describe(tmp_path)
    assert all("\n" not in str(e.value) for e in (plain, untracked, untagged))


def test_the_layer_is_the_vllm_a_process_sees_with_its_own_version_and_source(history, tmp_path):
    repo, release, commits = history
    layer = lay_over(describe(repo), tmp_path / "layer")
    assert layer.release == release and layer.from_checkout == len(list((repo / "vllm").rglob("*.py")))
    seen = subprocess.run(
        [sys.executable, "-c", "import json; from matrix.host.facts import vllm_info; print(json.dumps(vllm_info()))"],
        env={**os.environ, "PYTHONPATH": python_path(layer.root, str(KIT_ROOT))},
        capture_output=True,
        text=True,
        check=True,
    )
    info = json.loads(seen.stdout)
    assert info["version"] == f"{release}+g{commits['later'][:9]}"
    assert (info["commit"], info["source"]) == (f"g{commits['later'][:9]}", repo.resolve().as_uri())
    with pytest.raises(MatrixError, match="not a layer the kit made"):
        lay_over(describe(repo), repo)  # never removes a directory it did not make


def test_bisect_finds_the_commit_that_changed_the_gate_and_says_what_changed(history, capsys):
    repo, release, commits = history
    args = ["bisect", str(repo), "--good", f"v{release}", "--bad", commits["later"], "--cell", "cuda-wsl2new-v1-graph"]
    assert main([*args, "--key", "pin", "--pin-env", "1"]) == 0
    out = capsys.readouterr().out
    assert f"first changed at {commits['gate']} (raise the WSL2 kernel floor)" in out
    # The release pins with the opt-in on a new kernel; the raised floor stops it.
    assert f"before ({release}+g{commits['release'][:9]}) -> after ({release}+g{commits['gate'][:9]})" in out
    # Against the release's expectation (pinned with the opt-in on a new kernel), as a branch's diff words it.
    assert "    pin, =1: on -> off  regressed" in out


def test_bisect_between_commits_with_the_same_answer_says_there_is_nothing_to_find(history, capsys):
    repo, release, commits = history
    args = ["bisect", str(repo), "--good", f"v{release}", "--bad", commits["note"], "--cell", "cuda-wsl2new-v1-graph"]
    assert main([*args, "--key", "pin", "--pin-env", "1"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("there is no change to find")


# --- a branch's gate session: what it changes against its release -----------------------------------------------

ROCM_GATE, CUDA_GATE = "vllm/platforms/rocm.py", GATE
# ROCm's WSL2 pin gate after its kernel check: pinned whatever the opt-in says (#49861) ...
ROCM_PINS = "                return False\n\n        return True\n"
# ... and, fixed, the opt-in honoured as CUDA's gate honours it.
ROCM_HONOURS = (
    "                return False\n            import vllm.envs as envs\n\n"
    "            return envs.VLLM_WSL2_ENABLE_PIN_MEMORY\n\n        return True\n"
)
# CUDA's gate on a new kernel, and broken: never pinned, the opt-in set or not.
CUDA_HONOURS, CUDA_NEVER = "            return envs.VLLM_WSL2_ENABLE_PIN_MEMORY\n", "            return False\n"


class RunningSession:
    """The session object noxfile gives a session, running every command for real in the tests' Python, with
    nothing installed: that Python has the kit and the release a checkout is laid over already, so nox's
    installer is the one step that does not run."""

    name = "gate"
    venv_backend = "uv"

    def __init__(self, tmp: Path, posargs: list[str]) -> None:
        self.tmp, self.posargs = tmp, posargs
        self.env: dict[str, str | None] = {}
        self.virtualenv = SimpleNamespace(location=str(tmp / "venv"))
        self.last: subprocess.CompletedProcess[str] | None = None

    def install(self, *args: str, **kwargs: object) -> None:
        pass

    def run(self, *args: str, env=None, success_codes=(0,), **kwargs: object) -> str:
        command = [sys.executable if args[0] == "python" else args[0], *args[1:]]
        # As nox runs it: a variable given as None is unset.
        merged = {**os.environ, **self.env, **(env or {})}
        environ = {name: value for name, value in merged.items() if value is not None}
        self.last = subprocess.run(command, cwd=KIT_ROOT, env=environ, capture_output=True, text=True, check=False)
        if self.last.returncode not in success_codes:
            raise subprocess.CalledProcessError(self.last.returncode, command, self.last.stdout, self.last.stderr)
        return self.last.stdout

    def create_tmp(self) -> str:
        return str(self.tmp)

    def log(self, *args: object) -> None:
        pass

    def error(self, message: str) -> None:
        raise AssertionError(message)


def _branch(history, tmp_path: Path, path: str, before: str, after: str, subject: str) -> Path:
    """A clone of the tagged release with one commit on top: ``path``'s ``before`` made ``after``."""
    repo, release, _ = history
    branch = tmp_path / "branch"
    subprocess.run(
        ["git", "-c", "advice.detachedHead=false", "clone", "-q", "--branch", f"v{release}", str(repo), str(branch)],
        check=True,
    )
    text = (branch / path).read_text()
    assert text.count(before) == 1, f"{release}'s {path} has no single {before!r}: the test needs another"
    (branch / path).write_text(text.replace(before, after))
    _commit(branch, subject)
    return branch


def _gate(branch: Path, cells: str, tmp_path: Path, monkeypatch) -> tuple[RunningSession, float]:
    """``nox -s gate -- --vllm <branch> --cells <cells>`` as noxfile runs it, results under ``tmp_path``."""
    import noxfile

    monkeypatch.setattr(noxfile, "RESULTS", tmp_path / "results")
    (tmp_path / "session").mkdir()
    session = RunningSession(tmp_path / "session", ["--vllm", str(branch), "--cells", cells])
    started = time.perf_counter()
    try:
        noxfile.gate(session)
    finally:
        print(f"the gate of {cells} took {time.perf_counter() - started:.0f} s")
    return session, time.perf_counter() - started


def _line(table: str, *cells: str) -> bool:
    """Whether a line of ``table`` reads ``cells``, column after column (columns are two spaces apart or more)."""
    return any(re.split(r"\s{2,}", line.strip()) == list(cells) for line in table.splitlines())


# The session reads the machine for its plan, as every cell session does.
@pytest.mark.reads_host
def test_the_gate_of_a_branch_that_fixes_a_known_issue_ends_with_its_cells_fixed(history, tmp_path, monkeypatch):
    branch = _branch(history, tmp_path, ROCM_GATE, ROCM_PINS, ROCM_HONOURS, "ROCm: honour the opt-in on WSL2")
    session, _ = _gate(branch, "rocm-wsl2new-*", tmp_path, monkeypatch)
    assert session.last is not None and session.last.args[1:4] == ["-m", "matrix", "branch"]
    table = session.last.stdout
    # The release pins on a new kernel whatever the opt-in says (#49861); the branch pins only when asked.
    assert _line(table, "rocm-wsl2new-*-*", "pin, unset (and under 4 kernel-edge unames)", "on", "off", "fixed")
    assert _line(table, "rocm-wsl2new-*-*", "pinned memory", "works", "slow", "fixed")
    assert _line(table, "rocm-wsl2new-v2-*", "v2_buffer, unset", "UvaBuffer", "NonUvaBuffer", "fixed")
    assert re.search(r"^58 fixed, 0 regressed, [0-9]+ unchanged: ", table, re.M), table
    assert table.splitlines()[-1] == "fixed: the known issue https://github.com/vllm-project/vllm/issues/49861"


@pytest.mark.reads_host
def test_the_gate_of_a_branch_that_breaks_a_cell_ends_with_it_regressed(history, tmp_path, monkeypatch):
    branch = _branch(history, tmp_path, CUDA_GATE, CUDA_HONOURS, CUDA_NEVER, "CUDA: never pin on WSL2")
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _gate(branch, "cuda-wsl2new-v1-graph", tmp_path, monkeypatch)
    assert failed.value.returncode == 1 and failed.value.cmd[1:4] == ["-m", "matrix", "branch"]
    table = failed.value.output
    assert _line(table, "cuda-wsl2new-v1-graph", "pin, =1 (and under 4 kernel-edge unames)", "on", "off", "regressed")
    # The opt-in no longer gets zero-copy offload, and a CUDA graph cannot capture the pageable copy instead.
    assert _line(table, "cuda-wsl2new-v1-graph", "CPU offload", "needs-opt-in", "broken", "regressed")
    # How many values regress and stay depends on how the cell runs here (gate-only, or emulated beside a GPU).
    assert re.search(r"^0 fixed, [1-9][0-9]* regressed, [0-9]+ unchanged: ", table, re.M), table
    assert "error: vLLM 0.33.0+g" in failed.value.stderr and "regressed against 0.33.0" in failed.value.stderr
