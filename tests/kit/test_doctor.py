"""``python -m matrix doctor`` through the real command: this machine read, flags over it, the matrix's answer.

Machines that cannot exist here are emulated as ``nox -s tests -- --as-host/--stand-in-gpu`` does:
the start-up hook presents a WSL2 uname to every Python process, and the stand-in ``nvidia-smi``
lists an H200. ``compat_file`` writes the matrix in the shape ``nox -s report`` publishes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import venv
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest
from builders import CUDA_NEW_KERNEL, CUDA_OLD_KERNEL, answered, clean_env, doctor, one_error_line, printed, suite
from compat_file import DEFAULT_RUNNERS, compat_document, write_compat
from conftest import ROOT

from matrix.cells import CELLS, Host
from matrix.doctor.published import release_number
from matrix.host.facts import WSL_LIB
from matrix.questions import Question
from matrix.text.words import HOST_NAMES
from matrix.variables import PIN_MEMORY, V2_MODEL_RUNNER

KEYS = {
    "cell",
    "vllm",
    "verdicts",
    "advice",
    "evidence",
    "issues",
    "command",
    "matrix",
    "nearest_older",
    "release_match",
    "asked",
    "answered_as",
}
# A set-up whose offload and pinned-memory questions need the opt-in in the test's matrix.
OPT_IN_SET_UP = ("--stack", "cuda", "--kernel", Host.WSL2NEW.emulated_release, "--vllm", "0.33.0", "--runner", "v2")


@pytest.fixture
def compat(tmp_path) -> Path:
    return write_compat(tmp_path / "compat.json")


def emulated(host: Host, **extra: str) -> dict[str, str]:
    """A ``host`` machine with an NVIDIA H200, as ``nox -s tests -- --as-host HOST --stand-in-gpu`` presents it."""
    hook = ROOT / "repro" / "bench" / "present_host"
    return clean_env(
        PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]),
        WSLPIN_PRESENT_HOST=host.value,
        WSL_DISTRO_NAME="wslpin-emulated",
        PATH=os.pathsep.join([str(ROOT / "tests" / "stand-in-gpu"), os.environ["PATH"]]),
        **extra,
    )


def _machine_with_uname(tmp_path: Path, node: str, release: str) -> dict[str, str]:
    """An environment in which Python's uname has this node and release (the other fields this machine's)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import platform\n"
        "real = platform.uname()\n"
        f"fake = platform.uname_result(real.system, {node!r}, {release!r}, real.version, real.machine)\n"
        "platform.uname = lambda: fake\n"
    )
    return {k: v for k, v in clean_env(PYTHONPATH=str(hook)).items() if k != "WSLPIN_PRESENT_HOST"}


def installed_release() -> str | None:
    """The matrix release the doctor should pick for the vLLM installed in this test's Python."""
    try:
        installed = release_number(metadata.version("vllm"))
    except metadata.PackageNotFoundError:
        return "0.33.0"
    return next((v for v in DEFAULT_RUNNERS if (release_number(v) or ()) <= (installed or ())), None)


@pytest.mark.reads_host
def test_an_emulated_wsl2_cuda_machine_gets_its_cell_and_says_what_it_read(compat):
    release = installed_release()
    if release is None:
        pytest.skip("the vLLM installed here is older than the test's matrix")
    env = emulated(Host.WSL2NEW)
    got = answered(doctor("--json", "--matrix", str(compat), env=env))
    runner = (DEFAULT_RUNNERS[release] or {"dense": "v2"})["dense"]
    assert got["cell"] == f"cuda-wsl2new-{runner}-graph" and got["vllm"] == release
    assert got["asked"]["kernel"] == Host.WSL2NEW.emulated_release and got["asked"]["host"] == "wsl2new"
    text = doctor("--matrix", str(compat), env=env).stdout
    assert f"{Host.WSL2NEW.emulated_release}: {HOST_NAMES[Host.WSL2NEW]} (uname)" in text
    assert "cuda (nvidia-smi lists 1 GPU(s))" in text
    assert f"{PIN_MEMORY.name} is unset here" in text
    assert f'check it here: nox -s "cell(cuda, wsl2new, {runner}, graph)" -- --vllm {release}' in text


