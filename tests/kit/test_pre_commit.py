"""The pre-commit hooks are `nox -s lint`: each tool the session pins at the same version, each command it runs."""

from __future__ import annotations

import ast
import re
import tomllib

import yaml
from conftest import ROOT


def _lint_calls(method: str) -> list[list[ast.expr]]:
    """The arguments of each ``session.<method>(...)`` call in the noxfile's lint session."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    (lint,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "lint"]
    return [
        call.args
        for call in ast.walk(lint)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == method
    ]


def _hooks() -> list[dict]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_each_tool_the_lint_session_pins_is_hooked_at_that_version():
    pinned = {
        arg.value
        for args in _lint_calls("install")
        for arg in args
        if isinstance(arg, ast.Constant) and "==" in arg.value
    }
    assert {"ruff==0.17.6", "mypy==2.4.1"} <= pinned  # the premise: the session is read
    hooked = {dependency for hook in _hooks() for dependency in hook.get("additional_dependencies", [])}
    assert pinned - hooked == set()


def test_mypy_checks_against_the_kits_dependencies_as_the_lint_session_installs_them():
    installed = [arg.value for args in _lint_calls("install") for arg in args if isinstance(arg, ast.Constant)]
    (editable,) = [requirement for requirement in installed if requirement.startswith(".[")]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = re.fullmatch(r"\.\[(.*)\]", editable)[1].split(",")
    wanted = set(project["dependencies"])
    while extras:
        for dependency in project["optional-dependencies"][extras.pop()]:
            # An extra naming the kit's own (vllm-wslpin-kit[core]) brings that extra's dependencies.
            own = re.fullmatch(rf"{project['name']}\[(.*)\]", dependency)
            extras += own[1].split(",") if own else []
            wanted |= set() if own else {dependency}
    (mypy,) = [hook for hook in _hooks() if hook["id"] == "mypy"]
    assert wanted - set(mypy["additional_dependencies"]) == set()


def test_each_command_the_lint_session_runs_is_a_hooks_entry():
    entries = [hook["entry"] for hook in _hooks()]
    for args in _lint_calls("run"):
        # The command and its options; the files it is given (".", the workflows) are pre-commit's to pass.
        words = [arg.value for arg in args if isinstance(arg, ast.Constant) and arg.value != "."]
        command = " ".join(words)
        assert any(command in entry for entry in entries), f"`nox -s lint` runs `{command}`: no hook does"
