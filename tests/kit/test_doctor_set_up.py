"""The doctor answers for the set-up it is asked about: the opt-in set, a value vLLM refuses, a kernel release vLLM
cannot parse, the runner a release picks by architecture, the user's own release, a ROCm machine's collect-env.

Through the real command, with matrices a real report writes (``build_report`` over gate results as the cell
sessions write them) or ``compat_file``'s, changed where a test needs a published fact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import CUDA_NEW_KERNEL, CUDA_OLD_KERNEL, answered, clean_env, doctor, one_error_line, printed, suite
from compat_file import compat_document

from matrix.cells import Host
from matrix.report import render_json
from matrix.report.model import build_report
from matrix.variables import PIN_MEMORY, V2_MODEL_RUNNER

NEW, OLD, RC = Host.WSL2NEW.emulated_release, "4.19.104-microsoft-standard", "5.15.0rc1-microsoft-standard-WSL2"


@pytest.fixture
def reported(tmp_path) -> str:
    """A compat.json ``nox -s report`` writes from 0.29.0's gate results on a new and an old WSL2 kernel (V1)."""
    inputs = [
        suite(tmp_path, "cuda-wsl2new-v1-graph", CUDA_NEW_KERNEL),
        suite(tmp_path, "cuda-wsl2old-v1-graph", CUDA_OLD_KERNEL),
    ]
    path = tmp_path / "compat.json"
    render_json.write(build_report([str(i) for i in inputs], kit_commit="t"), path)
    return str(path)


def _ask(matrix: str, kernel: str, *more: str, **env: str) -> dict:
    flags = ("--json", "--stack", "cuda", "--kernel", kernel, "--vllm", "0.29.0", "--runner", "v1", *more)
    return answered(doctor(*flags, "--matrix", matrix, env=clean_env(**env)))


@pytest.mark.reads_host
def test_with_the_opt_in_set_the_verdicts_are_for_it(reported):
    unset = _ask(reported, NEW)
    assert unset["verdicts"] == {
        "engine_start": "works",
        "offload_with_graphs": "needs-opt-in",
        "pinned_memory": "slow",
    }
    for value in ("1", "2"):  # vLLM reads both as 1
        got = _ask(reported, NEW, **{PIN_MEMORY.name: value})
        assert got["answered_as"] == "opted-in" and set(got["verdicts"].values()) == {"works"}
        assert set(got["advice"].values()) == {"nothing to set"}
    text = printed(
        doctor(
            "--stack",
            "CUDA",
            "--kernel",
            NEW,
            "--vllm",
            "0.29.0",
            "--runner",
            "v1",
            "--matrix",
            reported,
            env=clean_env(**{PIN_MEMORY.name: "1"}),
        )
    )
    assert f"{PIN_MEMORY.name}=1 is set here: the opt-in, and the answers below are for it" in text
    assert "\npinned memory                   works" in text and f"set {PIN_MEMORY.name}=1" not in text
    # On an old kernel the answer with it set is still the kernel's.
    old = _ask(reported, OLD, **{PIN_MEMORY.name: "1"})
    assert set(old["verdicts"].values()) == {"needs-wsl-update"}
    assert set(old["advice"].values()) == {"run wsl --update (kernel ≥ 4.19.121)"}


@pytest.mark.reads_host
@pytest.mark.parametrize("variable", [PIN_MEMORY.name, V2_MODEL_RUNNER.name])
def test_a_value_vllm_refuses_is_an_engine_that_does_not_start(reported, variable):
    got = _ask(reported, NEW, **{variable: "true"})
    assert got["answered_as"] == "engine-stops" and set(got["verdicts"].values()) == {"broken"}
    assert all(f"vLLM cannot start with {variable}='true'" in advice for advice in got["advice"].values())


@pytest.mark.reads_host
def test_a_kernel_release_vllm_cannot_parse_is_its_old_kernel_path_with_the_gpu_there(reported):
    got = _ask(reported, RC)
    assert (got["cell"], got["asked"]["host_note"], got["answered_as"]) == (
        "cuda-wsl2old-v1-graph",
        "version-unreadable",
        "not-read",
    )
    # The engine starts, nothing is pinned and the variable cannot change it, offload in graph mode fails.
    assert got["verdicts"] == {"engine_start": "works", "offload_with_graphs": "broken", "pinned_memory": "slow"}
    assert got["verdicts"] == _ask(reported, RC, **{PIN_MEMORY.name: "1"})["verdicts"]
    assert "VLLM_WSL2_ENABLE_PIN_MEMORY" not in json.dumps(got["advice"])
    text = printed(
        doctor(
            "--stack",
            "cuda",
            "--kernel",
            RC,
            "--vllm",
            "0.29.0",
            "--runner",
            "v1",
            "--matrix",
            reported,
            env=clean_env(**{PIN_MEMORY.name: "1"}),
        )
    )
    assert "but on this kernel vLLM never reads it: the answers below are without it" in text
    assert "no GPU is there" not in text


