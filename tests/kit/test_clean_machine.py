"""The clean-machine check runs the README's own fresh-machine lines, in order, stopping at the first failure."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import ROOT

from tools import clean_machine


def test_the_commands_are_the_readmes_own():
    commands = clean_machine.readme_commands((ROOT / "README.md").read_text())
    assert commands[0].startswith("python3 -m venv"), "a fresh machine starts from its own python3"
    assert "nox -s wsl_cuda_graph" in commands and "nox -s tests" in commands
    assert not any("#" in command for command in commands), "comments are not commands"


@pytest.mark.parametrize(
    "readme", ["# A kit\n", "## On a fresh machine\n\nNo commands.\n", "## On a fresh machine\n```console\n```\n"]
)
def test_a_readme_without_fresh_machine_commands_is_an_error_that_says_so(readme):
    with pytest.raises(clean_machine.ReadmeError, match="On a fresh machine"):
        clean_machine.readme_commands(readme)


def test_the_script_runs_each_command_in_the_clone_timed_and_stops_at_the_first_failure(tmp_path):
    (tmp_path / "kit").mkdir()
    script = clean_machine.script(["pwd", "echo 'it''s here' > note", "false", "echo never"])
    done = subprocess.run(
        ["bash", "-c", script], env={**os.environ, "HOME": str(tmp_path)}, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert str(tmp_path / "kit") in done.stdout and (tmp_path / "kit" / "note").read_text() == "its here\n"
    assert "[clean machine] $ false" in done.stdout and "never" not in done.stdout
    assert done.stdout.count(" s: ") == 2, "the two commands that finished are timed"
