"""The release axis: changes between vLLM releases, evidence, contradicted rules, and the published matrix."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from builders import NOW, envelope, gate_case, written_compat
from conftest import ROOT, run_module
from package_index import point_pip_at, refusing_url, served, write_index

from matrix.cells import Cell
from matrix.errors import MatrixError
from matrix.host.classify import ENV_SCHEMA
from matrix.host.facts import collect_environment
from matrix.host.record import EnvironmentRecord
from matrix.junit import parse
from matrix.plan import Execution, Plan
from matrix.report import render_html, render_json, render_md
from matrix.report.bench import BenchSummary
from matrix.report.compat_cases import read_joined
from matrix.report.model import Evidence, EvidenceKind, build_report
from matrix.report.outputs import report_outputs, write_outputs
from matrix.report.view import build_view, evidence_sentence
from matrix.store import history_archive, release_index
from matrix.store.history import normalised
from matrix.store.layout import EVIDENCE_STORE
from matrix.store.reading import ResultKind

PUBLISHED = ROOT / "docs" / "matrix" / "compat.json"
COMMITTED_HISTORY = ROOT / "docs" / "evidence" / "history.tar.xz"
STORE = ROOT / EVIDENCE_STORE


def rocm_new_kernel(tmp_path, version: str, pin: str):
    path = tmp_path / f"{version}.xml"
    path.write_text(
        f'<testsuite name="rocm-wsl2new-v1-graph">{envelope("rocm-wsl2new-v1-graph", vllm=version)}'
        f"{gate_case('p', 'pin', '1', pin)}</testsuite>"
    )
    return path


def test_a_change_between_releases_names_the_rule_that_explains_it(tmp_path):
    report = build_report(
        [str(rocm_new_kernel(tmp_path, "0.27.0", "False")), str(rocm_new_kernel(tmp_path, "0.28.0", "True"))],
        kit_commit="t",
        now=NOW,
    )
    assert list(report.versions) == ["0.28.0", "0.27.0"]  # newest first
    (change,) = report.changes
    assert (change.cell, change.vllm) == ("rocm-wsl2new-v1-graph", "0.28.0")
    assert change.before == "pass: pin off" and change.after == "pass: pin on"
    assert any(rule.startswith("rocm-new-kernel-pins: #50126") for rule in change.rules)
    assert "since **0.28.0**" in render_md.render(report)
    assert [c.vllm for c in report.timeline("rocm-wsl2new-v1-graph")] == ["0.27.0", "0.28.0"]


def test_the_page_shows_a_cells_timeline_once_in_the_newest_release(tmp_path):
    versions = ("0.26.0", "0.27.0", "0.28.0")
    report = build_report(
        [str(rocm_new_kernel(tmp_path, v, "True" if v == "0.28.0" else "False")) for v in versions],
        kit_commit="t",
        now=NOW,
    )
    assert '<ol class="timeline">' not in render_html.render(report)  # the glance leaves it to the pages
    newest, *older = (render_html.render_release(report, v) for v in reversed(versions))
    assert newest.count('<ol class="timeline">') == 24  # every cell of 0.28.0, none of the older releases
    for page in older:
        assert '<ol class="timeline">' not in page
        assert page.count('across releases: see <a href="0.28.0.html#') == 24
    newest = next(build_view(report).releases()).rows[0].cells[0]
    assert [step.vllm for step in newest.timeline] == list(versions)


def test_evidence_and_probes(tmp_path):
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "h200.json").write_text(
        json.dumps(
            {
                "schema": "wslpin-kit.probe/1",
                "collected_at": "2026-11-20T10:00:00+00:00",
                "host": {"stack": "rocm", "host": "wsl2new", "gpu": "Radeon RX 7900 XTX", "kernel": "6.6.87"},
                "sections": {"pin_alloc": {"status": "ok"}, "uva_view": {"status": "failed"}},
            }
        )
    )
    report = build_report(
        [str(rocm_new_kernel(tmp_path, "0.33.0", "True"))], kit_commit="t", now=NOW, probes=str(probes)
    )
    cell = report.cell("0.33.0", *Cell.parse("rocm-wsl2new-v1-graph"))
    assert report.evidence(cell) == [
        Evidence(EvidenceKind.GATE_ONLY, "2026-11-29", "0.33.0"),
        Evidence(EvidenceKind.PROBE, "2026-11-20", "Radeon RX 7900 XTX", passed=False),
    ]
    assert [evidence_sentence(e) for e in report.evidence(cell)] == [
        "predicted: vLLM 0.33.0's own code decides, without a GPU (gate-only) (2026-11-29)",
        "probe on Radeon RX 7900 XTX (2026-11-20): mechanism fails",
    ]
    (probes / "broken.json").write_text("{}")
    with pytest.raises(MatrixError, match="not a probe record"):
        build_report([str(tmp_path / "0.33.0.xml")], kit_commit="t", now=NOW, probes=str(probes))


def test_each_kind_of_evidence_reads_as_the_published_sentence():
    bench = BenchSummary(
        "b.json", "cuda-linux-v1-graph", "2026-11-25T00:00:00", "vllm", "0.33.0", "ok", 4, "no difference"
    )
    assert [
        evidence_sentence(e)
        for e in (
            Evidence(EvidenceKind.GATE_ONLY, "2026-11-27", "0.33.0"),
            Evidence(EvidenceKind.EMULATED, "2026-11-28", "NVIDIA H200", runner="h200-vllm-0.26.0-2026-11-28"),
            Evidence(EvidenceKind.NATIVE, "2026-11-29", "RTX 4090 (24 GB)", runner="wsl-1"),
            Evidence(
                EvidenceKind.SUPERSEDED,
                "",
                "",
                execution=ResultKind(Execution.GATE_ONLY),
                counts=(("pass", 3), ("skipped", 1)),
            ),
            Evidence(EvidenceKind.PROBE, "2026-11-20", "RTX 4090", passed=True),
            Evidence(EvidenceKind.BENCH, "2026-11-25", "0.33.0", bench=bench),
        )
    ] == [
        "predicted: vLLM 0.33.0's own code decides, without a GPU (gate-only) (2026-11-27)",
        "emulated on NVIDIA H200: native Linux, the uname presented as the cell's, runner h200-vllm-0.26.0-2026-11-28 "
        "(2026-11-28)",
        "native run on RTX 4090 (24 GB), runner wsl-1 (2026-11-29)",
        "also a gate-only result, not used for the status (3 pass, 1 skipped)",
        "probe on RTX 4090 (2026-11-20): mechanism works",
        "bench 2026-11-25 (vLLM 0.33.0, concurrency 4): no difference",
    ]


def test_compat_json_carries_the_evidence_as_records_and_words(tmp_path):
    native = tmp_path / "native.xml"
    native.write_text(
        f'<testsuite name="x">{envelope("rocm-wsl2new-v1-graph", execution="native", gpu="RX 7900", runner_name="w1")}'
        f"{gate_case('p', 'pin', '1', 'True')}</testsuite>"
    )
    report = build_report([str(rocm_new_kernel(tmp_path, "0.33.0", "True")), str(native)], kit_commit="t", now=NOW)
    document = written_compat(report, tmp_path)
    assert document == render_json.to_document(report)
    (found,) = [c for c in document["versions"][0]["cells"] if c["id"] == "rocm-wsl2new-v1-graph"]
    assert [(r["kind"], r["source"], r["runner"], r["execution"], r["counts"]) for r in found["evidence_records"]] == [
        ("native", "RX 7900", "w1", None, None),
        ("superseded", "", None, "gate-only", {"pass": 1}),
    ]
    assert found["evidence"] == [
        "native run on RX 7900, runner w1 (2026-11-29)",
        "also a gate-only result, not used for the status (1 pass)",
    ]


def test_markdown_and_the_page_show_the_same_sections_in_the_same_order(tmp_path):
    report = build_report(
        [str(rocm_new_kernel(tmp_path, "0.27.0", "False")), str(rocm_new_kernel(tmp_path, "0.28.0", "True"))],
        kit_commit="t",
        now=NOW,
        previous={"versions": []},
    )
    titles = [s.title for s in build_view(report).sections() if s.key != "legend"]
    assert titles == ["Changes across releases", "Changes since the previous report"]
    markdown, page = render_md.render(report), render_html.render(report)
    assert [markdown.index(f"## {t}\n") for t in titles] == sorted(markdown.index(f"## {t}\n") for t in titles)
    assert [page.index(f"<h2>{t}</h2>") for t in titles] == sorted(page.index(f"<h2>{t}</h2>") for t in titles)


def test_the_grid_names_the_evidence_without_cutting_a_gpu_name(tmp_path):
    path = tmp_path / "native.xml"
    path.write_text(
        f'<testsuite name="x">{envelope("cuda-wsl2new-v2-graph", execution="native", gpu="RTX 4090 (24 GB)")}'
        f"{gate_case('p', 'pin', 'unset', 'False')}</testsuite>"
    )
    report = build_report([str(path)], kit_commit="t", now=NOW)
    (cell,) = [
        c for row in next(build_view(report).releases()).rows for c in row.cells if c.id == "cuda-wsl2new-v2-graph"
    ]
    assert cell.evidence_line == "native run on RTX 4090 (24 GB), runner ?"
    assert '<div class="ev">native run on RTX 4090 (24 GB), runner ?</div>' in render_html.render_release(
        report, "0.33.0"
    )


def test_contradicted_rules_are_named(tmp_path):
    path = tmp_path / "a.xml"
    path.write_text(
        f'<testsuite name="x">{envelope("cuda-wsl2new-v1-eager")}{gate_case("p", "pin", "unset", "True")}</testsuite>'
    )
    report = build_report([str(path)], kit_commit="t", now=NOW)
    (c,) = report.contradictions
    assert (c.rule, c.key, c.expected, c.observed, c.status) == ("wsl-no-pin", "pin", "False", "True", "regression")
    assert "rule <code>wsl-no-pin</code> expects pin=False" in render_html.render_release(report, "0.33.0")
    glance = render_html.render(report)
    assert (
        "expects" not in glance and '<a href="releases/0.33.0.html#contradictions">vLLM 0.33.0</a>: 1 result' in glance
    )


@pytest.mark.browser
def test_the_release_selector_shows_one_release_at_a_time(tmp_path):
    from matrix.ci import browser

    try:
        browser.chromium()
    except browser.BrowserMissingError as exc:
        pytest.skip(f"{exc} (.ci/run installs it)")
    report = build_report(
        [str(rocm_new_kernel(tmp_path, v, "True")) for v in ("0.28.0", "0.30.0")], kit_commit="t", now=NOW
    )
    write_outputs(tmp_path, report_outputs(report))
    loaded = browser.load((tmp_path / "index.html").as_uri() + "#release=0.28.0")
    assert loaded.console == []
    assert '<section class="release" data-release="0.30.0" hidden="">' in loaded.dom
    assert '<section class="release" data-release="0.28.0">' in loaded.dom
    assert loaded.dom.count('<td class="cell') == 48


# --- the published matrix (docs/matrix/, written by `nox -s publish`) -----------------------------


@pytest.fixture(scope="module")
def published():
    if not PUBLISHED.exists():
        pytest.fail("docs/matrix/compat.json is missing: run `nox -s publish` and commit docs/matrix/")
    return read_joined(PUBLISHED)


def cell(published, vllm, cell_id):
    version = next(v for v in published["versions"] if v["vllm"] == vllm)
    return next(c for c in version["cells"] if c["id"] == cell_id)


def observed(c, key, pin_env):
    return next(
        case["observed"]
        for case in c["cases"]
        if case["properties"].get("gate_key") == key and case["properties"].get("pin_env") == pin_env
    )


def test_the_published_matrix_has_every_release_and_cell_with_its_evidence(published):
    # Every release publish computes by default: the kit's own list and those a --with-new-releases publish added.
    assert [v["vllm"] for v in published["versions"]] == list(reversed(release_index.known(COMMITTED_HISTORY)))
    for version in published["versions"]:
        assert len(version["cells"]) == 24
        for c in version["cells"]:
            assert c["status"] != "missing" and c["evidence"], (version["vllm"], c["id"])


def test_the_published_matrix_was_made_by_a_committed_kit_on_this_branch(published):
    commit = published["kit_commit"]
    assert not commit.endswith("+dirty"), f"docs/matrix was made from uncommitted changes ({commit}): publish again"
    found = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT, capture_output=True)
    if found.returncode == 128:
        pytest.skip(f"kit commit {commit} is not in this checkout's history (a shallow clone or no git)")
    assert found.returncode == 0, f"docs/matrix was made at {commit}, which is not an ancestor of HEAD"


def test_the_history_behind_the_published_matrix_is_committed_whole_beside_it(published, tmp_path):
    # What a fresh clone reuses instead of recomputing (matrix.store.history_archive): each release's files, as the
    # matrix read them, under a manifest that names each with its hash and the key it was computed under.
    # Beside the history, the matrix reads the evidence store's records (matrix.store.evidence): a GPU's results, which
    # no recomputation gives back and which the store keeps itself.
    read: dict[str, set[str]] = {}
    history = [name for name in published["inputs"]["files"] if Path(name).parts[:2] == ("results", "history")]
    for name in history:
        release, cell_file = Path(name).parts[-2:]
        read.setdefault(release, set()).add(cell_file)
    stored = len(published["inputs"]["files"]) - len(history)
    assert stored == len([p for p in STORE.rglob("*.xml") if p.is_file()]), "the store's records, each read once"
    committed = history_archive.read_committed(COMMITTED_HISTORY)
    assert sorted(committed) == sorted(read), "run `nox -s publish` and commit docs/"
    cases = 0
    for release, files in sorted(committed.items()):
        entry = tmp_path / release
        entry.mkdir()
        for name, data in files.items():
            (entry / name).write_bytes(data)
        assert history_archive.cached_entry(entry) == entry, (
            f"{release} is not whole: run `nox -s publish`, commit docs/"
        )
        assert {p.name for p in entry.glob("*.xml")} == read[release], release
        cases += sum(len(normalised(entry)[name][1]) for name in read[release])
    from_store = sum(len(list(parse(p).iter("testcase"))) for p in STORE.rglob("*.xml"))
    assert cases + from_store == published["inputs"]["testcases_read"]


def test_what_publish_rewrites_leaves_the_kit_commit_clean_and_a_code_change_does_not(tmp_path):
    # publish rewrites docs/matrix/ and docs/evidence/ and then names the kit's commit in what it wrote:
    # its own outputs must not make that commit "+dirty", a change to the kit's code must.
    kit = tmp_path / "kit"
    shutil.copytree(ROOT / "matrix", kit / "matrix", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("docs/matrix/COMPATIBILITY.md", "docs/evidence/history/0.33.0/manifest.json", "README.md"):
        (kit / name).parent.mkdir(parents=True, exist_ok=True)
        (kit / name).write_text("committed\n")
    git = ["git", "-C", str(kit), "-c", "user.name=t", "-c", "user.email=t@t"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "kit"]):
        subprocess.run([*git, *argv], check=True)

    def commit() -> str:
        code = "from matrix.host import facts; print(facts.kit_commit())"
        return subprocess.run([sys.executable, "-c", code], cwd=kit, capture_output=True, text=True).stdout.strip()

    for name in ("docs/matrix/COMPATIBILITY.md", "docs/evidence/history/0.33.0/manifest.json"):
        (kit / name).write_text("published again\n")
    assert not commit().endswith("+dirty")
    (kit / "README.md").write_text("changed\n")
    assert commit().endswith("+dirty")


def test_every_published_cell_answers_the_three_questions(published):
    for version in published["versions"]:
        for c in version["cells"]:
            assert set(c["verdicts"]) == {"engine_start", "offload_with_graphs", "pinned_memory"}, c["id"]
            assert all(v["verdict"] != "unknown" for v in c["verdicts"].values()), (version["vllm"], c["id"])


def test_facts_no_one_disputes(published):
    # CUDA on a new WSL2 kernel: pinned memory only when asked, since 0.24.0 (#41496).
    assert observed(cell(published, "0.33.0", "cuda-wsl2new-v2-graph"), "pin", "unset") == "False"
    assert observed(cell(published, "0.33.0", "cuda-wsl2new-v2-graph"), "pin", "1") == "True"
    assert observed(cell(published, "0.23.0", "cuda-wsl2new-v1-graph"), "pin", "1") == "False"
    # ROCm on a new WSL2 kernel pins whatever the variable says (#50126, 0.28.0; #49861 open).
    for pin_env in ("unset", "1"):
        assert observed(cell(published, "0.33.0", "rocm-wsl2new-v1-eager"), "pin", pin_env) == "True"
        assert observed(cell(published, "0.27.0", "rocm-wsl2new-v1-eager"), "pin", pin_env) == "False"
    # V2 without pinned memory: NonUvaBuffer since 0.30.0 (#56908), a crash before.
    assert observed(cell(published, "0.30.0", "cuda-wsl2old-v2-graph"), "v2_buffer", "unset") == "NonUvaBuffer"
    assert (
        observed(cell(published, "0.29.0", "cuda-wsl2old-v2-graph"), "v2_buffer", "unset")
        == "crash: UVA is not available"
    )
    # 0.25.x: importing vLLM under WSL with the warning path raised a circular import (#48397);
    # the patch release 0.25.1 still did (#48444 came in 0.26.0).
    for release in ("0.25.0", "0.25.1"):
        assert observed(cell(published, release, "cuda-wsl2old-v1-graph"), "imports", "unset") == "False"
        assert observed(cell(published, release, "cuda-wsl2new-v1-graph"), "imports", "unset") == "True"
    assert observed(cell(published, "0.26.0", "cuda-wsl2old-v1-graph"), "imports", "unset") == "True"


def test_what_a_user_gets_follows_each_releases_own_facts(published):
    # The V2 runner creates the CPU-weight offloader from 0.28.0 (read from each release's source): before it,
    # its offload is ignored in every release, not only in 0.26.0, the one measured on a GPU.
    for release, has in (("0.24.0", "False"), ("0.27.1", "False"), ("0.28.0", "True"), ("0.33.0", "True")):
        assert observed(cell(published, release, "cuda-linux-v2-graph"), "v2_offloader", "unset") == has
    for release in ("0.24.0", "0.26.0", "0.27.1"):
        offload = cell(published, release, "cuda-wsl2new-v2-graph")["verdicts"]["offload_with_graphs"]
        assert offload["verdict"] == "ignored", (release, offload)
    # With the runner's variable unset, a dense model runs on V2 and an MoE model on V1 until 0.29.0.
    runners = {v["vllm"]: v["default_runners"] for v in published["versions"]}
    assert runners["0.28.0"] == {"dense": "v2", "moe": "v1"} and runners["0.29.0"] == {"dense": "v2", "moe": "v2"}
    # Eager offload on WSL2 runs without the variable, copying pageable weights: slow, not needs-opt-in.
    eager = cell(published, "0.33.0", "cuda-wsl2new-v1-eager")["verdicts"]["offload_with_graphs"]
    assert (eager["verdict"], eager["advice"]) == ("slow", "set VLLM_WSL2_ENABLE_PIN_MEMORY=1")
    # No CUDA engine starts below kernel 4.19.121, and the answer says it rests on NVIDIA's documentation.
    start = cell(published, "0.33.0", "cuda-wsl2old-v1-graph")["verdicts"]["engine_start"]
    assert (start["verdict"], start["level"]) == ("needs-wsl-update", "documented")
    # Where nothing avoids it on the old kernel, but the newer kernel's way round does: the update, then that.
    start = cell(published, "0.23.0", "cuda-wsl2old-v2-graph")["verdicts"]["engine_start"]
    assert (start["verdict"], start["advice"]) == (
        "broken",
        "run wsl --update (kernel ≥ 4.19.121), then use the V1 runner: VLLM_USE_V2_MODEL_RUNNER=0",
    )


def test_the_published_matrix_agrees_with_the_rules(published):
    assert published["contradictions"] == [], "a rule in matrix/judge/expectations.toml disagrees with a release"


@pytest.mark.browser
def test_the_published_page_opens_offline(tmp_path):
    done = run_module("matrix", "page", str(ROOT / "docs" / "matrix"), "--screenshot", str(tmp_path / "shot.png"))
    if "no Chromium" in done.stderr:
        pytest.skip("no Chromium here (.ci/run installs it)")
    assert done.returncode == 0, done.stdout + done.stderr
    releases = len(release_index.known(COMMITTED_HISTORY))
    assert f"{releases} grid(s), {24 * releases} cell(s), 0 console message(s)" in done.stdout


# --- one path: the history session runs its releases the way a cell session runs its cells -------------------


# The least environment record `matrix env` could write: a machine without a GPU, with vLLM 0.33.0.
RECORD = {
    "schema": ENV_SCHEMA,
    "host": {"detected": "linux", "stack": None, "stack_reason": "no GPU"},
    "kernel": {"release": "6.1.0", "version": [6, 1, 0]},
    "wsl": {"is_wsl": False},
    "gpu": {"devices": []},
    "packages": {"vllm": {"version": "0.33.0"}},
}


class RecordingSession:
    """What noxfile's sessions ask of nox, recorded instead of run; ``matrix env`` leaves a record to read."""

    def __init__(self, name: str, tmp: Path, posargs: list[str], record: dict = RECORD) -> None:
        self.name, self.tmp, self.posargs, self.record = name, tmp, posargs, record
        self.virtualenv = SimpleNamespace(location=str(tmp / "venv"))
        self.venv_backend = "uv"
        self.commands: list[tuple[str, ...]] = []
        self.env: dict[str, str | None] = {}  # nox's session.env: what every later run gets (None: unset)
        self.run_envs: list[dict[str, str | None]] = []  # session.env as each command ran
        self.installs: list[tuple[tuple[str, ...], object]] = []  # each install's packages and environment
        self.warnings: list[str] = []

    def run(self, *args: str, **kwargs: object) -> str:
        self.commands.append(args)
        self.run_envs.append(dict(self.env))
        if args[:3] == ("uv", "pip", "install"):
            self.installs.append((args, kwargs.get("env")))
        if args[1:4] == ("-m", "matrix", "env"):
            Path(args[args.index("--out") + 1]).write_text(json.dumps(self.record))
        return ""

    def install(self, *args: str, **kwargs: object) -> None:
        self.commands.append(("install", *args))
        self.run_envs.append(dict(self.env))
        self.installs.append((args, kwargs.get("env")))

    def create_tmp(self) -> str:
        return str(self.tmp)

    def log(self, *args: object) -> None:
        pass

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def error(self, message: str) -> None:
        raise AssertionError(message)


