"""The gate evaluation against the real installed vLLM (the version the kit pins).

Each request stubs the GPU (gate-only), as a cell without its GPU does: the answers are
the same on any machine.
"""

import json
import platform
import subprocess
import sys

import pytest

from matrix.cells import Host, Stack
from repro.gate import GateRequest, evaluate

pytestmark = pytest.mark.needs_vllm

# Whatever host this is (a WSL2 runner's uname says "microsoft"), evaluating must not change it.
UNAME_BEFORE = platform.uname()


def gate_only(stack, host, pin_env):
    return GateRequest(stack, host, pin_env, present_host=True, stub_gpu=True)


@pytest.fixture(scope="module")
def answers():
    requests = [gate_only(s, h, p) for s in Stack for h in (Host.WSL2OLD, Host.WSL2NEW) for p in ("unset", "1")]
    requests.append(gate_only(Stack.CUDA, Host.LINUX, "unset"))
    outcomes = evaluate(requests, timeout=300)
    assert all(o.ok for o in outcomes.values()), {r.label: o.detail for r, o in outcomes.items() if not o.ok}
    return {(r.stack, r.host, r.pin_env): o.value for r, o in outcomes.items()}


def test_vllm_detects_the_cells_platform_class(answers):
    assert answers[Stack.CUDA, Host.WSL2NEW, "1"]["platform_class"].startswith("vllm.platforms.cuda.")
    assert answers[Stack.ROCM, Host.WSL2NEW, "1"]["platform_class"] == "vllm.platforms.rocm.RocmPlatform"


def test_cuda_on_a_new_wsl2_kernel_pins_only_when_asked(answers):
    off, on = answers[Stack.CUDA, Host.WSL2NEW, "unset"], answers[Stack.CUDA, Host.WSL2NEW, "1"]
    assert (off["pin"], off["uva"], off["warning"]) == (False, False, "none")  # silently off
    assert (off["v2_buffer"], off["offload_path"]) == ("NonUvaBuffer", "pageable-copy")
    assert (on["pin"], on["uva"], on["v2_buffer"], on["offload_path"]) == (True, True, "UvaBuffer", "uva")
    assert on["pin_memory_constant"] is True  # torch_utils.PIN_MEMORY, frozen at import


def test_the_v2_runner_of_this_release_installs_the_offloader_whatever_the_host(answers):
    # Read from the installed release's source (0.28.0 added the call); each history release checks its own
    # against expectations.toml's v2-runner-offloader rules.
    assert {answer["v2_offloader"] for answer in answers.values()} == {True}


def test_old_kernels_never_pin_and_say_why(answers):
    for stack in Stack:
        for pin_env in ("unset", "1"):
            answer = answers[stack, Host.WSL2OLD, pin_env]
            assert answer["platform_pin"] is False
            assert answer["warning"] == "wsl-kernel"
            assert any("wsl --update" in m for m in answer["warnings"])


def test_rocm_ignores_the_opt_in_variable(answers):
    assert answers[Stack.ROCM, Host.WSL2NEW, "unset"]["pin"] is True
    assert answers[Stack.ROCM, Host.WSL2NEW, "1"]["pin"] is True


def test_native_linux_pins_and_the_runner_follows_the_variable(answers):
    linux = answers[Stack.CUDA, Host.LINUX, "unset"]
    assert (linux["pin"], linux["warning"], linux["offload_path"]) == (True, "none", "uva")
    assert (linux["runner_v1"], linux["runner_v2"]) == ("v1", "v2")


def test_the_parent_process_is_left_alone(answers):
    assert platform.uname() == UNAME_BEFORE
    import sys

    assert "vllm" not in sys.modules


def test_vllm_failing_to_load_under_a_host_is_a_result(monkeypatch):
    # vLLM's rocm.py refuses to import when these two disagree: a real failure, recorded.
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    (outcome,) = evaluate([gate_only(Stack.ROCM, Host.WSL2NEW, "unset")], timeout=300).values()
    assert outcome.ok
    assert outcome.value["imports"] is False
    assert "VISIBLE_DEVICES" in outcome.value["import_error"]


# In a fresh interpreter: a child forked after the preload for one child (the modules PRELOAD names) and one
# forked after the preload for many (all vLLM imports from other packages, found by a child) answer one request;
# and what the parent holds after each.
_PRELOADED_AND_NOT = """
import json, sys
from matrix.cells import Host, Stack
from repro import gate
from repro.isolation import run_isolated

request = gate.GateRequest(Stack.CUDA, Host.WSL2NEW, "1", present_host=True, stub_gpu=True)
def held():
    return [name in sys.modules for name in ("pydantic", "openai", "zmq")]
gate.preload(100, stand_in_gpu=False)
beside_a_gpu = held()
gate.preload(1, stand_in_gpu=True)
(imports_them,) = run_isolated(gate.decide, [request], timeout=300)
for_one = held()
gate.preload(100, stand_in_gpu=True)
(finds_them,) = run_isolated(gate.decide, [request], timeout=300)
print(json.dumps({
    "answers": [imports_them.value, finds_them.value],
    "held": [beside_a_gpu, for_one, held()],
    "stood_in_for": [name in sys.modules for name in ("vllm", "amdsmi")],
}))
"""


def test_a_child_after_the_parents_preload_answers_as_one_that_imports_vllms_packages_itself():
    """repro.gate.preload imports what vLLM imports from other packages once, in the parent, so that the
    children (a dozen per release and run) import only vLLM: the answer must not change by it."""
    done = subprocess.run(
        [sys.executable, "-c", _PRELOADED_AND_NOT], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    imports_them, finds_them = seen["answers"]
    assert imports_them["imports"] and imports_them["pin"] is True, imports_them
    assert finds_them == imports_them
    beside_a_gpu, for_one, for_many = seen["held"]
    assert beside_a_gpu == for_one == [False, False, False], "only children under the stand-in, and enough of them"
    assert for_many == [True, True, True]
    assert seen["stood_in_for"] == [False, False], "vLLM and the modules the stand-in replaces stay out of the parent"
