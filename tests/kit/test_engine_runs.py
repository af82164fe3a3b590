"""How the reproduction's engine runs are started: shared where vLLM's inputs are equal, each with a compile
cache of its own, leaving as soon as the result is written, all within a run's deadline.

There is no GPU here, so no engine can start. Where a test needs the engine child to stand still, a
``sitecustomize`` on the children's PYTHONPATH stands in for it (said in each test); the rest are the
kit's real processes and vLLM's real code.
"""

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import require_gate_only

from matrix.cells import Cell, Host, Stack, select
from matrix.host.classify import DetectedHost
from matrix.host.facts import vllm_info
from matrix.plan import Plan
from matrix.variables import GATE_PIN_VALUES, UNSET
from repro import offload
from repro.isolation import DEADLINE_VARIABLE, NOT_STARTED, run_command, run_isolated, run_json_child
from repro.tinymodel import tiny_model

MODEL = Path("tiny-model")  # the stand-ins never load it: the spec only names it


# A native-Linux machine with an NVIDIA GPU, described: the plan is what such a runner's session makes.
LINUX_GPU = DetectedHost(Host.LINUX, Stack.CUDA, (6, 8, 0), "NVIDIA H200", "nvidia-smi lists an NVIDIA GPU")


def runs_on_a_linux_gpu(cells: str) -> list[offload.EngineRun]:
    """The runs the reproduction asks for there (tests/cell/test_repro.py's session fixture calls the same)."""
    return offload.runs_for(Plan.for_host(select(cells), LINUX_GPU).cells)


@pytest.mark.parametrize("vllm", ["0.26.0", "0.33.0"])
def test_the_cuda_cells_share_engine_runs_where_the_pin_variable_changes_nothing(vllm):
    runs = runs_on_a_linux_gpu("cuda-*")
    groups = offload.share(runs, MODEL, {"PATH": "/bin"}, offload.pin_env_read_by(vllm))
    # 12 cells x 2 pin values x offload/reference, and the minimal form on the 4 native cells x 2 pin values.
    assert len(runs) == 48 + 8
    # linux and wsl2old: one run serves both pin values (8 cells x offload/reference); wsl2new: 4 cells x 4;
    # the minimal form (its own variables, which take pinned memory away): one run per cell.
    assert len(groups) == 16 + 16 + 4
    for group in groups:
        assert len({run.cell for run in group}) == 1, "different cells never have equal inputs"
        assert len({(run.offload, run.minimal) for run in group}) == 1
        if len(group) > 1:
            assert group[0].cell.host in (Host.LINUX, Host.WSL2OLD)
            assert [run.pin_env for run in group] == list(GATE_PIN_VALUES)  # vLLM's default runs, the opt-in shares it


def test_a_rule_that_gives_the_pin_values_different_gates_keeps_their_runs_apart():
    # ROCm on a new WSL2 kernel: the rules expect the opt-in to matter (known issue #49861), so nothing is shared.
    read = offload.pin_env_read_by("0.33.0")
    assert read(Cell.parse("rocm-wsl2new-v1-graph")) and read(Cell.parse("cuda-wsl2new-v2-eager"))
    assert not read(Cell.parse("rocm-wsl2old-v1-graph")) and not read(Cell.parse("cuda-linux-v1-graph"))
    # Without a vLLM to look the rules up for, the variable may matter anywhere.
    assert all(offload.pin_env_read_by(None)(cell) for cell in select("all"))


def test_inputs_are_what_the_child_gets_spec_and_environment():
    cell = Cell.parse("cuda-linux-v1-graph")
    base = {"PATH": "/bin", "VLLM_WSL2_ENABLE_PIN_MEMORY": "1"}
    unset, opt_in = (offload.EngineRun(cell, pin, True, False) for pin in GATE_PIN_VALUES)
    assert unset.inputs(MODEL, base, pin_env_read=True) != opt_in.inputs(MODEL, base, pin_env_read=True)
    assert unset.inputs(MODEL, base, pin_env_read=False) == opt_in.inputs(MODEL, base, pin_env_read=False)
    # Anything else the child would see keeps runs apart, whoever asked for them.
    assert unset.inputs(MODEL, base, False) != unset.inputs(MODEL, base | {"VLLM_X": "1"}, False)
    assert unset.inputs(MODEL, base, False) != unset.reference().inputs(MODEL, base, False)


def stand_in_engine(tmp_path, monkeypatch, body: str) -> str:
    """A sitecustomize on the children's PYTHONPATH that runs ``body`` in each engine child, before the kit."""
    site = tmp_path / "site"
    site.mkdir()
    record = tmp_path / "children.jsonl"
    (site / "sitecustomize.py").write_text(
        "import json, os, sys\n"
        f"if os.environ.get('STAND_IN_RECORD') == {str(record)!r}:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STAND_IN_RECORD", str(record))
    return str(record)