def kit_steps(session: RecordingSession) -> list[list[str]]:
    """The kit's commands a session ran, files by their base names, without where results go and when."""
    steps = []
    for command in session.commands:
        if command[1:2] != ("-m",) or command[2] not in ("matrix", "pytest"):
            continue
        args = [re.sub(r"(^|=)/\S*/", r"\1", arg) for arg in command[2:]]
        for option in ("--out", "--started-at"):
            if args[:2] == ["matrix", "split"]:
                del args[args.index(option) + 1]
        steps.append(args)
    return steps


def read_as_recorded(cells) -> Plan:
    return Plan.from_record(cells, EnvironmentRecord(RECORD))


def test_a_session_that_found_no_gpu_before_its_install_and_one_after_stops_and_says_so(tmp_path, monkeypatch):
    """A GPU tool that timed out before the install and listed a GPU for the environment record after it: mocked,
    since no GPU tool here can be made to answer both ways at the right moments of a real session."""
    import noxfile

    monkeypatch.setattr(noxfile, "detected_plan", lambda cells, require_native=False: read_as_recorded(cells))
    gpu = {"detected": "linux", "stack": "cuda", "stack_reason": "nvidia-smi lists 1 GPU(s)"}
    record = RECORD | {"host": gpu, "gpu": {"devices": [{"name": "NVIDIA H200"}]}}
    session = RecordingSession("gate", tmp_path, ["--cells", "cuda-linux-v1-graph"], record)
    with pytest.raises(AssertionError) as stopped:
        noxfile.gate(session)
    assert str(stopped.value).startswith(
        "this machine read as having no GPU for these cells before the install (no GPU), so only the gate's vLLM was "
        "installed, but its environment record finds one (nvidia-smi lists 1 GPU(s)): run the session again"
    )
    assert [step[:2] for step in kit_steps(session)] == [["matrix", "env"]], "a cell ran against the gate's install"
    # The other way round (a GPU before, none after), vLLM's full install serves the gate-only cells: they run.
    gpu_host = EnvironmentRecord(record).detected
    monkeypatch.setattr(noxfile, "detected_plan", lambda cells, require_native=False: Plan.for_host(cells, gpu_host))
    again = RecordingSession("gate", tmp_path / "again", ["--cells", "cuda-linux-v1-graph"])
    again.tmp.mkdir()
    noxfile.gate(again)
    assert [step[:2] for step in kit_steps(again)][:3] == [
        ["matrix", "env"],
        ["matrix", "plan"],
        ["pytest", "tests/cell/test_gate.py"],
    ]


