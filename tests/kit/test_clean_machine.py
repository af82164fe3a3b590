"""The clean-machine check runs the README's own fresh-machine lines, in order, stopping at the first failure."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import ROOT

from tools import clean_machine, readme


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


def test_the_main_jobs_table_is_the_readme_example_a_fresh_machine_must_print():
    readme = (ROOT / "README.md").read_text()
    commands = clean_machine.readme_commands(readme)
    shown = clean_machine.shown_examples(readme, commands)
    assert {commands[index]: example.start for index, example in shown.items()} == {"nox -s wsl_cuda_graph": "cell "}


README = """## On a fresh machine

```console
$ cd .
$ python3 -c "print('cell  pin'); print('one  on'); print(); print('2 s later')"
```

<!-- readme: run, from "cell " -->
```console
$ python3 -c "print('cell  pin'); print('one  on'); print(); print('2 s later')"
cell  pin
one  on
```
"""


def _fresh_machine(tmp_path, readme: str) -> list[str]:
    """The script of ``readme``'s fresh-machine lines run with ``tmp_path`` as HOME, then what ``stale`` says."""
    (tmp_path / "kit").mkdir()
    commands = clean_machine.readme_commands(readme)
    shown = clean_machine.shown_examples(readme, commands)
    done = subprocess.run(
        ["bash", "-c", clean_machine.script(commands, shown)],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "one  on" in done.stdout, "what the example's command prints is still shown as it runs"
    return clean_machine.stale(shown, tmp_path)


def test_a_fresh_machine_that_prints_the_readmes_example_passes(tmp_path):
    assert _fresh_machine(tmp_path, README) == []


def test_a_fresh_machine_that_prints_otherwise_is_one_line_naming_the_example(tmp_path):
    assert _fresh_machine(tmp_path, README.replace("one  on\n```", "one  off\n```")) == [
        "README.md's example of `python3 -c \"print('cell  pin'); print('one  on'); print(); print('2 s later')\"` "
        "is not what a fresh machine printed (above): run `nox -s readme` and commit its change, or mend what a "
        "first run prints"
    ]
    tmp = tmp_path / "again"
    tmp.mkdir()
    [problem] = _fresh_machine(tmp, README.replace('from "cell "', 'from "row "'))
    assert problem.endswith("printed no line starting with 'row '")


def test_every_slow_example_is_a_fresh_machine_line_so_clean_machine_checks_it():
    # .ci/run checks the documents' examples with --quick, which leaves the slow ones to clean_machine.
    commands = clean_machine.readme_commands((ROOT / "README.md").read_text())
    slow = {e.command for path in readme.documents() for e in readme.examples(path.read_text()) if e.slow}
    assert slow and slow <= set(commands), slow - set(commands)
