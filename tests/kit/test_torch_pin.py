"""A gate whose torch is not the one the vLLM release pins says so, and blames torch for what torch breaks."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import run_module
from junitparser import Failure, JUnitXml

from matrix.host import classify, facts
from matrix.junit import case_properties, suite_properties
from repro.failures import torch_at_fault

CELL = "cuda-linux-v1-graph"


@pytest.mark.parametrize(
    ("torch", "spec", "mismatch"),
    [
        ("2.13.0+cpu", "==2.14.0", True),
        ("2.14.0+cu130", "==2.14.0", False),
        ("2.14.1", ">=2.14,<2.15", False),
        ("2.13.0", None, None),
        (None, "==2.14.0", None),
    ],
)
def test_torch_mismatch_compares_the_installed_torch_with_vllms_own_pin(torch, spec, mismatch):
    torch_info = {"version": torch} if torch else None
    assert classify.torch_mismatch(torch_info, {"version": "0.33.0", "requires_torch": spec}) is mismatch


@pytest.mark.reads_host
def test_the_installed_vllms_torch_pin_reaches_the_envelope(tmp_path):
    vllm = facts.vllm_info()
    assert vllm is not None and vllm["requires_torch"], "vLLM's metadata pins torch"
    env, plan, raw, out = tmp_path / "env.json", tmp_path / "plan.json", tmp_path / "junit.xml", tmp_path / "results"
    assert run_module("matrix", "env", "--out", str(env)).returncode == 0
    assert run_module("matrix", "plan", "--cell", CELL, "--env", str(env), "--out", str(plan)).returncode == 0
    record = json.loads(env.read_text())
    assert record["packages"]["torch_mismatch"] is classify.torch_mismatch(facts.torch_info(), vllm)
    raw.write_text('<testsuites><testsuite name="pytest"/></testsuites>')
    split = run_module("matrix", "split", str(raw), "--plan", str(plan), "--env", str(env), "--out", str(out))
    assert split.returncode == 0, split.stderr
    (suite,) = JUnitXml.fromfile(str(next(out.rglob(f"{CELL}.xml"))))
    props = suite_properties(suite)
    assert props["vllm_requires_torch"] == f"torch{vllm['requires_torch']}"
    assert props["torch_mismatch"] == str(record["packages"]["torch_mismatch"]).lower()


IN_TORCH = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/vllm/platforms/cuda.py", line 12, in <module>
    from torch.library import custom_op
  File "/venv/lib/python3.11/site-packages/torch/library.py", line 40, in <module>
    raise ImportError("no such op")
ImportError: no such op"""
NAMES_TORCH = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/vllm/utils/torch_utils.py", line 3, in <module>
    torch._C._new_api()
AttributeError: module 'torch._C' has no attribute '_new_api'"""
VLLMS_OWN = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/vllm/platforms/__init__.py", line 7, in <module>
    from vllm.platforms.interface import Platform
ImportError: cannot import name 'Platform' from partially initialized module 'vllm.platforms.interface'"""


@pytest.mark.parametrize(
    ("traceback", "blamed"), [(IN_TORCH, True), (NAMES_TORCH, True), (VLLMS_OWN, False), ("", False)]
)
def test_an_import_failure_is_blamed_on_torch_only_when_it_ends_there(traceback, blamed):
    assert torch_at_fault(traceback) is blamed


def _fake_vllm(root, init: str):
    """A vLLM whose metadata pins a torch no one has, and whose import fails as ``init`` says."""
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(textwrap.dedent(init))
    info = root / "vllm-99.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 99.0\nRequires-Dist: torch==99.0\n")
    return root


def _imports_case(tmp_path, init: str):
    fake = _fake_vllm(tmp_path / "site", init)
    raw = tmp_path / "junit.xml"
    done = run_module(
        "pytest",
        "tests/cell/test_gate.py",
        "--cells",
        CELL,
        "-k",
        "test_vllm_imports",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={raw}",
        "-p",
        "no:cacheprovider",
        env={"PYTHONPATH": str(fake)},
    )
    cases = [case for suite in JUnitXml.fromfile(str(raw)) for case in suite]
    assert cases, done.stdout[-2000:]
    return cases


@pytest.mark.reads_host
def test_an_import_that_fails_in_torch_under_a_mismatched_torch_is_no_result_about_vllm(tmp_path):
    cases = _imports_case(tmp_path, "import torch\ntorch.no_such_function_in_this_torch()\n")
    for case in cases:
        (result,) = case.result
        assert result.type == "pytest.skip" and "torch mismatch: vLLM 99.0 asks for torch==99.0" in result.message
        assert case_properties(case)["failure_kind"] == "torch-mismatch"


@pytest.mark.reads_host
def test_vllms_own_import_failure_stays_a_failure_under_a_mismatched_torch(tmp_path):
    cases = _imports_case(
        tmp_path, "raise ImportError('cannot import name Platform from partially initialized module')\n"
    )
    for case in cases:
        (result,) = case.result
        assert isinstance(result, Failure) and "failure_kind" not in case_properties(case)
