"""``python -m matrix bisect``: the first vLLM commit where a cell's gate answer changed.

Each commit is asked as a source tree is (``matrix.commands.vllm_source``): its files laid over this Python's installed
vLLM release, then the gate asked in a fresh process, gate-only (``python -m repro gate --gate-only``: the
cell's host presented, its GPU stubbed), so that an answer is vLLM's code alone and the same on any machine.
``git bisect`` walks the commits in a private clone: the checkout a maintainer works in, and any bisect of
their own, are never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from matrix.cells import Cell
from matrix.commands.vllm_source import describe, lay_over, python_path
from matrix.errors import MatrixError
from matrix.judge.expectations import GATE_KEYS, expected_values, load_rules
from matrix.report.branch import Change, Item, change
from matrix.report.render_branch import item_words, value_words
from matrix.report.status import decided
from matrix.text.cli import KIT_ROOT
from matrix.variables import GATE_PIN_VALUES

# A gate answer, as compared: pin_env -> gate key -> the value, or the last line of what the probe raised.
Answer = Mapping[str, Mapping[str, str]]
_FIRST_BAD = "is the first bad commit"


@dataclass(frozen=True)
class Question:
    """What is asked of each commit: one cell's gate answer, all of its keys or one, for each pin_env or one."""

    cell: Cell
    keys: tuple[str, ...] = tuple(GATE_KEYS)
    pin_envs: tuple[str, ...] = GATE_PIN_VALUES
    timeout: float = 300.0


@dataclass(frozen=True)
class Step:
    commit: str
    label: str  # the tree's version, as results would name it
    answer: Answer


@dataclass(frozen=True)
class Bisection:
    question: Question
    good: Step  # the answer before: the first ref's
    first: Step  # the first commit whose answer differs from it
    subject: str  # that commit's subject line
    steps: tuple[Step, ...]  # every commit asked, in order


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise MatrixError(f"git {' '.join(args)} in {repo} failed: {said[-1] if said else done.returncode}")
    return done.stdout