@pytest.mark.reads_host
def test_the_runner_variable_picks_the_runner_and_an_opt_in_already_made_is_said(compat):
    env = emulated(Host.WSL2NEW, **{V2_MODEL_RUNNER.name: "0", PIN_MEMORY.name: "1"})
    got = answered(doctor("--json", "--vllm", "0.33.0", "--matrix", str(compat), env=env))
    assert got["cell"] == "cuda-wsl2new-v1-graph"
    assert got["verdicts"]["offload_with_graphs"] == "needs-opt-in"
    assert got["asked"][PIN_MEMORY.name] == "1"
    text = doctor("--vllm", "0.33.0", "--matrix", str(compat), env=env).stdout
    assert f"runner     v1 ({V2_MODEL_RUNNER.name}=0)" in text
    assert f"{PIN_MEMORY.name}=1 is set: nothing more to set" in text
    assert "offload_with_graphs advice for cuda-wsl2new-v1-graph" not in text


@pytest.mark.parametrize(
    ("kernel", "host"),
    [
        ("5.15.167.4-microsoft-standard-WSL2", "wsl2new"),
        ("4.19.104-microsoft-standard", "wsl2old"),
        ("6.8.0-45-generic", "linux"),
    ],
)
@pytest.mark.reads_host
def test_flags_override_what_the_machine_says(compat, kernel, host):
    env = emulated(Host.WSL2NEW, **{V2_MODEL_RUNNER.name: "1"})
    flags = ("--kernel", kernel, "--stack", "rocm", "--vllm", "0.30.0", "--runner", "v1", "--mode", "eager")
    got = answered(doctor("--json", *flags, "--matrix", str(compat), env=env))
    assert got["cell"] == f"rocm-{host}-v1-eager" and got["vllm"] == "0.30.0" and not got["nearest_older"]
    assert got["advice"]["engine_start"] == f"engine_start advice for rocm-{host}-v1-eager at 0.30.0"


@pytest.mark.reads_host
def test_a_release_the_matrix_lacks_gets_the_nearest_older_one_said_plainly(compat):
    flags = ("--stack", "cuda", "--kernel", "6.8.0-45-generic", "--matrix", str(compat))
    got = answered(doctor("--json", "--vllm", "0.32.5", *flags, env=clean_env()))
    # 0.30.0's default runner is v1.
    assert got["vllm"] == "0.30.0" and got["nearest_older"] and got["cell"] == "cuda-linux-v1-graph"
    text = doctor("--vllm", "0.32.5", *flags, env=clean_env()).stdout
    assert f"vLLM 0.30.0 (the nearest older release: --matrix {compat} has no 0.32.5)" in text
    # A release the matrix holds, written shorter, is that release.
    assert not answered(doctor("--json", "--vllm", "0.33", *flags, env=clean_env()))["nearest_older"]


@pytest.mark.reads_host
def test_a_release_the_matrix_does_not_say_the_default_runner_of_is_assumed_v2(compat):
    flags = ("--stack", "cuda", "--kernel", "6.8.0-45-generic", "--vllm", "0.25.1", "--matrix", str(compat))
    assert answered(doctor("--json", *flags, env=clean_env()))["cell"] == "cuda-linux-v2-graph"
    assumed = "runner     v2 (assumed: the matrix does not say vLLM 0.25.1's default for a dense model; pass --runner)"
    assert assumed in doctor(*flags, env=clean_env()).stdout


