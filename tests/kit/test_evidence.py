"""The evidence store: a night's GPU results kept once, predictions and misroutes never, and the matrix built from
the history and the whole store resting each cell on its strongest result, saying where that came from.

No GPU runs here: a runner's results are written with the kit's own writer, as a cell session's split writes
them (tests/kit/test_workflow_run.py does the same for the report job).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import GATE, NIGHT, WSL2NEW, claims_file, night, results, runner
from conftest import ROOT, committed_history, gpu_machine, run_module

from matrix.cells import select
from matrix.host.record import EnvironmentRecord
from matrix.junit import parse
from matrix.plan import Execution
from matrix.releases import VLLM_VERSION
from matrix.report import render_json
from matrix.report.model import build_report
from matrix.store.bundle import Bundle, BundledCell
from matrix.store.claims import load_claims
from matrix.store.evidence import Source, add, add_bundles, origin


def test_a_nights_gpu_results_are_kept_once_and_its_predictions_and_misroutes_never(tmp_path):
    artifacts, store = night(tmp_path), tmp_path / "store"
    claims = load_claims(str(claims_file(tmp_path)), [str(artifacts)])
    added = add([str(artifacts)], store, Source.RUNNER, claims)
    assert sorted(p.relative_to(store).parts[:3] for p in added.new) == [
        (VLLM_VERSION, c.id, "runner") for c in sorted(WSL2NEW, key=lambda c: c.id)
    ]
    assert all(p.name.startswith("2026-12-02-native-") for p in added.new)
    reasons = {item.reason for item in added.not_kept}
    assert reasons == {
        "a prediction (gate-only): the history keeps those",
        "a misrouted runner's cell: no answer of vLLM's",
    }
    assert len(added.not_kept) == 24 + 4  # every suite read is accounted for
    # The same night again (a rerun of the job): nothing new.
    again = add([str(artifacts)], store, Source.RUNNER, claims)
    assert (again.new, sorted(again.already)) == ([], sorted(added.new))
    # A later night that gave the same answers: no copy, but the night is kept, as seen again.
    shutil.rmtree(artifacts)
    later = night(tmp_path, "2026-12-03T03:17:00+00:00")
    seen = add([str(later)], store, Source.RUNNER, claims)
    assert seen.new == [] and sorted(p.name.split("-native-")[0] for p in seen.already) == ["2026-12-03"] * 4
    assert [p.read_text() for p in seen.already] == ["2026-12-03T03:17:00+00:00\n"] * 4
    # A record is its run normalized: read back from the store, it is the same record; each source keeps its own.
    assert add([str(store)], tmp_path / "copy", Source.MAINTAINER).new[0].read_bytes() == added.new[0].read_bytes()
    assert len(add([str(store)], store, Source.MAINTAINER).new) == 4
    assert add([str(store)], store, Source.MAINTAINER).new == []
    kept = added.new[0].read_text()
    assert "a long log nobody keeps" not in kept and 'name="runner_name" value="wsl-box"' in kept


def test_a_result_the_nights_plan_did_not_give_its_runner_is_not_kept(tmp_path):
    artifacts = night(tmp_path)
    # The ROCm runner's artifact also claims a native run of a CUDA cell: its plan gave it none.
    liar = artifacts / "junit-rocm-wsl2new" / VLLM_VERSION / "cell"
    results(liar, select("cuda-wsl2new-v1-graph"), Execution.NATIVE, runner("linux-box", "wsl2new"), "lie")
    claims = load_claims(str(claims_file(tmp_path)), [str(artifacts)])
    added = add([str(artifacts)], tmp_path / "store", Source.RUNNER, claims)
    assert len(added.new) == 4
    (refused,) = [item for item in added.not_kept if "did not give" in item.reason]
    assert (refused.cell, Path(refused.path).parts[-4]) == ("cuda-wsl2new-v1-graph", "junit-rocm-wsl2new")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"vllm_version": "../../outside"}, "names no vLLM release"),
        ({"gpu": "none"}, "its envelope contradicts itself: its envelope records no GPU"),
        # What a release would be made up as, or what a user's source build honestly says: never a release.
        ({"vllm_version": "99.0.0"}, "names vLLM 99.0.0, which the kit does not cover and the package index"),
        ({"vllm_version": "1!0.0.1"}, "names vLLM '1!0.0.1', not a final release"),
        ({"vllm_version": "0.33.0+evil"}, "names vLLM '0.33.0+evil', not a final release"),
        ({"vllm_version": "0.34.0.dev12+g1a2b3c4"}, "names vLLM '0.34.0.dev12+g1a2b3c4', not a final release"),
        ({"vllm_version": "0.33.0.post1"}, "names vLLM '0.33.0.post1', not a final release"),
        # A night in the future would pin the cell's answer for ever; one before any release is made up.
        ({"started_at": "9999-12-31T00:00:00+00:00"}, "its start time 9999-12-31T00:00:00+00:00 is in the future"),
        ({"started_at": "2001-01-01T00:00:00+00:00"}, "its start time 2001-01-01T00:00:00+00:00 is before"),
        ({"started_at": "last night"}, "its start time 'last night' cannot be read"),
    ],
)
def test_a_hostile_or_self_contradicting_record_is_refused_in_one_line(tmp_path, change, reason):
    run = runner("box", "wsl2new")
    written = results(tmp_path / "in", select("cuda-wsl2new-v2-graph"), Execution.NATIVE, run)
    path = written / "cuda-wsl2new-v2-graph.xml"
    text = path.read_text()
    for name, value in change.items():
        start = text.index(f'<property name="{name}" value="') + len(f'<property name="{name}" value="')
        text = text[:start] + value + text[text.index('"', start) :]
    path.write_text(text)
    # The package index, asked for a release the kit does not cover, lists none of these.
    added = add([str(written)], tmp_path / "store", Source.MAINTAINER, releases=lambda: ("0.33.1",))
    assert added.new == [] and [item.reason for item in added.not_kept if item.reason.startswith(reason)] != []
    assert len(added.not_kept) == 1
    assert not (tmp_path / "outside").exists()


def test_a_release_the_index_lists_is_kept_though_the_kit_does_not_cover_it_yet(tmp_path):
    written = results(tmp_path / "in", select("cuda-wsl2new-v2-graph"), Execution.NATIVE, runner("box", "wsl2new"))
    path = written / "cuda-wsl2new-v2-graph.xml"
    path.write_text(path.read_text().replace(f'value="{VLLM_VERSION}"', 'value="99.0.0"'))
    added = add([str(written)], tmp_path / "store", Source.MAINTAINER, releases=lambda: ("99.0.0",))
    assert [p.relative_to(tmp_path / "store").parts[0] for p in added.new] == ["99.0.0"]


def gpu_free(record: dict, how: str) -> None:
    """``record`` changed as a machine without a GPU (or one that lies about its release) writes it."""
    match how:
        case "no vLLM":
            record["packages"]["vllm"] = None
        case "another vLLM":
            record["packages"]["vllm"]["version"] = "0.23.0"
        case "a CPU torch":
            record["packages"]["torch"]["cuda"] = None
        case "the stand-in GPU":
            record["gpu"]["tools"]["nvidia-smi"] = "/home/u/kit/tests/stand-in-gpu/nvidia-smi"
        case "no GPU tool":
            record["gpu"]["tools"]["nvidia-smi"] = None
        case "no /dev/dxg":
            record["gpu"]["dev_dxg"] = False


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("no vLLM", "its environment record has no vLLM installed, not "),
        ("another vLLM", f"its environment record has vLLM 0.23.0 installed, not {VLLM_VERSION}"),
        ("a CPU torch", "its environment record has no torch with cuda's backend"),
        ("the stand-in GPU", "its GPU tool is the kit's stand-in"),
        ("no GPU tool", "its environment record names no GPU tool (nvidia-smi)"),
        ("no /dev/dxg", "a native WSL2 result whose environment record shows no WSL2 with its GPU device"),
        ("gate cases only", "only gate cases ran (no case of the reproduction)"),
    ],
)
def test_a_runners_result_that_its_own_record_says_no_gpu_made_is_refused_saying_which_fact_is_missing(
    tmp_path, how, reason
):
    record = gpu_machine("wsl2new")
    gpu_free(record, how)
    # The results name the release whatever the record says (as the history's cases, copied, would).
    run = dataclasses.replace(runner("wsl-box", "wsl2new"), env=EnvironmentRecord(record), release=VLLM_VERSION)
    out = tmp_path / "artifacts" / "junit-cuda-wsl2new" / VLLM_VERSION / "cell"
    results(out, WSL2NEW, Execution.NATIVE, run)
    if how == "gate cases only":
        for path in out.glob("*.xml"):
            path.write_text(path.read_text().replace("tests.cell.test_repro", "tests.cell.test_gate"))
    claims = load_claims(str(claims_file(tmp_path)), [str(tmp_path / "artifacts")])
    added = add([str(tmp_path / "artifacts")], tmp_path / "store", Source.RUNNER, claims)
    assert added.new == [] and {item.reason.split(reason)[0] for item in added.not_kept} == {""}
    assert len(added.not_kept) == 4


def test_a_regression_that_comes_back_is_published_and_another_sources_record_blocks_none(tmp_path):
    store, cell = tmp_path / "store", select("cuda-wsl2new-v2-graph")
    nights = [("2026-12-02", "broke"), ("2026-12-03", ""), ("2026-12-04", "broke")]
    for day, failing in nights:
        run = runner("box", "wsl2new", f"{day}T03:17:00+00:00")
        assert (
            len(add([str(results(tmp_path / day, cell, Execution.NATIVE, run, failing))], store, Source.MAINTAINER).new)
            == 1
        )
    report = build_report([], kit_commit="test", stores=(store,))
    (shown,) = [c for c in report.versions[VLLM_VERSION] if c.cell.id == cell[0].id]
    assert shown.envelope is not None and shown.envelope.started_at.startswith("2026-12-04")
    (case,) = shown.cases
    assert [a.outcome for a in case.attempts][-1] == "failed"  # the newest night judges
    # The same result from another source is that source's own record, never "the same as one kept before".
    artifacts = tmp_path / "artifacts"
    again = runner("box", "wsl2new", "2026-12-04T03:17:00+00:00")
    results(artifacts / "junit-cuda-wsl2new" / VLLM_VERSION / "cell", cell, Execution.NATIVE, again, "broke")
    claims = load_claims(str(claims_file(tmp_path)), [str(artifacts)])
    (kept,) = add([str(artifacts)], store, Source.RUNNER, claims).new
    assert kept.parent.name == "runner"


def test_a_store_record_whose_content_is_not_what_its_name_says_is_refused_on_every_read(tmp_path):
    store = tmp_path / "store"
    written = results(tmp_path / "in", select("cuda-wsl2new-v2-graph"), Execution.NATIVE, runner("b", "wsl2new"))
    (kept,) = add([str(written)], store, Source.MAINTAINER).new
    # A pull request adds a record by hand: the runner's folder, a name of the layout, another digest.
    forged = store / VLLM_VERSION / "cuda-wsl2new-v2-graph" / "runner" / "2026-12-03-native-0123456789abcdef.xml"
    forged.parent.mkdir()
    shutil.copy(kept, forged)
    moved = store / VLLM_VERSION / "cuda-linux-v2-graph" / "maintainer" / kept.name
    moved.parent.mkdir(parents=True)
    shutil.copy(kept, moved)
    report = build_report([], kit_commit="test", stores=(store,))
    refused = {Path(p.path): p.reason for p in report.inputs.unreadable}
    assert refused == {
        forged: "a store record whose content is not what its name and folder say",
        moved: "a store record whose content is not what its name and folder say",
    }
    assert [report.origin(c) for c in report.versions[VLLM_VERSION] if c.cell.id == "cuda-wsl2new-v2-graph"] == [
        Source.MAINTAINER
    ]


def test_the_newest_release_of_a_report_is_the_newest_real_one(tmp_path):
    source_build = "0.34.0.dev12+g1a2b3c4"
    built = dataclasses.replace(
        GATE, env=EnvironmentRecord({"packages": {"vllm": {"version": source_build}}, "host": {"detected": "linux"}})
    )
    ours = results(tmp_path / "ours", WSL2NEW, Execution.GATE_ONLY, GATE)
    theirs = results(tmp_path / "theirs", WSL2NEW, Execution.GATE_ONLY, built)
    published = compat(build_report([str(ours), str(theirs)], kit_commit="test"))
    assert [v["vllm"] for v in published["versions"]] == [VLLM_VERSION, source_build]


def history(root: Path) -> Path:
    return committed_history(root / "history")


def compat(report) -> dict:
    return render_json.to_document(report)


def test_the_matrix_rests_each_cell_on_its_strongest_result_says_where_it_came_from_and_diffs_like_with_like(
    tmp_path,
):
    store = tmp_path / "store"
    artifacts = night(tmp_path)
    claims = load_claims(str(claims_file(tmp_path)), [str(artifacts)])
    add([str(artifacts)], store, Source.RUNNER, claims)
    past = history(tmp_path)
    before = compat(build_report([str(past)], kit_commit="test"))
    after = build_report([str(past)], kit_commit="test", stores=(store,), previous=before)
    published = compat(after)
    assert [v["vllm"] for v in published["versions"]] == [v["vllm"] for v in before["versions"]]  # every release
    (release,) = [v for v in published["versions"] if v["vllm"] == VLLM_VERSION]  # the night's release
    cells = {c["id"]: c for c in release["cells"]}
    for cell in WSL2NEW:
        shown = cells[cell.id]
        assert shown["evidence"][0].startswith("native run on RTX 4090 (faked for the test), runner wsl-box (")
        assert "a self-hosted runner's nightly result, kept in the evidence store" in shown["evidence"][0]
        assert shown["evidence_records"][0]["origin"] == "runner"
        assert [s["execution"] for s in shown["superseded"]] == ["gate-only"]  # the prediction stays beside it
    assert cells["cuda-linux-v1-graph"]["evidence"][0].startswith("predicted")
    assert cells["cuda-linux-v1-graph"]["evidence_records"][0]["origin"] is None
    # Like with like: every release is in both, so nothing went missing; nothing moved but the four cells.
    assert after.diff is not None and after.diff.went_missing == []


def test_a_later_night_judges_a_cell_and_the_earlier_ones_stay_as_its_history(tmp_path):
    store = tmp_path / "store"
    first = results(tmp_path / "1", select("cuda-wsl2new-v2-graph"), Execution.NATIVE, runner("box", "wsl2new"))
    later = runner("box", "wsl2new", "2026-12-03T03:17:00+00:00")
    second = results(tmp_path / "2", select("cuda-wsl2new-v2-graph"), Execution.NATIVE, later, "regressed")
    assert len(add([str(first)], store, Source.MAINTAINER).new) == 1
    assert len(add([str(second)], store, Source.MAINTAINER).new) == 1
    report = build_report([], kit_commit="test", stores=(store,))
    (cell,) = [c for c in report.versions[VLLM_VERSION] if c.cell.id == "cuda-wsl2new-v2-graph"]
    assert cell.envelope is not None and cell.envelope.started_at.startswith("2026-12-03")
    assert report.origin(cell) is Source.MAINTAINER
    (case,) = cell.cases
    assert [a.outcome for a in case.attempts] == ["passed", "failed"]  # the earlier night kept, the later judging


def test_only_files_laid_out_as_the_stores_records_have_an_origin(tmp_path):
    store = tmp_path / "store"
    written = results(tmp_path / "in", WSL2NEW[:1], Execution.NATIVE, runner("b", "wsl2new"))
    added = add([str(written)], store, Source.MAINTAINER)
    assert origin(str(added.new[0]), store) is Source.MAINTAINER
    stray = store / VLLM_VERSION / "notes.xml"
    shutil.copy(added.new[0], stray)
    assert origin(str(stray), store) is None
    assert origin(str(added.new[0]), tmp_path / "elsewhere") is None


def test_the_command_says_what_it_kept_and_refuses_a_night_without_its_plan(tmp_path):
    artifacts = night(tmp_path)
    store, outputs = tmp_path / "store", tmp_path / "outputs"
    bare = run_module("matrix", "evidence", "add", str(artifacts), "--source", "runner", "--store", str(store))
    assert (bare.returncode, bare.stdout) == (2, "")
    assert bare.stderr.startswith("error: --source runner needs --runners FILE")
    planned = ["matrix", "evidence", "add", str(artifacts), "--source", "runner", "--store", str(store),
               "--runners", str(claims_file(tmp_path))]  # fmt: skip
    runless = run_module(*planned)
    assert (runless.returncode, runless.stdout) == (2, "")
    assert runless.stderr.startswith("error: --source runner needs --workflow-run URL, the night's run")
    done = run_module(*planned, "--workflow-run", NIGHT, "--github-output", str(outputs))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"4 new record(s) in {store}, 0 the same as one kept before"
    assert "not kept, 24 suite(s): a prediction (gate-only): the history keeps those:" in done.stdout
    assert "and 21 more" in done.stdout
    assert outputs.read_text() == "added=4\n"
    both = run_module(
        "matrix", "report", str(artifacts), "--runners", str(claims_file(tmp_path)), "--evidence", str(store),
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert both.returncode == 2 and both.stderr.startswith("error: --evidence or --community with --runners:")


def test_a_runners_result_counts_only_from_the_nights_own_workflow_run_and_names_it(tmp_path):
    artifacts, store = night(tmp_path), tmp_path / "store"
    # An artifact left from run 40 beside the night's: the ROCm runner's slot holds none, so the plan alone
    # cannot tell; its environment record does.
    left = tmp_path / "left" / "junit-cuda-wsl2new" / VLLM_VERSION / "cell"
    results(left, WSL2NEW, Execution.NATIVE, runner("wsl-box", "wsl2new", run_id="40"), "an older failure")
    claims = load_claims(str(claims_file(tmp_path)), [str(tmp_path / "left")])
    refused = add([str(tmp_path / "left")], store, Source.RUNNER, claims, workflow_run=NIGHT)
    assert refused.new == []
    assert {item.reason for item in refused.not_kept} == {
        f"its environment record names workflow run 40, not the night's ({NIGHT})"
    }
    claims = load_claims(str(claims_file(tmp_path)), [str(artifacts)])
    kept = add([str(artifacts)], store, Source.RUNNER, claims, workflow_run=NIGHT)
    assert len(kept.new) == 4
    text = kept.new[0].read_text()
    assert f'name="workflow_run" value="{NIGHT}/attempts/2"' in text and 'name="workflow_job" value="cell"' in text
    # The run is where a result came from, not what it is: the job run again (run 42) adds nothing new.
    rerun = tmp_path / "rerun"
    shutil.copytree(artifacts, rerun)
    for env in rerun.rglob("*.env.json"):
        env.write_text(env.read_text().replace('"GITHUB_RUN_ID": "41"', '"GITHUB_RUN_ID": "42"'))
    again = add([str(rerun)], store, Source.RUNNER, load_claims(str(claims_file(tmp_path)), [str(rerun)]),
                workflow_run=NIGHT.replace("41", "42"))  # fmt: skip
    assert (again.new, len(again.already)) == ([], 4)


def test_the_published_schema_names_every_source():
    document = json.loads((ROOT / "matrix" / "report" / "compat.schema.json").read_text())
    assert document["$defs"]["evidence"]["properties"]["origin"]["enum"] == [None, *(s.value for s in Source)]


def test_a_gpu_users_bundle_is_kept_as_theirs_and_one_naming_the_kits_own_runner_is_refused(tmp_path):
    """A bundle as `python -m matrix bundle` makes it on a WSL2 machine with a GPU (faked: neither exists here)."""
    store, cell = tmp_path / "store", "cuda-wsl2new-v2-graph"

    def sent(name: str, runner_name: str) -> Path:
        run = dataclasses.replace(runner(runner_name, "wsl2new"), kit_commit=kit_head())
        out = results(tmp_path / runner_name, select(cell), Execution.NATIVE, run)
        files = BundledCell(cell, (out / f"{cell}.xml").read_text(), (out / f"{cell}.env.json").read_text())
        path = tmp_path / name
        path.write_text(Bundle(VLLM_VERSION, run.kit_commit, run.started_at, (files,)).to_json())
        return path

    # The kit's own runner's night is in the store; a user's bundle is kept beside it, as theirs.
    artifacts = tmp_path / "artifacts"
    results(
        artifacts / "junit-cuda-wsl2new" / VLLM_VERSION / "cell",
        WSL2NEW,
        Execution.NATIVE,
        runner("wsl-box", "wsl2new"),
    )
    assert (
        len(add([str(artifacts)], store, Source.RUNNER, load_claims(str(claims_file(tmp_path)), [str(artifacts)])).new)
        == 4
    )
    (kept,) = add_bundles([sent("alice.json", "alice-box")], store, kit=ROOT).new
    assert kept.relative_to(store).parts[:3] == (VLLM_VERSION, cell, "community")
    # One that says it is the kit's runner is a user's word against the kit's own records: refused.
    refused = add_bundles([sent("mallory.json", "wsl-box")], store, kit=ROOT)
    assert refused.new == [] and [item.reason for item in refused.not_kept] == [
        f"refused: {cell} names 'wsl-box', one of the kit's own runners"
    ]


# What a user's failure can say of them, their machine and their network: none of it may be published.
FQDN, DISTRO, SLACK_KEY = "alice-desktop.corp.example.com", "Ubuntu-22.04", "Xq7ZpL2mRt9WcV4kNb8HsJ3f"
GITLAB, BUILDKITE = "glpat-Ab3dE6gH9jK2mN5pQ8rS", "bkua_" + "0123456789abcdef" * 2 + "01234567"
SAID = (
    f"{FQDN} on {DISTRO}: alice@example.com 10.1.2.3 192.168.0.7:8000 "
    f"https://hooks.slack.com/services/T0123ABCD/B0456EFGH/{SLACK_KEY} /mnt/c/Users/Alice/x {GITLAB} {BUILDKITE}"
)
LEAKS = (FQDN, "alice", "corp.example", DISTRO, "10.1.2.3", "192.168.0.7", SLACK_KEY, GITLAB, BUILDKITE)


def leaked(text: str) -> list[str]:
    return [leak for leak in LEAKS if leak.casefold() in text.casefold()]


def kit_head() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def users_bundle(tmp_path: Path, cell: str, said: str) -> Path:
    """The results a cell session writes on the user's WSL2 machine with a GPU, named as their machine names
    itself: its record's node and distribution, and the runner name a session outside CI takes (the node's)."""
    record = gpu_machine("wsl2new")
    record["uname"]["node"] = FQDN
    record["wsl"]["distro"] = record["environment"]["WSL_DISTRO_NAME"] = DISTRO
    run = dataclasses.replace(runner(FQDN, "wsl2new"), env=EnvironmentRecord(record), kit_commit=kit_head())
    return results(tmp_path / "results" / VLLM_VERSION / "cell", select(cell), Execution.NATIVE, run, said)


def kept_message(record: Path) -> str:
    failure = parse(record).find(".//failure")
    assert failure is not None
    return failure.get("message", "")


@pytest.mark.reads_host  # the bundle reads the names of the machine it is made on
def test_what_a_users_failure_says_of_them_reaches_neither_their_bundle_nor_the_store(tmp_path):
    cell = "cuda-wsl2new-v2-graph"
    users_bundle(tmp_path, cell, f"{SAID} /data/alice/models")
    user = {"HOME": "/home/alice", "USER": "alice", "WSL_DISTRO_NAME": DISTRO}
    made = run_module(
        "matrix", "bundle", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"), env=user
    )
    assert made.returncode == 0, made.stderr
    (bundle,) = (tmp_path / "out").glob("*.json")
    store = tmp_path / "store"
    added = run_module("matrix", "evidence", "add", str(bundle), "--source", "community", "--store", str(store))
    assert added.stdout.startswith(f"1 new record(s) in {store}, 0 the same"), added.stdout + added.stderr
    (kept,) = store.rglob("*.xml")
    said = [bundle.read_text(), made.stdout + made.stderr, kept.read_text(), added.stdout + added.stderr]
    assert [leaked(text) for text in said] == [[]] * 4
    # What is left still says what each was; the runner the session named (this machine) is the machine too.
    assert kept_message(kept) == (
        "<host> on <distro>: <email> <ip> <ip>:8000 https://hooks.slack.com/services/T0123ABCD/B0456EFGH/<redacted> "
        "~/x <redacted> <redacted> /data/<user>/models trace"
    )
    assert 'name="runner_name" value="&lt;host&gt;"' in kept.read_text()


def test_what_a_bundles_own_record_names_of_its_machine_is_taken_out_of_what_the_store_keeps(tmp_path):
    """A bundle made otherwise than by `matrix bundle` (by hand, by an older kit): its texts as the session wrote
    them. What its own environment record names of the machine, and every shape, are taken out at intake."""
    cell = "cuda-wsl2new-v2-graph"
    out = users_bundle(tmp_path, cell, SAID)
    files = BundledCell(cell, (out / f"{cell}.xml").read_text(), (out / f"{cell}.env.json").read_text())
    assert FQDN in files.junit and DISTRO in files.env
    sent = tmp_path / "sent.json"
    sent.write_text(Bundle(VLLM_VERSION, kit_head(), "2026-12-02T03:20:00+00:00", (files,)).to_json())
    (kept,) = add_bundles([sent], tmp_path / "store", kit=ROOT).new
    assert leaked(kept.read_text()) == []
    assert kept_message(kept).startswith("<host> on <distro>: <email> <ip> <ip>:8000 ")
