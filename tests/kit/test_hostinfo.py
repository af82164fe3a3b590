"""Host detection. Hosts other than the one running the tests (WSL2, GPUs) are
described as HostFacts (plain values), which is all detection reads; the commands
are checked against what detection says about this machine, whatever it is."""

import json
import os
from pathlib import Path

import pytest

from matrix.cells import Cell, Host, Stack
from matrix.host.classify import (
    ENV_SCHEMA,
    REDACTED,
    Gpu,
    HostFacts,
    detect,
    environment_record,
    parse_kernel_version,
    redact,
    vllm_kernel_version,
)
from matrix.host.facts import collect_facts
from matrix.host.record import EnvironmentRecord
from matrix.plan import plan_cell

LINUX = {"system": "Linux", "node": "box", "release": "6.8.0-45-generic", "version": "#1 SMP", "machine": "x86_64"}


def wsl(release: str, **kw) -> HostFacts:
    return HostFacts(uname={**LINUX, "release": release}, **kw)


@pytest.mark.parametrize(
    "release, version",
    [
        ("5.15.167.4-microsoft-standard-WSL2", (5, 15, 167)),
        ("4.19.104-microsoft-standard", (4, 19, 104)),
        ("6.8.0-45-generic", (6, 8, 0)),
        ("6.6", (6, 6, 0)),
        ("garbage", None),
        ("", None),
    ],
)
def test_kernel_versions(release, version):
    assert parse_kernel_version(release) == version


@pytest.mark.parametrize(
    "facts, host",
    [
        (HostFacts(uname=LINUX), Host.LINUX),
        (wsl("5.15.167.4-microsoft-standard-WSL2"), Host.WSL2NEW),
        (wsl("4.19.121-microsoft-standard"), Host.WSL2NEW),  # the first kernel with pinned memory
        (wsl("4.19.104-microsoft-standard"), Host.WSL2OLD),
        # A custom WSL2 kernel without "microsoft" in its uname: vLLM reads the uname alone, so native Linux.
        (wsl("6.1.0-custom", wsl_interop=True), Host.LINUX),
        (wsl("6.1.0-custom", environ={"WSL_DISTRO_NAME": "Ubuntu"}), Host.LINUX),
        (wsl("custom-kernel-microsoft"), Host.WSL2OLD),  # unparsable: treated as too old, like vLLM does
        # A pre-release's version: vLLM cannot int() "0rc1" and takes the old-kernel path.
        (wsl("5.15.0rc1-microsoft-standard-WSL2"), Host.WSL2OLD),
        (wsl("5.15-microsoft-standard-WSL2"), Host.WSL2NEW),  # (5, 15) is past (4, 19, 121)
        (wsl("4.4.0-19041-Microsoft"), Host.WSL2OLD),  # WSL1, as vLLM reads it
    ],
)
def test_host_classification_is_vllms_reading_of_the_uname(facts, host):
    assert detect(facts).host is host


def test_the_machine_is_still_recorded_as_wsl_where_only_wsls_own_signs_say_so():
    facts = wsl("6.1.0-custom", wsl_interop=True, environ={"WSL_DISTRO_NAME": "Ubuntu"})
    record = environment_record(facts)
    assert record["wsl"]["is_wsl"] and not record["wsl"]["uname_says_microsoft"]
    assert record["host"]["detected"] == "linux"


@pytest.mark.parametrize(
    "release, version",
    [
        ("5.15.167.4-microsoft-standard-WSL2", (5, 15, 167)),
        ("5.15.0rc1-microsoft-standard-WSL2", None),
        ("5.15-microsoft-standard-WSL2", (5, 15)),
        (" 5.15.1-microsoft-standard-WSL2", (5, 15, 1)),
        ("4.4.0-19041-Microsoft", (4, 4, 0)),
        ("", None),
    ],
)
def test_the_kernel_version_as_vllm_reads_it(release, version):
    assert vllm_kernel_version(release) == version


def test_gpu_stack_from_device_evidence():
    assert detect(HostFacts(uname=LINUX)).stack is None
    cuda = HostFacts(uname=LINUX, nvidia_gpus=(Gpu("NVIDIA H200", "580.65"),))
    assert (detect(cuda).stack, detect(cuda).gpu) == (Stack.CUDA, "NVIDIA H200")
    assert detect(HostFacts(uname=LINUX, dev_kfd=True)).stack is Stack.ROCM
    # ROCm on WSL2 has /dev/dxg and no /dev/kfd: torch being a HIP build decides.
    dxg = wsl("6.6.87.2-microsoft-standard-WSL2", dev_dxg=True, torch={"version": "2.9", "hip": "6.4", "cuda": None})
    assert detect(dxg).stack is Stack.ROCM
    bare_dxg = wsl("6.6.87.2-microsoft-standard-WSL2", dev_dxg=True)
    assert detect(bare_dxg).stack is None
    assert "/dev/dxg" in detect(bare_dxg).stack_reason


def test_secret_looking_values_are_redacted():
    kept = redact(
        {
            "VLLM_WSL2_ENABLE_PIN_MEMORY": "1",
            "HF_TOKEN": "hf_abc",
            "HF_HOME": "/x",
            "MY_API_KEY": "k",
            "GITHUB_TOKEN": "ghs",
            "DB_PASSWORD": "p",
            "PATH": "/usr/bin",
            "CUDA_VISIBLE_DEVICES": "0",
        }
    )
    assert kept == {
        "CUDA_VISIBLE_DEVICES": "0",
        "DB_PASSWORD": REDACTED,
        "GITHUB_TOKEN": REDACTED,
        "HF_HOME": REDACTED,
        "HF_TOKEN": REDACTED,
        "MY_API_KEY": REDACTED,
        "VLLM_WSL2_ENABLE_PIN_MEMORY": "1",
    }


