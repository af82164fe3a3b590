"""The environment record: its one loader checks every field the kit reads before any is read, and the commands
that take a record from another machine (``plan --env``, ``split --env``, ``import-run``) refuse a damaged one in
one line, writing nothing."""

from __future__ import annotations

import copy
import json
import re

import pytest
from conftest import run_module

from matrix.cells import Host
from matrix.commands.offline import RUN_SCHEMA
from matrix.errors import MatrixError
from matrix.host import facts
from matrix.host.record import FIELDS, EnvironmentRecord

# One of these is of a kind each field is not (no field the kit reads is a number).
WRONG = (7, "text", ["a list"], {"a": "mapping"})


@pytest.fixture(scope="module")
def record() -> dict:
    """This machine's record as `python -m matrix env` collects it, with a GPU and both packages named, so that
    every field the loader checks is present."""
    written = json.loads(EnvironmentRecord(facts.collect_environment()).to_json())
    written["gpu"]["devices"] = [{"name": "NVIDIA H200", "driver": "580.95"}]
    written["packages"] = {
        "torch": {"version": "2.13.0", "cuda": "13.0", "hip": None},
        "vllm": {"version": "0.33.0", "commit": "abc1234", "requires_torch": "==2.13.0"},
        "torch_mismatch": False,
    }
    return written


def _set(record: dict, path: tuple, value: object) -> dict:
    damaged = copy.deepcopy(record)
    where = damaged
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return damaged


@pytest.mark.reads_host
def test_the_record_env_writes_reads_back_through_its_properties(record):
    read = EnvironmentRecord.from_json(record, "env.json", "")
    assert (read.vllm_release, read.vllm_commit, read.vllm_requires_torch) == ("0.33.0", "abc1234", "==2.13.0")
    assert (read.torch_version, read.torch_build, read.torch_mismatch) == ("2.13.0", "cuda 13.0", False)
    assert (read.gpu_name, read.gpu_driver) == ("NVIDIA H200", "580.95")
    assert read.detected.gpu == "NVIDIA H200" and read.detected.host is Host(record["host"]["detected"])
    assert read.env_hash == record["env_hash"] and read.node == record["uname"]["node"]
    assert json.loads(read.to_json()) == record


@pytest.mark.reads_host
@pytest.mark.parametrize("path", [path for path, _ in FIELDS], ids=lambda path: ".".join(map(str, path)))
def test_every_field_the_kit_reads_is_checked_before_any_is_read(record, path):
    kinds = dict(FIELDS)[path]
    value = next(v for v in WRONG if not isinstance(v, kinds))
    where = ".".join(map(str, path))
    with pytest.raises(MatrixError) as refused:
        EnvironmentRecord.from_json(_set(record, path, value), "env.json", "write it again")
    line = str(refused.value)
    assert line == (
        f"env.json is not an environment record as `python -m matrix env` writes it "
        f"(its {where} is {type(value).__name__}): write it again"
    )


@pytest.mark.reads_host
@pytest.mark.parametrize(
    "path, value, says",
    [
        (("kernel", "version"), [5, 15], "its kernel.version is not three numbers"),
        (("kernel", "version"), [5, 15, -1], "its kernel.version is not three numbers"),
        (("kernel", "version"), [5, 15, True], "its kernel.version is not three numbers"),
        (("host", "detected"), "wsl3", "its host names no host and stack of the matrix"),
        (("host", "detected"), None, "its host names no host and stack of the matrix"),
        (("host", "stack"), "metal", "its host names no host and stack of the matrix"),
        (("schema",), "wslpin-kit.env/2", "is not an environment record (schema wslpin-kit.env/1)"),
    ],
)
def test_values_the_plan_is_made_from_are_checked_too(record, path, value, says):
    with pytest.raises(MatrixError, match=re.escape(says)):
        EnvironmentRecord.from_json(_set(record, path, value), "env.json", "")


@pytest.mark.reads_host
def test_plan_and_import_run_refuse_a_damaged_record_in_one_line_and_write_nothing(record, tmp_path):
    # A record from another machine whose GPU list is a string: before, import-run gave an AttributeError's
    # traceback at the first envelope, after writing the results directory.
    damaged = tmp_path / "run" / "env.json"
    damaged.parent.mkdir()
    damaged.write_text(json.dumps(_set(record, ("gpu", "devices"), "NVIDIA H200")))
    said = "is not an environment record as `python -m matrix env` writes it (its gpu.devices is str)"
    plan = tmp_path / "plan.json"
    done = run_module("matrix", "plan", "--env", str(damaged), "--out", str(plan))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert not plan.exists()
    run = {"schema": RUN_SCHEMA, "cells": "cuda-linux-v1-graph", "started_at": "2026-12-03T00:00:00+00:00"}
    run |= {"budget_s": 600, "deadline_s": 500, "jobs": 4, "groups": []}
    (damaged.parent / "run.json").write_text(json.dumps(run))
    results = tmp_path / "results"
    done = run_module("matrix", "import-run", str(damaged.parent), "--results", str(results))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert not results.exists()