@pytest.mark.reads_host
def test_history_runs_each_release_through_the_cell_sessions_path(tmp_path, monkeypatch):
    import noxfile

    monkeypatch.setenv("WSLPIN_HISTORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(noxfile, "COMMITTED_HISTORY", tmp_path / "history.tar.xz")  # this run's own, not the kit's
    # The machine as the install reads it is the one the record describes (a GPU workstation's own reading would
    # choose a GPU's install for a record without one, which the session refuses: the test above).
    monkeypatch.setattr(noxfile, "detected_plan", lambda cells, require_native=False: read_as_recorded(cells))

    gate = RecordingSession("gate", tmp_path / "gate", [])
    history = RecordingSession("history", tmp_path / "history", ["--versions", "0.33.0"])
    for session in (gate, history):
        session.tmp.mkdir()
    noxfile.gate(gate)
    noxfile.history(history)
    gate_steps, history_steps = kit_steps(gate), kit_steps(history)
    assert [step[:2] for step in history_steps] == [
        ["matrix", "env"],
        ["matrix", "plan"],
        ["pytest", "tests/cell/test_gate.py"],
        ["matrix", "split"],
    ]
    # The same env -> plan -> pytest -> split, bar the probe file's name; the cell session then prints its table.
    probe = {"--probe-out=gate.probe.json": "--probe-out=history.probe.json"}
    assert [[probe.get(arg, arg) for arg in step] for step in gate_steps[:4]] == history_steps
    assert gate_steps[4][:2] == ["matrix", "summary"]
    (pytest_run,) = [command for command in history.commands if command[1:3] == ("-m", "pytest")]
    assert f"--plan={history.tmp / '0.33.0' / 'plan.json'}" in pytest_run
    (split,) = [command for command in history.commands if command[2:4] == ("matrix", "split")]
    # Into a directory of its own, whence the history cache stores it and copies it to results/history/0.33.0/.
    assert split[split.index("--out") + 1] == str(history.tmp / "computed" / "0.33.0")


@pytest.mark.reads_host
def test_what_runs_after_an_install_of_vllm_writes_its_bytecode(tmp_path, monkeypatch):
    """uv compiles nothing at install (the whole venv costs more than the modules a run imports). Where Python may not
    write bytecode either (PYTHONDONTWRITEBYTECODE, as on this kit's CI machine), every process would compile vLLM and
    torch from source: the history's and a cell session's commands after their installs have it cleared."""
    import noxfile

    monkeypatch.setenv("WSLPIN_HISTORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(noxfile, "COMMITTED_HISTORY", tmp_path / "history.tar.xz")  # this run's own, not the kit's
    # This machine's own record, as its sessions write it: on a GPU host the cell session's install is vLLM's full one.
    here = collect_environment()
    gate = RecordingSession("gate", tmp_path / "gate", [], here)
    history = RecordingSession("history", tmp_path / "history", ["--versions", "0.33.0", "--fresh"], here)
    for session in (gate, history):
        session.tmp.mkdir()
    noxfile.gate(gate)
    noxfile.history(history)
    for session in (gate, history):
        installed = [packages for packages, _ in session.installs]
        assert any("vllm==0.33.0" in packages for packages in installed), installed
        (pytest_env,) = [
            env for command, env in zip(session.commands, session.run_envs, strict=True) if "pytest" in command
        ]
        assert "PYTHONDONTWRITEBYTECODE" in pytest_env and pytest_env["PYTHONDONTWRITEBYTECODE"] is None


class SplittingSession(RecordingSession):
    """A RecordingSession whose `matrix split` writes a cell's results, as the real one does."""

    def run(self, *args: str, **kwargs: object) -> str:
        if args[2:4] == ("matrix", "split"):
            out = Path(args[args.index("--out") + 1])
            (out / "cuda-linux-v1-graph.xml").write_text(
                '<testsuites><testsuite name="cuda-linux-v1-graph"><testcase classname="c" name="n"/>'
                "</testsuite></testsuites>"
            )
        return super().run(*args, **kwargs)


@pytest.mark.reads_host
def test_history_reuses_a_release_whose_key_is_unchanged_and_fresh_runs_it_again(tmp_path, monkeypatch):
    import noxfile

    monkeypatch.setenv("WSLPIN_HISTORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(noxfile, "COMMITTED_HISTORY", tmp_path / "history.tar.xz")  # this run's own, not the kit's
    monkeypatch.setattr(noxfile, "RESULTS", tmp_path / "results")

    def pytest_runs(*posargs: str) -> int:
        session = SplittingSession("history", tmp_path / f"run{len(list(tmp_path.glob('run*')))}", list(posargs))
        session.tmp.mkdir()
        noxfile.history(session)
        assert (tmp_path / "results" / "history" / "0.33.0" / "cuda-linux-v1-graph.xml").is_file()
        return sum(command[1:3] == ("-m", "pytest") for command in session.commands)

    assert pytest_runs("--versions", "0.33.0") == 1
    assert pytest_runs("--versions", "0.33.0") == 0
    assert pytest_runs("--versions", "0.33.0", "--fresh") == 1
    assert pytest_runs("--versions", "0.33.0", "--recheck", "auto") == 1


@pytest.mark.reads_host
def test_with_new_releases_the_history_adds_the_indexs_newer_ones_and_without_an_index_says_so(tmp_path, monkeypatch):
    import noxfile

    monkeypatch.setenv("WSLPIN_HISTORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(noxfile, "COMMITTED_HISTORY", tmp_path / "history.tar.xz")  # this run's own, not the kit's
    index = write_index(tmp_path / "index", ["0.32.0", "0.33.0", "99.1.0", "99.2.0rc1"])

    def computed(url: str) -> tuple[list[str], list[str]]:
        point_pip_at(monkeypatch, url)
        run = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
        monkeypatch.setattr(noxfile, "RESULTS", run / "results")
        session = SplittingSession("history", run, ["--versions", "0.32.0,0.33.0", "--with-new-releases"])
        session.tmp.mkdir()
        noxfile.history(session)
        return sorted(p.name for p in (run / "results" / "history").iterdir()), session.warnings

    with served(index.parent) as url:
        assert computed(f"{url}/simple/") == (["0.32.0", "0.33.0", "99.1.0"], [])
    releases, (warning,) = computed(refusing_url())
    assert releases == ["0.32.0", "0.33.0"]
    assert warning.startswith("the package index gave no list of vllm releases (")
    assert warning.endswith("; computing the releases known without it")
