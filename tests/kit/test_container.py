"""Cells inside a container image: the spec per stack x host, and every failure as a crashed cell.

The spec tests describe GPU hosts this machine cannot be (plans for DetectedHost values: no GPU,
no WSL here); nothing else is mocked. The tests marked by the ``smoke_image`` fixture
need a real Docker engine and the image ``nox -s docker_smoke`` builds, and run there.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, run_module
from junitparser import Error, JUnitXml

from matrix.cells import Cell, Host, Mode, Runner, Stack
from matrix.host.classify import DetectedHost
from matrix.junit import suite_properties
from matrix.plan import Plan
from matrix.releases import VLLM_VERSION
from matrix.store.layout import run_dir
from repro import container

GATE_ONLY_CELL = "cuda-wsl2new-v1-graph"


def gpu_host(host: Host, stack: Stack | None) -> DetectedHost:
    return DetectedHost(host, stack, (6, 6, 87), "GPU" if stack else "", "described in the test")


def spec_for(cell: str, here: DetectedHost, environ: dict | None = None) -> container.ContainerSpec:
    return container.container_spec(
        Plan.for_host([Cell.parse(cell)], here),
        "vllm/vllm-openai:v0.33.0",
        cell,
        Path("/runner/scratch"),
        Path("/runner/deps"),
        environ or {},
        "1000:1000",
    )


def gpu_exposure(spec: container.ContainerSpec) -> dict:
    return {
        "gpu_request": spec.gpu_request,
        "devices": spec.devices,
        "group_add": spec.group_add,
        "wsl_mount": [m for m in spec.mounts if m.target == "/usr/lib/wsl"],
        "hsa_dxg": dict(spec.environment).get("HSA_ENABLE_DXG_DETECTION"),
    }


NONE = {"gpu_request": False, "devices": (), "group_add": (), "wsl_mount": [], "hsa_dxg": None}
CUDA = {**NONE, "gpu_request": True}
ROCM_LINUX = {**NONE, "devices": ("/dev/kfd", "/dev/dri"), "group_add": ("video",)}
ROCM_WSL = {
    **NONE,
    "devices": ("/dev/dxg",),
    "wsl_mount": [container.Mount("/usr/lib/wsl", "/usr/lib/wsl", read_only=True)],
    "hsa_dxg": "1",
}
NATIVE = {
    (Stack.CUDA, Host.LINUX): CUDA,
    (Stack.CUDA, Host.WSL2OLD): CUDA,
    (Stack.CUDA, Host.WSL2NEW): CUDA,
    (Stack.ROCM, Host.LINUX): ROCM_LINUX,
    (Stack.ROCM, Host.WSL2OLD): ROCM_WSL,
    (Stack.ROCM, Host.WSL2NEW): ROCM_WSL,
}


@pytest.mark.parametrize(("stack", "host"), list(NATIVE), ids=lambda v: str(v))
def test_a_native_cell_gets_its_gpu_the_way_its_stack_and_host_need(stack, host):
    cell = Cell(stack, host, Runner.V2, Mode.GRAPH)
    assert gpu_exposure(spec_for(cell.id, gpu_host(host, stack))) == NATIVE[stack, host]


@pytest.mark.parametrize(
    ("cell", "here", "exposed"),
    [
        # emulated: the Linux GPU, exposed as on Linux; vLLM is shown a WSL2 uname inside
        ("cuda-wsl2new-v1-graph", gpu_host(Host.LINUX, Stack.CUDA), CUDA),
        ("rocm-wsl2old-v2-eager", gpu_host(Host.LINUX, Stack.ROCM), ROCM_LINUX),
        # gate-only: no GPU, or not the cell's, or a WSL2 host that cannot stand in for another
        ("cuda-linux-v1-graph", gpu_host(Host.LINUX, None), NONE),
        ("rocm-wsl2new-v1-graph", gpu_host(Host.WSL2NEW, Stack.CUDA), NONE),
        ("cuda-linux-v2-eager", gpu_host(Host.WSL2NEW, Stack.CUDA), NONE),
    ],
)
def test_emulated_and_gate_only_cells(cell, here, exposed):
    assert gpu_exposure(spec_for(cell, here)) == exposed


def test_the_kit_is_read_only_the_scratch_the_one_writable_mount_and_the_cells_variables_passed_in():
    environ = {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_LOGGING_LEVEL": "DEBUG", "HF_TOKEN": "secret", "PATH": "/x"}
    spec = spec_for("cuda-linux-v2-graph", gpu_host(Host.LINUX, None), environ)
    # No results tree in it: an image that could write there could plant links for the host to write through.
    assert {(m.source, m.target, m.read_only) for m in spec.mounts} == {
        (str(ROOT), "/kit", True),
        ("/runner/deps", container.DEPS, True),
        ("/runner/scratch", container.SCRATCH, False),
    }
    env = dict(spec.environment)
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"  # the cell's runner wins over the host's
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert "HF_TOKEN" not in env and "PATH" not in env
    assert env["PYTHONPATH"] == f"/kit:{container.DEPS}"
    assert (spec.workdir, spec.user, spec.image) == ("/kit", "1000:1000", "vllm/vllm-openai:v0.33.0")
    script = spec.command[-1]
    assert "python3 -m matrix env --out /scratch/env.json" in script
    assert "--cells cuda-linux-v2-graph" in script and "tests/cell" in script
    assert "--junitxml=/scratch/junit.xml" in script
    # The host's plan, handed over in the scratch directory: the container does not plan again.
    assert "--plan=/scratch/plan.json" in script
    # Everything the container is told to write goes to the scratch directory.
    written = re.findall(r"(?:--out |--junitxml=|--probe-out=)(\S+)", script)
    assert len(written) == 3 and all(path.startswith("/scratch/") for path in written), written
    assert script.count(" -p no:cacheprovider ") == 1  # nor pytest's cache into the kit


def test_a_session_narrowed_to_some_tests_runs_only_those_in_the_container():
    plan = Plan.for_host([Cell.parse("rocm-linux-v1-graph")], gpu_host(Host.LINUX, None))
    args = ("tests/cell/test_gate.py", "-k", "pin")
    spec = container.container_spec(plan, "i", "gate", Path("/r"), Path("/d"), {}, "0:0", args)
    script = spec.command[-1]
    assert script.endswith("-q -rfEX tests/cell/test_gate.py -k pin")
    assert "tests/cell " not in script


def test_staged_dependencies_are_the_cell_extra_and_the_core_one_it_names_pure_python(tmp_path):
    deps = container.stage_dependencies(tmp_path)
    names = {p.name.split("-")[0] for p in deps.glob("*.dist-info")}
    assert {"pytest", "junitparser", "defusedxml", "packaging", "pluggy"} <= names
    assert "docker" not in names and "requests" not in names  # host side only
    assert "vllm_wslpin_kit" not in names  # the kit is mounted, never copied as its own dependency
    assert container.stage_dependencies(tmp_path) == deps  # reused


@pytest.mark.parametrize(
    ("ran", "says"),
    [
        (container.Ran("sha256:x", None, False), "timed out after 5 s: the container was killed and removed"),
        # An OOM kill needs memory pressure this machine's tests should not create: the engine's
        # answer is described here.
        (container.Ran("sha256:x", 137, True), "killed by the out-of-memory killer (exit 137"),
        (container.Ran("sha256:x", 2, False), "exited 2 without a JUnit file"),
        (container.Ran("sha256:x", None, False, "more than 256 MiB"), "wrote more than 256 MiB into its scratch"),
    ],
)
def test_why_a_container_left_no_results(ran, says):
    assert says in container.exit_reason(ran, 5, Path("results/x.container.log"))


def result_file(results: Path, cell: str) -> Path:
    """The cell's one file in the results tree, wherever the image's vLLM put it."""
    (path,) = results.glob(f"*/*/{cell}.xml")
    return path


def crashed(results: Path, cell: str) -> tuple[dict, str]:
    (suite,) = JUnitXml.fromfile(str(result_file(results, cell)))
    assert suite.name == cell
    (case,) = list(suite)
    assert case.name == "no_results"
    (error,) = case.result
    assert isinstance(error, Error)
    return suite_properties(suite), error.message


def run_container(results: Path, *args: str, env: dict | None = None):
    return run_module("repro", "container", "--results", str(results), *args, env=env)


def assert_one_error_line(done, says: str) -> None:
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and says in last


@pytest.mark.reads_host
def test_no_engine_is_a_crashed_cell_with_the_reason(tmp_path):
    socket = tmp_path / "no-engine.sock"
    done = run_container(
        tmp_path, "--cells", GATE_ONLY_CELL, "--image", "wslpin-smoke:any", env={"DOCKER_HOST": f"unix://{socket}"}
    )
    assert_one_error_line(done, f"no Docker engine answers at unix://{socket}")
    # The image never said which vLLM it has: the crash is filed under none.
    assert result_file(tmp_path, GATE_ONLY_CELL).parent == tmp_path / "unknown" / "cell@wslpin-smoke-any"
    props, message = crashed(tmp_path, GATE_ONLY_CELL)
    assert message.startswith("crashed in wslpin-smoke:any: no Docker engine answers")
    assert (props["cell_id"], props["image"], props["image_digest"]) == (GATE_ONLY_CELL, "wslpin-smoke:any", "")


@pytest.mark.reads_host
def test_a_missing_device_is_a_crashed_cell_before_any_engine_is_asked(tmp_path):
    if os.path.exists("/dev/kfd"):
        pytest.skip("this machine has /dev/kfd: the device is not missing here")
    cell = Cell.parse("rocm-linux-v1-eager")
    outcome = container.run_in_image(
        Plan.for_host([cell], gpu_host(Host.LINUX, Stack.ROCM)),  # an AMD GPU host, which this machine is not
        "rocm/vllm:latest",
        tmp_path,
        environ={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert outcome.crashed.startswith("/dev/kfd, /dev/dri not present on this host")
    props, message = crashed(tmp_path, cell.id)
    assert "/dev/kfd" in message
    # The split wrote the plan the container was given, not what this machine would detect.
    assert props["execution"] == "native"
    assert props["execution_reason"] == "this machine is linux with rocm: the cell's own host"


@pytest.fixture(scope="module")
def smoke_image() -> str:
    image = os.environ.get("WSLPIN_SMOKE_IMAGE")
    if not image:
        pytest.skip("needs a Docker engine and the image `nox -s docker_smoke` builds (it runs these tests)")
    return image


def no_containers_left() -> bool:
    import docker

    client = docker.from_env()
    try:
        return client.containers.list(all=True, filters={"label": "wslpin-kit"}) == []
    finally:
        client.close()


@pytest.mark.reads_host
def test_a_gate_only_cell_runs_in_the_image_and_its_junit_comes_back(smoke_image, tmp_path):
    done = run_container(tmp_path, "--cells", GATE_ONLY_CELL, "--image", smoke_image)
    assert done.returncode == 0, done.stderr[-3000:]
    assert " passed" in done.stdout  # pytest's output, streamed from the container
    path = result_file(tmp_path, GATE_ONLY_CELL)
    assert path.parent.parent.name == VLLM_VERSION  # the image's vLLM, from its own environment record
    (suite,) = JUnitXml.fromfile(str(path))
    assert suite.name == GATE_ONLY_CELL
    props = suite_properties(suite)
    assert props["image"] == smoke_image and props["image_digest"].startswith("sha256:")
    assert props["execution"] == "gate-only" and props["vllm_version"]
    # The image's torch, whichever build the installer found for it (a local CPU wheel, or the index's CUDA build).
    assert re.fullmatch(r"cpu|cuda \S+|hip \S+", props["torch_build"]), props["torch_build"]
    gate = [case for case in suite if case.classname == "tests.cell.test_gate"]
    assert gate and all(case.is_passed for case in gate)
    log = (path.parent / f"{GATE_ONLY_CELL}.container.log").read_text()
    assert " passed" in log
    assert not (tmp_path / f"{GATE_ONLY_CELL}.container").exists()  # the raw JUnit is not left to be read twice
    assert no_containers_left()


@pytest.mark.reads_host
def test_a_missing_image_with_no_registry_is_a_crashed_cell(smoke_image, tmp_path):
    done = run_container(tmp_path, "--cells", GATE_ONLY_CELL, "--image", "wslpin-kit-missing:none")
    assert_one_error_line(done, "image wslpin-kit-missing:none is not present and could not be pulled")
    _, message = crashed(tmp_path, GATE_ONLY_CELL)
    assert "could not be pulled" in message


@pytest.mark.reads_host
def test_the_timeout_kills_and_removes_the_container(smoke_image, tmp_path):
    done = run_container(tmp_path, "--cells", GATE_ONLY_CELL, "--image", smoke_image, "--timeout", "2")
    assert_one_error_line(done, "timed out after 2 s: the container was killed and removed")
    props, _ = crashed(tmp_path, GATE_ONLY_CELL)
    assert props["image_digest"].startswith("sha256:")
    assert no_containers_left()


@pytest.mark.reads_host
def test_an_engine_without_a_gpu_runtime_refuses_the_gpu_request(smoke_image, tmp_path):
    import docker

    client = docker.from_env()
    runtimes = client.info().get("Runtimes", {})
    client.close()
    if "nvidia" in runtimes:
        pytest.skip("this engine has the NVIDIA runtime: the request would succeed")
    cell = Cell.parse("cuda-linux-v1-graph")
    # A CUDA host, which this machine is not: the engine itself says it has no GPU to give.
    outcome = container.run_in_image(Plan.for_host([cell], gpu_host(Host.LINUX, Stack.CUDA)), smoke_image, tmp_path)
    assert outcome.crashed.startswith("the Docker engine cannot give the container a GPU")
    assert no_containers_left()


# A hostile image's python3. Before the real one writes the environment record, it plants links to the
# host's canary at each name in VLLM_HOSTILE_LINKS (relative to the directory it was told to write in,
# where the host once wrote its results too); instead of pytest, it leaves VLLM_HOSTILE_JUNIT as the JUnit.
# With VLLM_HOSTILE_PRIVILEGE it first says what privileges it has and tries a device node and a setuid copy of sh
# in that directory; after its JUnit it writes VLLM_HOSTILE_FILL ("bytes" or "files") there, then sleeps
# VLLM_HOSTILE_SLEEP seconds.
HOSTILE_PYTHON = b"""#!/bin/sh
if [ "$2" = matrix ]; then
  dir=$(dirname "$5")
  for link in $VLLM_HOSTILE_LINKS; do
    mkdir -p "$(dirname "$dir/$link")" && ln -sfn "$VLLM_HOSTILE_CANARY" "$dir/$link"
  done
  if [ -n "$VLLM_HOSTILE_PRIVILEGE" ]; then
    grep -E '^(CapEff|NoNewPrivs):' /proc/self/status
    mknod "$dir/null" c 1 3 && echo "hostile: made a device node"
    cp /bin/sh "$dir/sh" && chmod 4755 "$dir/sh" && echo "hostile: left a setuid sh"
  fi
  exec /usr/bin/python3 "$@"