def test_every_engine_run_gets_a_compile_cache_of_its_own(tmp_path, monkeypatch):
    # The stand-in engine (no GPU here) records what it was given and leaves without an answer.
    record = stand_in_engine(
        tmp_path,
        monkeypatch,
        """
        with open(os.environ['STAND_IN_RECORD'], 'a') as f:
            f.write(json.dumps({'cache': os.environ.get('VLLM_CACHE_ROOT'), 'spec': json.loads(sys.argv[-2])}) + '\\n')
        os._exit(3)
        """,
    )
    runs = runs_on_a_linux_gpu("cuda-linux-v1-graph,cuda-wsl2new-v1-graph")
    results = offload.run_engines(runs, MODEL, timeout=120, jobs=3)
    children = [json.loads(line) for line in open(record)]
    caches = [child["cache"] for child in children]
    read = offload.pin_env_read_by(vllm_info()["version"])
    # linux: offload and reference for both pin values, and the minimal form; wsl2new: each of its 4 runs.
    assert len(children) == len(offload.share(runs, MODEL, dict(os.environ), read)) == 3 + 4  # of 10 asked for
    assert len(set(caches)) == len(caches), "two engine runs shared a compile cache"
    assert all(cache and os.path.isabs(cache) and not os.path.exists(cache) for cache in caches)  # removed after
    assert set(results) == set(runs)
    linux = [run for run in runs if run.cell.host is Host.LINUX and run.offload and not run.minimal]
    assert results[linux[0]] is results[linux[1]] and results[linux[1]].run == linux[0]
    assert all(result.status == "failed" and "exited 3" in result.message for result in results.values())


@pytest.mark.reads_host
def test_the_engine_child_leaves_once_its_result_is_written(tmp_path, monkeypatch):
    require_gate_only("cuda-linux-v1-eager")
    # A teardown that never ends, standing in for vLLM's engine threads: a thread the interpreter would wait for.
    stand_in_engine(
        tmp_path, monkeypatch, "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()"
    )
    run = offload.EngineRun(Cell.parse("cuda-linux-v1-eager"), "1", True, present_host=False)
    result = offload.run_engine(run, tiny_model(tmp_path / "model"), timeout=300)
    assert result.status == "failed", result.message  # the real child failed without a GPU and wrote so
    assert "Traceback" in result.message
    assert "killed after" not in result.message, "the child waited for its teardown until it was killed"


def _flashinfer_sampler(_) -> dict:
    import importlib

    from repro import emulation, engine

    emulation.stub_gpu(Stack.CUDA)  # a CUDA platform without the GPU: the sampler asks only CUDA platforms
    sampler = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
    try:
        without = repr(sampler.flashinfer_sampler_supported())
    except ImportError as exc:
        without = f"{type(exc).__name__}: {exc}"
    engine._without_missing_flashinfer()
    return {
        "without": without,
        "variable": os.environ.get("VLLM_USE_FLASHINFER_SAMPLER"),
        "with": sampler.flashinfer_sampler_supported(),
        "flashinfer imported": "flashinfer" in sys.modules,
    }


def test_without_flashinfer_the_engine_tells_vllms_sampler_not_to_ask_for_it():
    (outcome,) = run_isolated(_flashinfer_sampler, [None], timeout=300)
    assert outcome.ok, outcome.detail
    assert outcome.value["without"] == "ModuleNotFoundError: No module named 'flashinfer'"
    assert outcome.value["variable"] == "0"
    assert outcome.value["with"] is False and not outcome.value["flashinfer imported"]


def test_a_child_after_the_deadline_is_not_started(monkeypatch):
    monkeypatch.setenv(DEADLINE_VARIABLE, str(time.time() - 1))
    done = run_command([sys.executable, "-c", "print('ran')"], env=dict(os.environ), timeout=60)
    assert done.timed_out and done.output == NOT_STARTED and done.seconds == 0
    (outcome,) = run_isolated(print, [None], timeout=60)
    assert outcome.status == "timeout" and outcome.detail == NOT_STARTED
    run = offload.EngineRun(Cell.parse("cuda-linux-v1-graph"), UNSET, True, False)
    result = offload.run_engine(run, MODEL)
    assert result.outcome == "timeout" and result.message == NOT_STARTED


def test_a_child_running_at_the_deadline_is_killed_there(monkeypatch):
    monkeypatch.setenv(DEADLINE_VARIABLE, str(time.time() + 2))
    done = run_command([sys.executable, "-c", "import time; time.sleep(120)"], env=dict(os.environ), timeout=600)
    assert done.timed_out and "the run's deadline came first" in done.output
    monkeypatch.setenv(DEADLINE_VARIABLE, str(time.time() + 2))
    (outcome,) = run_isolated(time.sleep, [120], timeout=600)
    assert outcome.status == "timeout" and "the run's deadline came first" in outcome.detail


def test_a_result_cut_off_mid_write_is_no_answer():
    script = "import sys; open(sys.argv[1], 'w').write('{\"status\": \"o')"
    child = run_json_child([sys.executable, "-c", script], env=dict(os.environ), timeout=60)
    assert child.answer is None and "without a result" in child.no_answer
