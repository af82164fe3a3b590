"""The step for vLLM's own Buildkite pipeline (``python -m matrix vllm-step``): it has the shape of the steps in
vLLM's ``.buildkite/test-pipeline.yaml``, and its file list opts it in for every vLLM file the gate's code imports or
names, resolved in the vLLM release the kit pins."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shlex

import pytest
import yaml
from conftest import ROOT, run_module

from matrix.ci.vllm_step import GATE_SOURCES, step, to_yaml
from matrix.releases import VLLM_VERSION

# The keys a step of vLLM's test-pipeline.yaml may carry, as its header documents them, and the kind of each.
PIPELINE_KEYS = {
    "label": str,
    "fast_check": bool,
    "torch_nightly": bool,
    "fast_check_only": bool,
    "optional": bool,
    "soft_fail": bool,
    "command": str,
    "commands": list,
    "mirror_hardwares": list,
    "gpu": str,
    "num_gpus": int,
    "num_nodes": int,
    "working_dir": str,
    "source_file_dependencies": list,
    "parallelism": int,
}
# The kit's code that asks vLLM: the gate and engine-config children, the host and GPU they present, their tests.
GATE_CODE = ("repro/gate.py", "repro/engine_config.py", "repro/emulation.py", "tests/cell")
VLLM_MODULE = re.compile(r"vllm(\.[A-Za-z_][A-Za-z0-9_]*)*")


def vllm_modules() -> set[str]:
    """Every vLLM module the gate's code imports, or names as a string to import or read (``_first_module``)."""
    files = [
        p for name in GATE_CODE for p in ((ROOT / name).rglob("*.py") if (ROOT / name).is_dir() else [ROOT / name])
    ]
    found = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return {name for name in found if VLLM_MODULE.fullmatch(name)}


def vllm_file(module: str) -> str:
    """The module's file in the installed vLLM: a package's ``__init__.py`` or a module's ``.py``."""
    files = {str(f) for f in importlib.metadata.distribution("vllm").files or ()}
    path = module.replace(".", "/")
    for candidate in (f"{path}/__init__.py", f"{path}.py"):
        if candidate in files:
            return candidate
    return f"{path}.py"  # a module this release lacks (the gate falls back): its file in the releases that have it


def covered(path: str) -> bool:
    return any(path.startswith(prefix) for prefix in GATE_SOURCES)


def test_the_step_has_the_shape_of_the_steps_in_vllms_pipeline():
    (parsed,) = yaml.safe_load(to_yaml(step("https://git.example/org/vllm-wslpin-kit.git@v0.1.0")))
    assert set(parsed) <= set(PIPELINE_KEYS) and {"label", "commands", "source_file_dependencies"} <= set(parsed)
    assert all(isinstance(value, PIPELINE_KEYS[key]) for key, value in parsed.items())
    assert all(isinstance(item, str) for key in ("commands", "source_file_dependencies") for item in parsed[key])
    assert parsed == step("https://git.example/org/vllm-wslpin-kit.git@v0.1.0")
    clone, install, gate = parsed["commands"]
    assert clone.startswith("git clone --depth 1 --branch v0.1.0 https://git.example/org/vllm-wslpin-kit.git ")
    assert "--no-venv -s gate -- --vllm installed" in gate


def test_a_url_that_yaml_or_the_shell_would_read_otherwise_stays_one_argument():
    url = "https://git.example/o/k.git#x:y'\";true"
    (parsed,) = yaml.safe_load(to_yaml(step(f"{url}@v1")))
    assert parsed == step(f"{url}@v1")
    assert shlex.split(parsed["commands"][0])[5:] == ["v1", url, "/tmp/vllm-wslpin-kit"]
    # An SSH address names no ref; an option or a space where the URL goes is refused in one line.
    assert "--branch" not in step("git@git.example:org/vllm-wslpin-kit.git")["commands"][0]
    done = run_module("matrix", "vllm-step", "--kit=--upload-pack=x")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "give the kit's git URL" in done.stderr


def test_its_files_opt_it_in_for_every_vllm_module_the_gate_imports_or_names():
    installed = importlib.metadata.version("vllm")
    assert installed == VLLM_VERSION, f"the kit's tests run against vLLM {VLLM_VERSION}, not {installed}"
    modules = vllm_modules()
    # What the gate reads from source and what it imports by name, not only its import statements.
    assert {"vllm.v1.worker.gpu.model_runner", "vllm.utils.platform_utils", "vllm.utils.torch_utils"} <= modules
    uncovered = sorted(f"{m} ({vllm_file(m)})" for m in modules if not covered(vllm_file(m)))
    assert not uncovered, f"add these to matrix/ci/vllm_step.py GATE_SOURCES: {uncovered}"
    # The check can fail: a vLLM file the gate never reads does not opt the step in.
    assert not covered(vllm_file("vllm.sampling_params"))


@pytest.mark.parametrize("prefix", GATE_SOURCES)
def test_each_file_it_names_is_in_the_release_or_one_the_gate_falls_back_to(prefix):
    files = {str(f) for f in importlib.metadata.distribution("vllm").files or ()}
    # Older releases keep the tokenizer here; the gate asks vLLM for whichever module the release has.
    older = {"vllm/transformers_utils/tokenizer.py"}
    assert prefix in older or any(f.startswith(prefix) for f in files), f"vLLM {VLLM_VERSION} has no {prefix}"