def test_record_round_trips_the_detected_host():
    facts = wsl(
        "5.15.167.4-microsoft-standard-WSL2",
        nvidia_gpus=(Gpu("NVIDIA GeForce RTX 3090", "581.15"),),
        wsl_exe_version="WSL version: 2.6.1.0",
    )
    record = environment_record(facts)
    assert record["schema"] == ENV_SCHEMA
    assert record["wsl"]["is_wsl"] and record["wsl"]["wsl_exe_version"] == "WSL version: 2.6.1.0"
    assert record["kernel"]["version"] == [5, 15, 167]
    assert EnvironmentRecord.from_json(json.loads(json.dumps(record)), "the record", "").detected == detect(facts)
    # The hash describes the environment, not the moment it was collected.
    assert environment_record(facts)["env_hash"] == record["env_hash"]
    other = wsl("5.15.167.4-microsoft-standard-WSL2", environ={"VLLM_WSL2_ENABLE_PIN_MEMORY": "1"})
    assert environment_record(other)["env_hash"] != record["env_hash"]


@pytest.mark.reads_host
def test_env_command_on_this_machine(cli, tmp_path):
    out = tmp_path / "env.json"
    done = cli("env", "--out", str(out), env={"HF_TOKEN": "hf_secret_value", "VLLM_WSL2_ENABLE_PIN_MEMORY": "1"})
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    record = json.loads(text)
    assert record["schema"] == ENV_SCHEMA
    here = detect(collect_facts())
    assert EnvironmentRecord.from_json(record, "the record", "").detected == here
    # A pinned allocation is only tried where a GPU is present.
    assert (record["gpu"]["pinned_allocation"] is None) == (here.stack is None)
    assert record["environment"]["HF_TOKEN"] == REDACTED
    assert "hf_secret_value" not in text
    assert record["environment"]["VLLM_WSL2_ENABLE_PIN_MEMORY"] == "1"
    assert record["packages"]["vllm"]["version"]  # read from metadata, never imported
    assert record["packages"]["torch"]["version"].startswith("2.")  # read from torch/version.py, not imported
    assert "wrote" in done.stderr and record["env_hash"] in done.stderr


@pytest.mark.reads_host
def test_env_and_plan_work_on_a_bare_python(tmp_path):
    """A fresh runner has no torch, no vLLM, nothing installed: env and plan must still work."""
    import subprocess
    import venv

    from conftest import ROOT

    venv.create(tmp_path / "bare", with_pip=False)
    python = str(tmp_path / "bare" / "bin" / "python")
    env = subprocess.run([python, "-m", "matrix", "env"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert env.returncode == 0, env.stderr
    record = json.loads(env.stdout)
    assert record["packages"] == {"torch": None, "vllm": None, "torch_mismatch": None}
    plan = subprocess.run(
        [python, "-m", "matrix", "plan", "--cell", "cuda-wsl2new-v2-graph"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    expected = plan_cell(
        Cell.parse("cuda-wsl2new-v2-graph"), EnvironmentRecord.from_json(record, "the record", "").detected
    ).execution
    assert plan.returncode == 0 and f" {expected} " in plan.stdout, plan.stderr


def test_matrix_never_imports_torch_vllm_or_repro():
    import os
    import subprocess
    import sys

    from conftest import ROOT

    code = (
        "import sys, pkgutil, importlib, matrix\n"
        "for m in pkgutil.iter_modules(matrix.__path__): importlib.import_module('matrix.' + m.name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'vllm', 'repro')))\n"
    )
    # Without the start-up hook that presents an emulated host (`nox -s tests -- --as-host`): it is repro's.
    env = {k: v for k, v in os.environ.items() if k != "WSLPIN_PRESENT_HOST"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has ended: where no init reaps it, it stays listed)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


@pytest.mark.reads_host
def test_hostile_gpu_tools_on_path_end_bounded_and_leave_no_process(cli, tmp_path):
    # Stand-ins for the GPU tools, which this machine may not have: one hangs with a child that holds its
    # output (the reader waited for ever, and the child outlived the command), one writes without end
    # (5 M lines took 1.7 GB), one answers as amd-smi does where a section has nothing: "N/A" (a traceback).
    tools = tmp_path / "bin"
    tools.mkdir()
    child_pid = tmp_path / "child.pid"
    scripts = {
        "nvidia-smi": f"#!/bin/sh\nsleep 300 &\necho $! > {child_pid}\nwait\n",
        "rocm-smi": "#!/bin/sh\nyes 'GPU[0], Radeon'\n",
        "amd-smi": '#!/bin/sh\necho \'[{"asic": "N/A", "driver": "N/A"}]\'\n',
    }
    for name, text in scripts.items():
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    (tools / "amd-smi").rename(tmp_path / "amd-smi")  # else its answer comes first, and rocm-smi is not asked
    path = {"PATH": f"{tools}:{os.environ['PATH']}"}
    out = tmp_path / "env.json"
    done = cli("env", "--out", str(out), env=path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["gpu"]["devices"] == []
    assert not running(int(child_pid.read_text()))
    (tmp_path / "amd-smi").rename(tools / "amd-smi")
    # Its hang was the first run's (one wait for it is enough); still first on PATH, before any stand-in's.
    (tools / "nvidia-smi").write_text("#!/bin/sh\nexit 1\n")
    done = cli("env", "--out", str(out), env=path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [d["name"] for d in json.loads(out.read_text())["gpu"]["devices"]] == ["AMD GPU"]
