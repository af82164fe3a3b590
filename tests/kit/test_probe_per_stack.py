"""The bare-torch probe's facts are judged per GPU stack: what was measured on CUDA is not asked of ROCm.

No GPU here: the cell tests run in a real pytest subprocess with a plan standing in for a native
host of each stack, and a plugin written below standing in for the probe's sections with what a
runtime that maps pageable memory for the device would report.
"""

import pytest
from conftest import run_module

from matrix.cells import Host, Stack, select
from matrix.host.classify import DetectedHost
from matrix.junit import FAILED, PASSED, SKIPPED, outcome, parse, properties
from matrix.plan import Plan, cell_pytest_args
from repro import probe

STAND_IN_PROBE = """
import pytest
from repro.probe import SectionResult

SECTIONS = {
    "capture_pinned_non_blocking": {"captured": True, "replay_reads_current_host": True},
    "uva_pageable_refused": {"refused": False},
}


def pytest_generate_tests(metafunc):
    if "probe_results" in metafunc.fixturenames:
        results = {name: SectionResult(name, "ok", metrics) for name, metrics in SECTIONS.items()}
        metafunc.parametrize("probe_results", [results], ids=["stand-in"], scope="session")
"""


@pytest.mark.parametrize(
    "stack, refused_outcome",
    [(Stack.CUDA, FAILED), (Stack.ROCM, SKIPPED)],
)
def test_a_native_cell_is_judged_by_its_own_stacks_facts(tmp_path, stack, refused_outcome):
    cell = f"{stack}-linux-v1-graph"
    here = DetectedHost(Host.LINUX, stack, (6, 8, 0), "stand-in GPU", "stand-in host, written by the test")
    plan, raw = tmp_path / "plan.json", tmp_path / "junit.xml"
    Plan.for_host(select(cell), here).write(plan)
    (tmp_path / "stand_in_probe.py").write_text(STAND_IN_PROBE)
    done = run_module(
        "pytest",
        "tests/cell/test_repro.py",
        *cell_pytest_args(cell, str(raw), str(tmp_path / "probe.json"), str(plan)),
        *("-p", "stand_in_probe", "-k", "bare_torch_probe and (capture_pinned_non_blocking or uva_pageable_refused)"),
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == (1 if refused_outcome == FAILED else 0), done.stdout[-3000:]
    cases = {case.get("name"): (outcome(case), properties(case)) for case in parse(raw).iter("testcase")}
    assert len(cases) == 2
    for name, ((state, message), props) in cases.items():
        assert props["cell"] == cell and "metrics" in props  # recorded either way
        if "uva_pageable_refused" in name:
            assert state == refused_outcome, message
            if stack is Stack.ROCM:
                assert message.startswith("recorded, not judged"), message
        else:
            assert state == PASSED, message


def test_every_section_is_judged_on_cuda_where_the_facts_were_measured():
    assert all(probe.judged(section, Stack.CUDA) for section in probe.SECTIONS)
    assert not probe.judged("uva_pageable_refused", Stack.ROCM)