fi
for arg; do case $arg in --junitxml=*) junit=${arg#--junitxml=};; esac; done
dir=$(dirname "$junit")
if [ -n "$VLLM_HOSTILE_JUNIT" ]; then printf '%s' "$VLLM_HOSTILE_JUNIT" > "$junit" && echo "hostile: JUnit written"; fi
case $VLLM_HOSTILE_FILL in
  bytes) head -c 300M /dev/zero > "$dir/fill" ;;
  files) mkdir "$dir/many" && cd "$dir/many" && seq 10001 | xargs touch ;;
esac
sleep "${VLLM_HOSTILE_SLEEP:-0}"
"""
KEY_LINE = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostileImageKeyLine attacker@image"
ENTITIES = f"""<?xml version="1.0"?>
<!DOCTYPE t [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>
<testsuites><testsuite name="pytest"><testcase classname="tests.cell.test_gate" name="&c;">
<failure message="{KEY_LINE}">{KEY_LINE}</failure></testcase></testsuite></testsuites>
"""
TRUNCATED = '<testsuites><testsuite name="pytest"><testcase classname="tests.cell.test_gate" name="test_pin'


@pytest.fixture(scope="module")
def hostile_image(smoke_image) -> Iterator[str]:
    """The smoke image with HOSTILE_PYTHON first on its PATH, made here (no build, no network)."""
    import docker

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        member = tarfile.TarInfo("usr/local/bin/python3")
        member.size, member.mode = len(HOSTILE_PYTHON), 0o755
        tar.addfile(member, io.BytesIO(HOSTILE_PYTHON))
    client = docker.from_env()
    base = client.containers.create(smoke_image, ["true"])
    try:
        base.put_archive("/", archive.getvalue())
        tag = uuid.uuid4().hex[:12]
        made = base.commit(repository="wslpin-hostile", tag=tag)
    finally:
        base.remove(force=True)
    try:
        yield f"wslpin-hostile:{tag}"
    finally:
        client.images.remove(made.id, force=True)
        client.close()


def tree(root: Path, leaving_out: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` but ``leaving_out``: a file's bytes, a link's target, a directory's kind."""
    found: dict[str, bytes | str] = {}
    for path in root.rglob("*"):
        if path == leaving_out or leaving_out in path.parents:
            continue
        found[str(path)] = (
            f"-> {os.readlink(path)}" if path.is_symlink() else "dir" if path.is_dir() else path.read_bytes()
        )
    return found


@pytest.mark.reads_host
@pytest.mark.parametrize(
    ("junit", "links", "says"),
    [
        # Entities that expand to a huge test name, and a key line in the failure text.
        (ENTITIES, (), "the container's junit.xml is not a JUnit file: refused: DTDForbidden"),
        (TRUNCATED, (), "the container's junit.xml is not a JUnit file: not well-formed XML"),
        ("", ("junit.xml",), "the container left junit.xml as a symbolic link, not a file"),
    ],
    ids=["entities", "truncated", "junit-link"],
)
def test_a_hostile_image_cannot_make_the_host_write_or_read_through_its_links(
    hostile_image, tmp_path, junit, links, says
):
    canary = tmp_path / "home" / ".ssh" / "authorized_keys"
    canary.parent.mkdir(parents=True)
    canary.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOwnersOwnKey owner@host\n")
    results = tmp_path / "results"
    before = tree(tmp_path, results)
    # Where the host writes the cell's files, as the image's own record will place them.
    theirs = run_dir(Path(".."), VLLM_VERSION, "cell", hostile_image)
    names = [f"{GATE_ONLY_CELL}{suffix}" for suffix in (".xml", ".env.json", ".container.log", ".probe.json")]
    planted = [*links, *names, *(f"{theirs}/{name}" for name in names)]
    env = {"VLLM_HOSTILE_CANARY": str(canary), "VLLM_HOSTILE_LINKS": " ".join(planted), "VLLM_HOSTILE_JUNIT": junit}
    done = run_container(results, "--cells", GATE_ONLY_CELL, "--image", hostile_image, env=env)
    assert_one_error_line(done, f"crashed in {hostile_image}: {says}")
    assert tree(tmp_path, results) == before  # the canary included: nothing outside the results was touched
    _, message = crashed(results, GATE_ONLY_CELL)
    assert message.startswith(f"crashed in {hostile_image}: {says}")
    kept = tree(results, tmp_path / "none")
    assert all(isinstance(value, bytes) or value == "dir" for value in kept.values()), kept  # no link in the results
    assert not any(b"OwnersOwnKey" in value for value in kept.values() if isinstance(value, bytes))
    # The image's variables, the key line among them, are in its environment record; its result has none of it.
    assert KEY_LINE not in result_file(results, GATE_ONLY_CELL).read_text()
    assert sorted(Path(path).name for path, value in kept.items() if value != "dir") == sorted(
        f"{GATE_ONLY_CELL}{suffix}" for suffix in (".xml", ".env.json", ".container.log")
    )
    assert no_containers_left()


def scratches() -> set[Path]:
    """The containers' scratch directories (and the staged dependencies, which stay) under the kit's build/."""
    return set((ROOT / "build").glob("container-*"))


# A whole, passing JUnit file for the cell, as pytest writes it before its own exit.
PASSING = f"""<?xml version="1.0"?>
<testsuites><testsuite name="pytest"><testcase classname="tests.cell.test_gate" name="test_pin[{GATE_ONLY_CELL}]">
<properties><property name="cell" value="{GATE_ONLY_CELL}"/></properties></testcase></testsuite></testsuites>
"""


@pytest.mark.reads_host
def test_a_container_killed_at_its_timeout_is_a_crash_whatever_it_wrote_before(hostile_image, tmp_path):
    env = {"VLLM_HOSTILE_JUNIT": PASSING, "VLLM_HOSTILE_SLEEP": "600"}
    done = run_container(tmp_path, "--cells", GATE_ONLY_CELL, "--image", hostile_image, "--timeout", "20", env=env)
    assert_one_error_line(done, "timed out after 20 s: the container was killed and removed")
    _, message = crashed(tmp_path, GATE_ONLY_CELL)
    assert "timed out after 20 s" in message
    assert "hostile: JUnit written" in done.stdout  # before the kill: a whole file, not taken
    assert no_containers_left()


@pytest.mark.reads_host
@pytest.mark.parametrize(("fill", "says"), [("bytes", "more than 256 MiB"), ("files", "more than 10,000 files")])
def test_a_container_that_fills_its_scratch_is_killed_there(hostile_image, tmp_path, fill, says):
    before = scratches()
    env = {"VLLM_HOSTILE_JUNIT": PASSING, "VLLM_HOSTILE_FILL": fill, "VLLM_HOSTILE_SLEEP": "600"}
    done = run_container(tmp_path, "--cells", GATE_ONLY_CELL, "--image", hostile_image, "--timeout", "300", env=env)
    assert_one_error_line(done, f"the container wrote {says} into its scratch directory: killed and removed")
    _, message = crashed(tmp_path, GATE_ONLY_CELL)
    assert says in message
    assert no_containers_left() and scratches() == before


@pytest.mark.reads_host
def test_the_image_runs_without_privileges_and_leaves_no_device_node_or_setuid_file(hostile_image, tmp_path):
    # The host runs the container as its own user: as root (CI, many runners) the image is root inside too.
    before = scratches()
    env = {"VLLM_HOSTILE_PRIVILEGE": "1", "VLLM_HOSTILE_JUNIT": PASSING}
    done = run_container(tmp_path, "--cells", GATE_ONLY_CELL, "--image", hostile_image, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    log = (result_file(tmp_path, GATE_ONLY_CELL).parent / f"{GATE_ONLY_CELL}.container.log").read_text()
    assert re.search(r"^CapEff:\s+0+$", log, re.M), log[:2000]
    assert re.search(r"^NoNewPrivs:\s+1$", log, re.M), log[:2000]
    assert "hostile: made a device node" not in log
    # A setuid file it may make is its own user's, in a scratch only the host's user can enter, removed with it.
    assert scratches() == before
    assert no_containers_left()
