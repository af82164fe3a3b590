"""Typed records: the envelope's one loader and writer, and the cell table judged by the report's rules."""

from __future__ import annotations

import json

import pytest
from builders import gate_case, report_of, write_suite

from matrix.cells import Cell, Host, Stack, select
from matrix.commands.summary import render, summarize
from matrix.envelope import ENVELOPE_SCHEMA, Envelope
from matrix.errors import MatrixError
from matrix.host.classify import DetectedHost
from matrix.plan import Execution, Plan, load_plan
from matrix.store.probe import load_probes
from repro.probe.record import metrics_document

# What the kit wrote into every cell file before the envelope became a record (docs/matrix/compat.json's provenance).
WRITTEN = {
    "envelope_schema": ENVELOPE_SCHEMA,
    "cell_id": "cuda-linux-v1-graph",
    "stack": "cuda",
    "host": "linux",
    "runner": "v1",
    "mode": "graph",
    "execution": "gate-only",
    "execution_reason": "no GPU: no nvidia-smi/amd-smi GPU, no /dev/kfd",
    "vllm_version": "0.33.0",
    "vllm_commit": "g4ba787ec9",
    "torch_version": "2.13.0+cpu",
    "torch_build": "cpu",
    "vllm_requires_torch": "torch==2.14.0",
    "torch_mismatch": "true",
    "kernel_release": "6.18.44",
    "wsl": "false",
    "detected_host": "linux",
    "gpu": "none",
    "gpu_driver": "",
    "runner_name": "vm",
    "kit_commit": "dc07cd6bd19d",
    "started_at": "2026-11-30T20:31:49+00:00",
    "env_hash": "9c84c2dbf4b5cc6b",
    "env_schema": "wslpin-kit.env/1",
}


def test_the_envelope_reads_typed_and_writes_back_exactly_what_the_kit_wrote():
    env = Envelope.from_properties(WRITTEN)
    assert env.cell == Cell.parse("cuda-linux-v1-graph") and env.execution is Execution.GATE_ONLY
    assert env.torch_mismatch is True and env.wsl is False
    assert list(env.to_properties().items()) == list(WRITTEN.items())
    image = Envelope.from_properties({**WRITTEN, "image": "vllm/vllm-openai:v0.33.0", "image_digest": "sha256:1"})
    assert image.to_properties() == {**WRITTEN, "image": "vllm/vllm-openai:v0.33.0", "image_digest": "sha256:1"}


def test_an_older_envelope_without_the_newer_keys_still_loads():
    older = {k: v for k, v in WRITTEN.items() if k not in ("envelope_schema", "vllm_requires_torch", "torch_mismatch")}
    env = Envelope.from_properties(older)
    assert env.vllm_requires_torch == "" and env.torch_mismatch is None and env.vllm_version == "0.33.0"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"envelope_schema": "wslpin-kit.envelope/9"}, "envelope/9"),
        ({"execution": "teleported"}, "execution 'teleported'"),
        ({"wsl": "yes"}, "wsl 'yes'"),
        ({"cell_id": "cuda-mars-v1-graph"}, "cell_id is not a cell"),
    ],
)
def test_an_envelope_this_kit_cannot_read_is_one_line_that_says_what(change, said):
    with pytest.raises(MatrixError, match=said) as caught:
        Envelope.from_properties({**WRITTEN, **change})
    assert "\n" not in str(caught.value)


def test_a_suite_with_an_unreadable_envelope_is_unattributed_with_the_reason(tmp_path):
    path = write_suite(tmp_path / "x.xml", "cuda-linux-v1-graph", ['<testcase name="t"/>'], envelope_schema="other/2")
    (problem,) = report_of(path).inputs.unattributed
    assert "other/2" in problem.reason and problem.testcases == 1


def test_the_cell_table_counts_what_the_report_judges_even_where_pytest_said_otherwise(tmp_path):
    cell = "cuda-linux-v1-graph"
    path = write_suite(
        tmp_path / f"{cell}.xml",
        cell,
        [
            gate_case("pin unset", "pin", "unset", "True"),  # as the rule expects: pass
            gate_case("pin 1", "pin", "1", "False"),  # pytest passed it, the current rule says regression
            gate_case("uva 1", "uva", "1", "True", failure='<failure message="old rule"/>'),  # rule corrected: pass
            '<testcase classname="t" name="gpu"><skipped message="no GPU"/></testcase>',
            '<testcase classname="t" name="known"><skipped type="pytest.xfail" message="#1"/></testcase>',
        ],
    )
    summary = summarize(path)
    report = next(c for c in report_of(path).versions["0.33.0"] if c.cell.id == cell)
    judged = [report.counts.get(status, 0) for status in ("pass", "regression", "known-fail", "skipped")]
    assert [summary.passed, summary.failed, summary.known, summary.skipped] == judged == [2, 1, 1, 1]
    assert summary.failures == ["pin 1"] and "FAILED cuda-linux-v1-graph: pin 1" in render([summary])
    assert summary.execution == "gate-only" and summary.vllm == "0.33.0"


def test_a_file_that_is_not_a_cell_result_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("<testsuites><testsuite")
    with pytest.raises(MatrixError, match="not a cell's result file"):
        summarize(bad)


@pytest.mark.parametrize(
    "here",
    [
        DetectedHost(Host.WSL2NEW, Stack.CUDA, (6, 6, 87), "NVIDIA GeForce RTX 4090", "nvidia-smi lists a GPU"),
        DetectedHost(Host.LINUX, None, None, "", "no GPU: no nvidia-smi/amd-smi GPU, no /dev/kfd"),
    ],
    ids=["gpu", "none"],
)
def test_the_host_is_written_in_one_form_that_the_plan_and_the_probes_reader_read_back(here, tmp_path):
    plan = Plan.for_host(select("cuda-wsl2new-*"), here, env_hash="abc")
    plan.write(tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json") == plan
    assert json.loads((tmp_path / "plan.json").read_text())["host"] == here.to_json()
    # The probe's record says the same of its host, and the report cites it by stack and host.
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "probe.json").write_text(json.dumps(metrics_document({}, here)))
    (probe,) = load_probes(str(probes))
    stack = here.stack.value if here.stack else "none"
    assert (probe.stack, probe.host, probe.gpu) == (stack, here.host.value, here.gpu)
