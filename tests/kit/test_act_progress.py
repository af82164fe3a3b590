"""What `nox -s act` says as its nights go: tests/act/night.py's ``Nights``, here with a stand-in for act.

The real nights run under `nox -s act` (minutes each, nektos/act installed); here a stand-in prints act's ``--json``
log, so that the lines a night says (as it starts, as each of its jobs ends, as it ends) are held by the kit's suite.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import ROOT


@pytest.fixture
def night(monkeypatch) -> ModuleType:
    """tests/act/night.py, imported as tests/act's own modules import it."""
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "act"))
    return importlib.import_module("night")


def stand_in_act(where: Path, told: Path, after_plan: str) -> Path:
    """An ``act`` that logs three jobs as act's ``--json`` does; after the first it waits until ``told`` exists (the
    night said that job's end while act still ran), then runs ``after_plan``."""
    act = where / "act"
    act.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys, time\n"
        "def log(job, kind='', **entry):\n"
        "    print(json.dumps({'jobID': job, 'matrix': {'name': kind} if kind else {}, **entry}), flush=True)\n"
        "log('plan', msg='planning the runner jobs', raw_output=True)\n"
        "log('plan', jobResult='success')\n"
        "for _ in range(1200):\n"
        f"    if pathlib.Path({str(told)!r}).exists():\n"
        "        break\n"
        "    time.sleep(0.05)\n"
        "else:\n"
        "    sys.exit(3)  # never told: the night said nothing while act ran\n"
        f"{after_plan}\n"
    )
    act.chmod(0o755)
    return act


THE_REST = """\
log('cell', 'cuda-wsl2new', jobResult='success')
print('a line act prints outside its JSON log')
log('report', jobResult='failure')
sys.exit(1)"""


def test_a_night_says_when_it_starts_each_job_as_it_ends_and_how_it_ended(night, tmp_path):
    told = tmp_path / "told"
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("night 1: job plan: "):
            told.touch()

    nights = night.Nights.start(str(stand_in_act(tmp_path, told, THE_REST)), tmp_path / "nights", say=say)
    done = nights.run("workflow_dispatch", "cuda-wsl2new", cells="cuda-wsl2new-v2-graph")
    assert done.returncode == 1  # not 3: the plan's end was said before act went on
    assert said[0] == "night 1: workflow_dispatch, runner kinds cuda-wsl2new, cells cuda-wsl2new-v2-graph: started"
    assert [line.split(" at +")[0] for line in said[1:4]] == [
        "night 1: job plan: success",
        "night 1: job cell cuda-wsl2new: success",
        "night 1: job report: failure",
    ]
    assert said[4].startswith("night 1: ended in ")
    assert said[4].endswith(", act exit 1 (plan success, cell cuda-wsl2new success, report failure)")
    assert len(said) == 5
    # The night's log is read and kept as before: the tests of tests/act read it.
    assert done.results() == {"plan": "success", "cell cuda-wsl2new": "success", "report": "failure"}
    assert done.printed("plan") == "planning the runner jobs"
    assert "a line act prints outside" in (tmp_path / "nights" / "night-1" / "act.jsonl").read_text()

    said.clear()
    nights.run("schedule", "none")
    assert said[0] == "night 2: schedule, runner kinds none: started"


def test_a_night_past_its_time_is_stopped_and_says_so_by_raising(night, tmp_path, monkeypatch):
    told = tmp_path / "told"
    monkeypatch.setattr(night, "NIGHT_TIMEOUT_S", 3)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        told.touch()

    nights = night.Nights.start(str(stand_in_act(tmp_path, told, "time.sleep(600)")), tmp_path / "nights", say=say)
    with pytest.raises(subprocess.TimeoutExpired):
        nights.run("schedule", "none")
    assert [line.split(" at +")[0] for line in said] == [
        "night 1: schedule, runner kinds none: started",
        "night 1: job plan: success",
    ]