def _commit(repo: Path, ref: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except MatrixError:
        raise MatrixError(f"{ref!r} is not a commit of {repo}: give a tag, branch or hash it has") from None


def _values(row: Mapping, keys: tuple[str, ...]) -> dict[str, str]:
    if row.get("status") != "ok":
        detail = str(row.get("detail") or row.get("status")).strip().splitlines()
        return dict.fromkeys(keys, f"not answered: {detail[-1] if detail else row.get('status')}")
    answer = row.get("answer") or {}
    if not answer.get("imports"):
        failure = str(answer.get("import_error", "")).strip().splitlines()
        return dict.fromkeys(keys, f"import failed: {failure[-1] if failure else '?'}")
    errors = answer.get("errors") or {}
    values = {}
    for key in keys:
        if key in errors:
            values[key] = f"raised: {str(errors[key]).strip().splitlines()[-1]}"
        else:
            values[key] = str(answer.get(key, "-"))
    return values


def ask(layer: Path, question: Question) -> Answer:
    """The gate's answer for ``question`` from the vLLM laid out in ``layer``, in a process of its own."""
    command = [sys.executable, "-m", "repro", "gate", "--gate-only", "--json", "--cells", question.cell.id]
    if len(question.pin_envs) == 1:
        command += ["--pin-env", question.pin_envs[0]]
    env = {**os.environ, "PYTHONPATH": python_path(layer, python_path(KIT_ROOT, os.environ.get("PYTHONPATH")))}
    done = subprocess.run(
        [*command, "--timeout", str(question.timeout)], capture_output=True, text=True, env=env, cwd=KIT_ROOT
    )
    try:
        rows = json.loads(done.stdout)
    except ValueError:
        raise MatrixError(f"the gate did not answer for {layer}: {done.stderr.strip()[-500:]}") from None
    return {row["pin_env"]: _values(row, question.keys) for row in rows if row["pin_env"] in question.pin_envs}


def _ask_commit(clone: Path, work: Path, question: Question) -> Step:
    tree = describe(clone)
    layer = lay_over(tree, work / "layer")
    return Step(tree.commit, tree.label, ask(layer.root, question))


def bisect(
    repo: Path, good: str, bad: str, question: Question, say: Callable[[str], None] = lambda _: None
) -> Bisection:
    """The first commit between ``good`` and ``bad`` of ``repo`` whose answer to ``question`` is not ``good``'s."""
    try:
        _git(repo, "rev-parse", "--git-dir")
    except MatrixError:
        raise MatrixError(f"{repo} is not a git checkout: give the directory vLLM was cloned into") from None
    good_commit, bad_commit = _commit(repo, good), _commit(repo, bad)
    with tempfile.TemporaryDirectory(prefix="wslpin-bisect-") as scratch:
        work = Path(scratch)
        clone = work / "vllm"
        # --shared: the clone borrows the repository's objects, so it costs nothing however large vLLM's history.
        _git(repo, "clone", "--quiet", "--shared", "--no-checkout", str(repo.resolve()), str(clone))
        asked: dict[str, Step] = {}

        def at(commit: str) -> Step:
            _git(clone, "checkout", "--quiet", "--detach", commit)
            try:
                step = _ask_commit(clone, work, question)
            except MatrixError as exc:
                raise MatrixError(f"at {commit[:12]}: {exc}") from None
            asked[commit] = step
            if asked[good_commit] is not step:
                same = step.answer == asked[good_commit].answer
                say(f"{commit[:12]} {step.label}: {'the same as' if same else 'differs from'} {good}'s")
            return step

        before = at(good_commit)
        say(f"{good_commit[:12]} {before.label}: {_render_answer(before.answer)}")
        output = _git(clone, "bisect", "start", bad_commit, good_commit)
        while _FIRST_BAD not in output:
            head = _git(clone, "rev-parse", "HEAD").strip()
            output = _git(clone, "bisect", "good" if at(head).answer == before.answer else "bad")
        first = output.split()[0]
        # git takes the bad end's answer as changed without asking: asked now, the one commit it may not have.
        after = asked[first] if first in asked else at(first)
        if after.answer == before.answer:
            raise MatrixError(
                f"{question.cell}'s gate answer is the same at {good} and {bad}: there is no change to find"
            )
        subject = _git(clone, "log", "-1", "--format=%s", first).strip()
    return Bisection(question, before, after, subject, tuple(asked.values()))


def _render_answer(answer: Answer) -> str:
    return "; ".join(
        f"pin_env={pin}: " + ", ".join(f"{k}={v}" for k, v in values.items()) for pin, values in answer.items()
    )


def _change(cell: Cell, vllm: str, key: str, pin_env: str, before: str, after: str) -> Change:
    """What the expectations make of a value's move, as a branch's diff words it (matrix.report.branch)."""
    expected = expected_values(load_rules(), cell, vllm, pin_env).get(key)
    if expected is None:
        return Change.UNCHANGED
    was, now = (decided(value, expected.value) == expected.value for value in (before, after))
    return change(was, now, not was, not now)


def render(result: Bisection) -> str:
    """The first changing commit and what changed, each value fixed, regressed or unchanged, for a terminal."""
    cell = result.question.cell
    lines = [
        f"{cell}: the gate answer first changed at {result.first.commit} ({result.subject})",
        f"  before ({result.good.label}) -> after ({result.first.label}):",
    ]
    unchanged = 0
    for pin, values in result.first.answer.items():
        for key, value in values.items():
            was = result.good.answer.get(pin, {}).get(key, "-")
            if was == value:
                unchanged += 1
                continue
            moved = _change(cell, result.first.label, key, pin, was, value)
            words = f"{item_words(Item(key=key, pin_env=pin))}: {value_words(was)} -> {value_words(value)}"
            lines.append(f"    {words}  {moved}")
    if unchanged:
        lines.append(f"    {unchanged} other value(s) unchanged")
    lines.append(f"{len(result.steps)} commits asked, each laid over this Python's vLLM release, gate-only")
    return "\n".join(lines)