def _matrix(tmp_path: Path, document: dict) -> str:
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(document))
    return str(path)


# As the lead publishes them: vLLM 0.28.0's list of 8 (two named here), listed-* V2, unlisted dense V2, MoE V1.
ARCHITECTURES = {
    "0.28.0": {
        "listed": ["DeepseekV2ForCausalLM", "LlamaForCausalLM"],
        "runner": {"listed-dense": "v2", "listed-moe": "v2", "unlisted-dense": "v2", "unlisted-moe": "v1"},
        "moe": ["MixtralForCausalLM", "DeepseekV2ForCausalLM"],
        "dense": ["Gemma3ForCausalLM", "LlamaForCausalLM"],
    },
    "0.24.0": {
        "listed": ["LlamaForCausalLM", "DeepseekV2ForCausalLM"],
        "runner": {"listed-dense": "v2", "listed-moe": "v2", "unlisted-dense": "v1", "unlisted-moe": "v1"},
        "moe": ["MixtralForCausalLM", "DeepseekV2ForCausalLM"],
    },
}


def _by_architecture(tmp_path: Path) -> str:
    """compat_file's matrix, with 0.28.0 and 0.24.0 picking by architecture (V2 engine start needs the opt-in),
    and 0.34.0 without the V1 runner."""
    document = compat_document()
    newest = document["versions"][0]
    versions = []
    for vllm in ("0.34.0", "0.28.0", "0.24.0"):
        version = json.loads(json.dumps(newest)) | {"vllm": vllm}
        for cell in version["cells"]:
            start = cell["verdicts"]["engine_start"]
            if vllm == "0.34.0" and cell["runner"] == "v1":
                start |= {"verdict": "broken", "advice": "no setting avoids it", "why": "vLLM 0.34.0 has no V1 runner"}
            elif vllm != "0.34.0" and cell["runner"] == "v2" and cell["host"] == "wsl2new":
                start |= {"verdict": "needs-opt-in"}
            cell["command"] = cell["command"].replace("0.33.0", vllm)
        if vllm in ARCHITECTURES:
            # Per stack, as the platform's list is (ROCm's leaves some out from 0.27.0).
            version["v2_architectures"] = {stack: ARCHITECTURES[vllm] for stack in ("cuda", "rocm")}
        versions.append(version)
    return _matrix(tmp_path, document | {"versions": versions + document["versions"]})


@pytest.mark.reads_host
def test_releases_that_pick_the_runner_by_architecture_are_answered_for_the_models(tmp_path):
    matrix = _by_architecture(tmp_path)

    def ask(vllm: str, *more: str) -> dict:
        flags = ("--json", "--stack", "cuda", "--kernel", NEW, "--vllm", vllm, "--matrix", matrix, *more)
        return answered(doctor(*flags, env=clean_env()))

    deepseek = ask("0.28.0", "--arch", "DeepseekV2ForCausalLM")
    assert (deepseek["cell"], deepseek["verdicts"]["engine_start"]) == ("cuda-wsl2new-v2-graph", "needs-opt-in")
    mixtral = ask("0.28.0", "--arch", "MixtralForCausalLM")
    assert (mixtral["cell"], mixtral["verdicts"]["engine_start"]) == ("cuda-wsl2new-v1-graph", "works")
    gemma = ask("0.24.0", "--arch", "Gemma3ForCausalLM")
    assert (gemma["cell"], gemma["verdicts"]["engine_start"]) == ("cuda-wsl2new-v1-graph", "works")
    assert ask("0.24.0", "--arch", "Gemma3ForCausalLM", "--moe")["asked"]["model_class"] == "moe"
    text = printed(
        doctor(
            "--stack",
            "cuda",
            "--kernel",
            NEW,
            "--vllm",
            "0.28.0",
            "--arch",
            "DeepseekV2ForCausalLM",
            "--matrix",
            matrix,
            env=clean_env(),
        )
    )
    assert (
        "runner     v2 (DeepseekV2ForCausalLM is on vLLM 0.28.0's list of architectures that get the V2 runner by "
        "default, and an MoE model (as vLLM reads its default config): vLLM 0.28.0 picks the V2 runner for it)"
    ) in text
    # A release that does not pick by architecture: its default_runners answer, the architecture echoed.
    newest = ask("0.33.0", "--arch", "MixtralForCausalLM")
    assert (newest["cell"], newest["asked"]["architecture"]) == ("cuda-wsl2new-v2-graph", "MixtralForCausalLM")
    # --model reads the architecture and the experts from the model's config.json.
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 128}))
    qwen = ask("0.28.0", "--model", str(model))
    assert (qwen["cell"], qwen["asked"]["architecture"], qwen["asked"]["model_class"]) == (
        "cuda-wsl2new-v1-graph",
        "Qwen3MoeForCausalLM",
        "moe",
    )
    (model / "config.json").write_text("{}")
    assert "its config.json lists no architectures" in one_error_line(
        doctor("--stack", "cuda", "--model", str(model), "--matrix", matrix, env=clean_env())
    )