@pytest.mark.reads_host
def test_without_runner_the_answer_is_for_the_runner_vllm_picks_for_the_model_class(compat):
    # 0.30.0 of compat_file: V1 for a dense model, V2 for an MoE one; the doctor says which it answered for.
    flags = ("--stack", "cuda", "--kernel", "6.8.0-45-generic", "--vllm", "0.30.0", "--matrix", str(compat))
    dense, moe = (answered(doctor("--json", *flags, *more, env=clean_env())) for more in ((), ("--moe",)))
    assert (dense["cell"], dense["asked"]["model_class"]) == ("cuda-linux-v1-graph", "dense")
    assert (moe["cell"], moe["asked"]["model_class"]) == ("cuda-linux-v2-graph", "moe")
    text = doctor(*flags, env=clean_env()).stdout
    assert "runner     v1 (vLLM 0.30.0's default for a dense model; --moe for an MoE model)" in text
    assert "runner     v2 (vLLM 0.30.0's default for an MoE model)" in doctor(*flags, "--moe", env=clean_env()).stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--vllm", "0.20.0"), "vLLM 0.20.0 is older than every release in --matrix"),
        (("--vllm", "latest"), "vLLM 'latest' is not a release number"),
        (("--vllm", "1" + "0" * 5000 + ".0.0"), "is not a release number"),
        # Past Python's int() limit: no version, where before it was a ValueError's traceback.
        (("--kernel", "5" * 5000 + ".15.0-microsoft-standard-WSL2"), "is not a kernel release"),
        (("--stack", "metal"), "unknown stack 'metal'; valid values: cuda, rocm"),
        (("--runner", "v3"), "unknown runner 'v3'"),
    ],
)
@pytest.mark.reads_host
def test_a_question_the_matrix_cannot_answer_is_one_line(compat, args, says):
    # argparse keeps an option's last value: ``args`` override the set-up before them.
    flags = ("--stack", "cuda", "--kernel", "6.8.0-45-generic", "--matrix", str(compat), *args)
    assert says in one_error_line(doctor(*flags, env=clean_env()))


def _bad_documents() -> dict[str, str]:
    good = compat_document()
    no_verdicts = json.loads(json.dumps(good))
    del no_verdicts["versions"][1]["cells"][3]["verdicts"]
    bad_word = json.loads(json.dumps(good))
    bad_word["versions"][0]["cells"][0]["verdicts"]["engine_start"]["verdict"] = "fine"
    return {
        "not JSON": "{",
        "another schema": json.dumps({**good, "schema": "wslpin-kit.env/1"}),
        "no verdicts": json.dumps(no_verdicts),
        "a verdict outside the vocabulary": json.dumps(bad_word),
        "no release": json.dumps({**good, "versions": []}),
        "nested past any record": "[" * 100_000,
        "a number past Python's int()": '{"schema": 1' + "0" * 5000 + "}",
    }


@pytest.mark.reads_host
@pytest.mark.parametrize("what", [*_bad_documents(), "missing"])
def test_a_matrix_file_of_another_shape_is_one_line_naming_it_and_what_to_do(tmp_path, what):
    path = tmp_path / "compat.json"
    if what != "missing":
        path.write_text(_bad_documents()[what])
    line = one_error_line(doctor("--stack", "cuda", "--matrix", str(path), env=clean_env()))
    assert f"--matrix {path}" in line and "nox -s report" in line


@pytest.mark.reads_host
def test_the_json_holds_the_documented_keys_and_vocabulary(compat):
    got = answered(doctor("--json", "--stack", "cuda", "--matrix", str(compat), env=emulated(Host.WSL2NEW)))
    assert set(got) == KEYS
    questions = {q.value for q in Question}
    assert set(got["verdicts"]) == set(got["advice"]) == set(got["evidence"]["levels"]) == questions
    assert set(got["evidence"]) == {"level", "levels", "gpu", "sentences"}
    assert got["evidence"]["level"] in {"predicted", "emulated", "native", "none"}


@pytest.mark.reads_host
def test_every_cell_and_release_is_answered_with_flags(compat):
    for vllm in DEFAULT_RUNNERS:
        for cell in CELLS:
            flags = ("--kernel", cell.host.emulated_release, "--stack", cell.stack, "--runner", cell.runner)
            got = answered(
                doctor("--json", *flags, "--mode", cell.mode, "--vllm", vllm, "--matrix", str(compat), env=clean_env())
            )
            assert (got["cell"], got["vllm"], got["nearest_older"]) == (cell.id, vllm, False)
            assert got["advice"]["pinned_memory"] == f"pinned_memory advice for {cell.id} at {vllm}"
            assert got["command"] == f'nox -s "{cell.session}" -- --vllm {vllm}'


