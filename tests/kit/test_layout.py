"""Results kept per vLLM release and per test group: no session replaces another's files.

Real files throughout: pytest runs the cells' tests as the gate, probe and repro sessions
run them, ``matrix split`` writes them where ``matrix.store.layout`` says, the report reads the tree.
"""

import json
from pathlib import Path

import pytest
from conftest import require_gate_only, run_module

from matrix.host.record import EnvironmentRecord
from matrix.plan import cell_pytest_args
from matrix.releases import UNKNOWN_RELEASE, VLLM_VERSION
from matrix.report.compat_cases import read_joined
from matrix.store.groups import GROUP_TESTS
from matrix.store.layout import run_dir

CELLS = "cuda-wsl2new-v2-graph,rocm-wsl2new-v2-graph"
# The tests each session runs (noxfile.py: gate, probe, repro), by group.
SESSIONS = {group: GROUP_TESTS[group] for group in ("gate", "probe", "repro")}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("env") / "env.json"
    assert run_module("matrix", "env", "--out", str(path)).returncode == 0
    return path


@pytest.fixture(scope="module")
def plan(env) -> Path:
    """The sessions' plan, made from their environment record."""
    path = env.parent / "plan.json"
    assert run_module("matrix", "plan", "--cells", CELLS, "--env", str(env), "--out", str(path)).returncode == 0
    return path


@pytest.fixture(scope="module")
def raw(tmp_path_factory, plan) -> dict[str, Path]:
    """Each session's pytest JUnit, run once (vLLM's gate is slow to ask) and split by each test as it needs."""
    # The gate's answers pass only where the cells have no GPU of theirs (a stand-in GPU is not real).
    require_gate_only(CELLS)
    tmp = tmp_path_factory.mktemp("raw")
    found = {}
    for group, tests in SESSIONS.items():
        found[group] = tmp / f"{group}.xml"
        args = cell_pytest_args(CELLS, str(found[group]), str(tmp / f"{group}.json"), str(plan))
        done = run_module("pytest", *tests, *args)
        assert done.returncode == 0, done.stdout[-3000:]
    return found