@pytest.mark.reads_host
def test_a_release_without_a_working_v1_runner_is_answered_broken_on_it(tmp_path):
    matrix = _by_architecture(tmp_path)
    flags = ("--json", "--stack", "cuda", "--kernel", NEW, "--vllm", "0.34.0", "--matrix", matrix)
    assert answered(doctor(*flags, env=clean_env()))["cell"] == "cuda-wsl2new-v2-graph"
    for got in (
        answered(doctor(*flags, "--runner", "v1", env=clean_env())),
        answered(doctor(*flags, env=clean_env(**{V2_MODEL_RUNNER.name: "0"}))),
    ):
        assert (got["cell"], got["verdicts"]["engine_start"]) == ("cuda-wsl2new-v1-graph", "broken")


@pytest.mark.reads_host
def test_check_it_here_names_the_users_own_release(tmp_path):
    matrix = _by_architecture(tmp_path)
    flags = ("--stack", "cuda", "--kernel", NEW, "--runner", "v1", "--matrix", matrix)
    text = printed(doctor(*flags, "--vllm", "0.30.1", env=clean_env()))
    assert 'check it here: nox -s "cell(cuda, wsl2new, v1, graph)" -- --vllm 0.30.1\n' in text
    assert f"(vLLM 0.30.1 is not in --matrix {matrix}: the answer above is 0.30.0's, the check runs 0.30.1)" in text
    same = printed(doctor(*flags, "--vllm", "0.28.0", env=clean_env()))
    assert "-- --vllm 0.28.0\n" in same and "is not in" not in same


ROCM_COLLECT_ENV = """\
==============================
        System Info
==============================
OS                           : Ubuntu 22.04.4 LTS (x86_64)
GCC version                  : (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0

==============================
       PyTorch Info
==============================
PyTorch version              : 2.9.0+rocm6.4
Is debug build               : False
CUDA used to build PyTorch   : N/A
ROCM used to build PyTorch   : 6.4.43482-0f2d60242

==============================
      Python Environment
==============================
Python version               : 3.12.3 (main, Nov  6 2025, 13:44:16) [GCC 13.2.0] (64-bit runtime)
Python platform              : Linux-6.6.87.2-microsoft-standard-WSL2-x86_64-with-glibc2.35

==============================
       CUDA / GPU Info
==============================
Is CUDA available            : True
CUDA runtime version         : Could not collect
CUDA_MODULE_LOADING set to   : LAZY
GPU models and configuration : AMD Instinct MI300X (gfx942:sramecc+:xnack-)
Nvidia driver version        : Could not collect
cuDNN version                : Could not collect
HIP runtime version          : 6.4.43482
MIOpen runtime version       : 3.4.0

==============================
         vLLM Info
==============================
ROCM Version                 : 6.4.43482-0f2d60242
vLLM Version                 : 0.33.0 (git sha: 1a2b3c4)
"""


@pytest.mark.reads_host
def test_a_rocm_machines_collect_env_is_read(tmp_path):
    # vLLM's collect_env prints torch's device name (with its gfx arch) for ROCm, without CUDA's `GPU n:`.
    path = tmp_path / "collect-env.txt"
    path.write_text(ROCM_COLLECT_ENV)
    got = answered(
        doctor("--json", "--collect-env", str(path), "--matrix", _by_architecture(tmp_path), env=clean_env())
    )
    assert (got["cell"], got["asked"]["stack"], got["vllm"]) == ("rocm-wsl2new-v2-graph", "rocm", "0.33.0")