@pytest.mark.reads_host
def test_no_gpu_and_no_stack_is_one_line_that_says_to_pass_it(compat, tmp_path):
    if os.path.exists("/dev/kfd") or os.path.exists("/dev/dxg") or os.path.isdir(WSL_LIB):
        pytest.skip("this machine has a GPU device or WSL's tools outside PATH")
    # An empty PATH: no nvidia-smi, amd-smi or rocm-smi, whatever this machine has.
    line = one_error_line(doctor("--matrix", str(compat), env=clean_env(PATH=str(tmp_path))))
    assert "no GPU stack found here" in line and "pass --stack cuda or --stack rocm" in line


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A Python with nothing installed, as in a fresh clone with the system Python."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(where, with_pip=False)
    return str(where / "bin" / "python")


@pytest.mark.reads_host
def test_a_bare_python_answers(bare_python, compat):
    # -E -s: no PYTHONPATH, no user site; the venv has no packages. The kit is found from the clone.
    flags = ("--stack", "rocm", "--kernel", "4.19.104-microsoft-standard", "--matrix", str(compat))
    done = subprocess.run(
        [bare_python, "-E", "-s", "-m", "matrix", "doctor", "--json", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert answered(done)["cell"].startswith("rocm-wsl2old-")


@pytest.mark.reads_host
def test_the_doctor_reads_a_real_reports_verdicts_for_each_cell(tmp_path):

    from matrix.report import render_json
    from matrix.report.model import build_report
    from matrix.report.view import advice, plain

    inputs = [
        suite(tmp_path, "cuda-wsl2new-v2-graph", CUDA_NEW_KERNEL, vllm="0.26.0"),
        suite(tmp_path, "cuda-wsl2old-v1-eager", CUDA_OLD_KERNEL, vllm="0.26.0"),
    ]
    report = build_report([str(i) for i in inputs], kit_commit="t")
    render_json.write(report, tmp_path / "compat.json")
    for cell in report.all_cells:
        flags = ("--kernel", cell.cell.host.emulated_release, "--stack", cell.cell.stack, "--vllm", "0.26.1")
        flags += ("--runner", cell.cell.runner, "--mode", cell.cell.mode, "--matrix", str(tmp_path / "compat.json"))
        got = answered(doctor("--json", *flags, env=clean_env()))
        answers = report.verdicts_of(cell).answers
        assert (got["cell"], got["vllm"], got["nearest_older"]) == (cell.cell.id, "0.26.0", True)
        assert got["verdicts"] == {a.question.value: a.verdict.value for a in answers}
        assert got["advice"] == {a.question.value: plain(advice(a)) for a in answers}


def _matrix_with(tmp_path: Path, change: Callable[[dict, dict], None]) -> str:
    """The test's matrix with ``change(cell, verdicts)`` applied to every cell of every release."""
    document = compat_document()
    for version in document["versions"]:
        for cell in version["cells"]:
            change(cell, cell["verdicts"])
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(document))
    return str(path)


@pytest.mark.reads_host
def test_the_doctor_reads_the_variables_as_vllm_does_and_names_the_offload_question_by_mode(tmp_path):
    def real_advice(cell: dict, verdicts: dict) -> None:
        for verdict in verdicts.values():
            if verdict["verdict"] == "needs-opt-in":
                verdict["advice"] = f"set {PIN_MEMORY.name}=1"

    flags = (*OPT_IN_SET_UP, "--matrix", _matrix_with(tmp_path, real_advice))
    # An opt-in made is said, and its advice not repeated.
    text = printed(doctor(*flags, env=clean_env(**{PIN_MEMORY.name: "1"})))
    assert f"{PIN_MEMORY.name}=1 is set here: the opt-in" in text
    assert (
        f"CPU offload in CUDA graph mode  needs-opt-in      emulated\n  {PIN_MEMORY.name}=1 is set: nothing more to set"
        in text
    )
    assert f"set {PIN_MEMORY.name}=1" not in text
    # A value vLLM reads as 1 is the opt-in too; one it cannot read is said, with what to set instead.
    assert f"{PIN_MEMORY.name}=2 is set here, which vLLM reads as 1: the opt-in" in printed(
        doctor(*flags, env=clean_env(**{PIN_MEMORY.name: "2"}))
    )
    text = printed(doctor(*flags, env=clean_env(**{PIN_MEMORY.name: "true"})))
    assert (
        f"{PIN_MEMORY.name}='true' is set here, which vLLM cannot read: it reads the variable as bool(int(value)) "
        f"and stops with a ValueError at start-up; set {PIN_MEMORY.name}=1 to opt in, or unset it"
    ) in text
    # vLLM stops at start-up on it: nothing below works.
    assert "engine start                    broken            predicted\n" in text and " works " not in text
    # The runner's variable the same: read as vLLM reads it, or said to be unreadable.
    no_runner = flags[: flags.index("--runner")] + flags[flags.index("--runner") + 2 :]
    text = printed(doctor(*no_runner, env=clean_env(**{V2_MODEL_RUNNER.name: "01"})))
    assert f"runner     v2 ({V2_MODEL_RUNNER.name}=01, which vLLM reads as 1)" in text
    text = printed(doctor(*no_runner, env=clean_env(**{V2_MODEL_RUNNER.name: "yes"})))
    assert f"{V2_MODEL_RUNNER.name}='yes' is set here, which vLLM cannot read" in text
    assert "runner     v2 (vLLM 0.33.0's default for a dense model; --moe for an MoE model)" in text
    # In eager mode the offload question is not about graphs.
    eager = printed(doctor(*flags, "--mode", "eager", env=clean_env()))
    assert "\nCPU offload in eager mode  needs-opt-in" in eager and "CPU offload in CUDA graph mode" not in eager
    assert "\nCPU offload in CUDA graph mode  needs-opt-in" in printed(doctor(*flags, env=clean_env()))


@pytest.mark.reads_host
def test_the_doctor_says_what_it_cannot_read_and_how_each_answer_is_known(compat, tmp_path):
    flags = ("--stack", "cuda", "--kernel", Host.WSL2NEW.emulated_release, "--matrix", str(compat))
    # A --kernel that is no kernel release is refused, naming the flag and a valid value.
    line = one_error_line(doctor(*flags, "--kernel", "banana", env=clean_env()))
    assert (
        f"--kernel 'banana' is not a kernel release: give a `uname -r` such as {Host.WSL2NEW.emulated_release}" in line
    )
    # This machine's unusual release is answered for what is assumed, said so.
    machine = _machine_with_uname(tmp_path, "wsl", "custom-microsoft-build")
    text = printed(doctor("--stack", "cuda", "--vllm", "0.33.0", "--matrix", str(compat), env=machine))
    assert "kernel     'custom-microsoft-build' (uname) is not a kernel release the doctor can read: " in text
    assert "assumed WSL2 with a kernel below 4.19.121" in text and "cell       cuda-wsl2old-" in text
    # A pre-release or development build is answered from the nearest release, said not to be it.
    text = printed(doctor(*flags, "--vllm", "0.33.0rc1", env=clean_env()))
    assert "vLLM 0.33.0 (for 0.33.0rc1, --vllm)" in text
    assert "0.33.0rc1 is a pre-release of 0.33.0, not 0.33.0 itself: this is vLLM 0.33.0's answer" in text
    text = printed(doctor(*flags, "--vllm", "0.34.0.dev12+g1a2b3c4", env=clean_env()))
    assert "0.34.0.dev12+g1a2b3c4 is a development build of 0.34.0, not 0.34.0 itself" in text
    # Newer than the newest: within a patch says which release answers, beyond it names the gap.
    assert f"vLLM 0.33.0 (the newest release, the same minor: --matrix {compat} has no 0.33.1)" in printed(
        doctor(*flags, "--vllm", "0.33.1", env=clean_env())
    )
    got = answered(doctor("--json", *flags, "--vllm", "0.99.0", env=clean_env()))
    assert (got["vllm"], got["release_match"], got["nearest_older"]) == ("0.33.0", "newer", True)
    assert (
        f"vLLM 0.99.0 is newer than the newest release in --matrix {compat}, 0.33.0, by more than a patch: "
        "this is 0.33.0's answer, and nothing published covers the releases from 0.33.0 to 0.99.0"
    ) in printed(doctor(*flags, "--vllm", "0.99.0", env=clean_env()))

    # The answer leads with the published level: measured only where a run on the set-up's host says so.
    def predicted_with_an_issue(cell: dict, verdicts: dict) -> None:
        for verdict in verdicts.values():
            verdict["level"] = "predicted"
        if cell["id"].startswith("rocm-wsl2new-"):
            cell["status"], cell["issues"] = "known-fail", ["https://github.com/vllm-project/vllm/issues/49861"]

    measured = printed(doctor(*flags, "--kernel", "6.8.0-45-generic", "--vllm", "0.33.0", env=clean_env()))
    assert "\nmeasured on a GPU: vLLM 0.33.0 ran this set-up on native Linux:\nengine start " in measured
    rocm = ("--stack", "rocm", "--vllm", "0.33.0", "--matrix", _matrix_with(tmp_path, predicted_with_an_issue))
    text = printed(doctor(*flags[:4], *rocm, env=clean_env()))
    assert "\npredicted from vLLM 0.33.0's own code, no GPU has run this set-up:\nengine start " in text
    assert "measured" not in text
    # Each known issue of the published entry, with its number.
    assert "  #49861 https://github.com/vllm-project/vllm/issues/49861 (a known failure of this set-up)" in text
    # What checking it here installs, and roughly how much.
    assert "it first installs vLLM 0.33.0 into .nox/: with a GPU here, vLLM and its CUDA torch" in text
    assert "about 9 GB" in text


@pytest.mark.reads_host
def test_the_host_is_vllms_reading_of_the_uname_and_where_a_person_would_read_it_otherwise_the_doctor_says_so(
    compat, tmp_path
):
    """A pre-release's version vLLM cannot int(), WSL1, and WSL's own variable on a kernel without "microsoft":
    each answered for the cell vLLM's reading gives, with a line saying how that differs."""
    flags = ("--stack", "cuda", "--vllm", "0.33.0", "--runner", "v2", "--matrix", str(compat))
    got = answered(doctor("--json", *flags, "--kernel", "5.15.0rc1-microsoft-standard-WSL2", env=clean_env()))
    assert (got["cell"], got["asked"]["host_note"]) == ("cuda-wsl2old-v2-graph", "version-unreadable")
    text = printed(doctor(*flags, "--kernel", "5.15.0rc1-microsoft-standard-WSL2", env=clean_env()))
    assert f"kernel     5.15.0rc1-microsoft-standard-WSL2: {HOST_NAMES[Host.WSL2OLD]} (--kernel)\n" in text
    assert "\n           vLLM cannot read this version (int() of each of its first three parts)" in text
    text = printed(doctor(*flags, "--kernel", "4.4.0-19041-Microsoft", env=clean_env()))
    assert f"4.4.0-19041-Microsoft: WSL1, which vLLM reads as {HOST_NAMES[Host.WSL2OLD]} (--kernel)" in text
    assert "no GPU reaches WSL1: convert the distribution with `wsl --set-version <distro> 2`" in text
    # This machine with a custom kernel's uname and WSL's variable: vLLM reads the uname, so native Linux.
    machine = _machine_with_uname(tmp_path, "box", "6.6.87-custom")
    got = answered(doctor("--json", *flags, env={**machine, "WSL_DISTRO_NAME": "Ubuntu"}))
    assert (got["cell"], got["asked"]["host_note"]) == ("cuda-linux-v2-graph", "wsl-outside-uname")
    text = printed(doctor(*flags, env={**machine, "WSL_DISTRO_NAME": "Ubuntu"}))
    assert "kernel     6.6.87-custom: native Linux (uname)\n           WSL by its own signs" in text


def test_run_from_docs_it_says_to_run_it_from_the_kits_root():
    # docs/matrix/ (the published table) would be `-m matrix` there: a namespace package, no __main__.
    # Without the kit on PYTHONPATH, as a person runs it (a start-up hook there would import the kit first).
    env = {k: v for k, v in clean_env().items() if k not in ("PYTHONPATH", "WSLPIN_PRESENT_HOST")}
    for isolated in ((), ("-E", "-s", "-S")):
        done = subprocess.run(
            [sys.executable, *isolated, "-B", "-m", "matrix", "doctor", "--stack", "cuda"],
            cwd=ROOT / "docs",
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        again = "python3 -m matrix doctor --stack cuda"
        assert one_error_line(done) == f"error: run this from the kit's root: cd {shlex.quote(str(ROOT))} && {again}\n"