def split(results: Path, raw: Path, group: str, env: Path, plan: Path) -> Path:
    """What a session does after pytest: split its JUnit by its plan into the directory its environment record gives."""
    out = run_dir(results, json.loads(env.read_text())["packages"]["vllm"]["version"], group)
    done = run_module("matrix", "split", str(raw), "--plan", str(plan), "--env", str(env), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def release_record(tmp: Path, env: Path, release: str) -> Path:
    """The same machine's record, naming another vLLM release (this environment has one vLLM installed)."""
    record = json.loads(env.read_text())
    record["packages"]["vllm"]["version"] = release
    path = tmp / f"env-{release}.json"
    path.write_text(json.dumps(record))
    return path


def report(results: Path, out: Path) -> dict:
    done = run_module("matrix", "report", str(results), "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    return read_joined(out / "compat.json")


def cells_of(document: dict, release: str) -> dict[str, dict]:
    (version,) = [v for v in document["versions"] if v["vllm"] == release]
    return {c["id"]: c for c in version["cells"]}


def test_each_release_and_group_has_its_own_directory():
    root = Path("results")
    assert run_dir(root, "0.33.0", "gate") == root / "0.33.0" / "gate"
    assert run_dir(root, "0.32.0", "gate") == root / "0.32.0" / "gate"
    assert run_dir(root, "0.33.0", "probe") == root / "0.33.0" / "probe"
    image = run_dir(root, "0.33.0", "cell", "vllm/vllm-openai:v0.33.0")
    assert image == root / "0.33.0" / "cell@vllm-vllm-openai-v0.33.0"
    # A container that crashed before reporting its vLLM, or a record from anywhere: one component under root.
    assert EnvironmentRecord({"packages": {"vllm": None}}).vllm_release == UNKNOWN_RELEASE
    assert run_dir(root, UNKNOWN_RELEASE, "cell", "x") == root / "unknown" / "cell@x"
    assert run_dir(root, "../..", "gate") == root / "unknown" / "gate"


@pytest.mark.reads_host
def test_gate_then_probe_then_repro_keeps_the_gate_results(tmp_path, env, plan, raw):
    results = tmp_path / "results"
    dirs = {group: split(results, raw[group], group, env, plan) for group in ("gate", "probe", "repro")}
    assert len(set(dirs.values())) == 3
    for out in dirs.values():
        assert {p.name for p in out.glob("*.xml")} == {f"{c}.xml" for c in CELLS.split(",")}
    cells = cells_of(report(results, tmp_path / "report"), VLLM_VERSION)
    assert cells["cuda-wsl2new-v2-graph"]["status"] == "pass"
    assert cells["rocm-wsl2new-v2-graph"]["status"] == "known-fail"
    gate = [c for c in cells["cuda-wsl2new-v2-graph"]["cases"] if c["classname"] == "tests.cell.test_gate"]
    assert gate and {c["status"] for c in gate} == {"pass"}
    # The GPU groups (skipped on this machine) came from the probe and repro files, beside the gate's.
    sources = {a["source"] for c in cells["cuda-wsl2new-v2-graph"]["cases"] for a in c["attempts"]}
    assert {Path(s).parent for s in sources} == set(dirs.values())


@pytest.mark.reads_host
def test_another_release_leaves_the_first_in_place(tmp_path, env, plan, raw):
    results = tmp_path / "results"
    first = split(results, raw["gate"], "gate", env, plan)
    before = {p: p.read_bytes() for p in first.iterdir()}
    second = split(results, raw["gate"], "gate", release_record(tmp_path, env, "0.32.0"), plan)
    assert second == results / "0.32.0" / "gate" and first == results / VLLM_VERSION / "gate"
    assert {p: p.read_bytes() for p in first.iterdir()} == before
    document = report(results, tmp_path / "report")
    assert [v["vllm"] for v in document["versions"]] == [VLLM_VERSION, "0.32.0"]
    for release in (VLLM_VERSION, "0.32.0"):
        cell = cells_of(document, release)["cuda-wsl2new-v2-graph"]
        assert cell["provenance"]["vllm_version"] == release and cell["status"] == "pass"


@pytest.mark.reads_host
def test_a_crashed_image_run_replaces_no_host_result(tmp_path, env, plan, raw):
    """No Docker engine answers: the crash lands under unknown/gate@<image>, the host's files stay as they were,
    and the report shows it as a crash in no release, which the doctor reads past."""
    results = tmp_path / "results"
    host = split(results, raw["gate"], "gate", env, plan)
    before = {p: p.read_bytes() for p in host.iterdir()}
    done = run_module(
        "repro",
        "container",
        "--cells",
        CELLS,
        "--image",
        "vllm/vllm-openai:v0.33.0",
        "--results",
        str(results),
        "--group",
        "gate",
        env={"DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert done.returncode == 1 and "no Docker engine answers" in done.stderr.splitlines()[-1]
    crashed = results / "unknown" / "gate@vllm-vllm-openai-v0.33.0"
    assert {p.name for p in crashed.glob("*.xml")} == {f"{c}.xml" for c in CELLS.split(",")}
    assert {p: p.read_bytes() for p in host.iterdir()} == before
    assert "FAILED cuda-wsl2new-v2-graph: no_results" in done.stdout  # this run's table, not the host's
    done = run_module("matrix", "report", str(results), "--out", str(tmp_path / "report"))
    assert done.returncode == 1  # a crashed cell is bad news
    document = json.loads((tmp_path / "report" / "compat.json").read_text())
    assert cells_of(document, VLLM_VERSION)["cuda-wsl2new-v2-graph"]["status"] == "pass"
    # It is no vLLM release: shown as a crash in no release, and the doctor still answers from the report.
    assert [v["vllm"] for v in document["versions"]] == [VLLM_VERSION]
    unplaced = document["inputs"]["crashed_without_release"]
    assert {(c["cell"], c["status"]) for c in unplaced} == {(c, "crashed") for c in CELLS.split(",")}
    assert all("no Docker engine answers" in c["reason"] for c in unplaced)
    assert "Runs that crashed before vLLM answered" in (tmp_path / "report" / "COMPATIBILITY.md").read_text()
    doctor = run_module(
        "matrix",
        "doctor",
        "--matrix",
        str(tmp_path / "report" / "compat.json"),
        "--stack",
        "cuda",
        "--kernel",
        "6.6.87.2-microsoft-standard-WSL2",
        "--vllm",
        VLLM_VERSION,
        "--json",
    )
    assert doctor.returncode == 0, doctor.stderr
    assert json.loads(doctor.stdout)["vllm"] == VLLM_VERSION
