"""The first GPU run the kit brought in, and the rule it taught: no runner's paths in what is published.

The run (an NVIDIA H200 lent for one call, vLLM 0.26.0, docs/evidence/gpu-runs/) is kept as it came back, and
its cells' records and probe record are in the evidence store. These tests import it again through the README's
commands and find the store's records, byte for byte; and they plant a runner's checkout, home and output folder
in a run's JUnit and look for them in every record the kit writes from it: the split, the store, a bundle and
the report's outputs.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_module

from matrix.cells import select
from matrix.envelope import RunInfo
from matrix.host.record import EnvironmentRecord
from matrix.junit import kit_relative, write_cell_results
from matrix.plan import CellPlan, Execution
from matrix.report.model import build_report
from matrix.report.outputs import report_outputs
from matrix.store.evidence import Source, add, add_probes
from matrix.store.history_archive import read_committed
from matrix.store.layout import EVIDENCE_STORE, PROBES
from matrix.store.probe import load_probes

RUN = ROOT / "docs" / "evidence" / "gpu-runs" / "h200-vllm-0.26.0-2026-12-04"
STORE = ROOT / EVIDENCE_STORE
CUDA = select("cuda-*")

# A runner's checkout and home, as a failure and a skip name them (its output folder: tests/kit/test_gpu_run.py).
CHECKOUT = "/home/runner-7/_work/vllm-wslpin-kit/vllm-wslpin-kit"
HOME = "/home/runner-7"


def test_the_kept_run_imports_into_exactly_the_records_the_store_holds(tmp_path):
    imported = run_module(
        "matrix", "import-run", str(RUN), "--results", str(tmp_path / "results"), "--report", str(tmp_path / "report")
    )
    assert imported.returncode == 0, imported.stderr
    store = tmp_path / "store"
    added = run_module(
        "matrix",
        "evidence",
        "add",
        str(tmp_path / "results" / "0.26.0"),
        "--source",
        "maintainer",
        "--store",
        str(store),
    )
    assert added.returncode == 0, added.stderr
    # Each record is named by the digest of its result: the same names, the same results (what differs is the
    # commit of the kit that imported it, which is no part of a result).
    made = sorted(p.relative_to(store) for p in store.rglob("*") if p.is_file())
    kept = sorted(p.relative_to(STORE) for p in STORE.rglob("*") if p.is_file() and "maintainer" in p.parts)
    assert made == kept and len(made) == 3 * len(CUDA) + 1


def test_the_published_matrix_shows_the_run_at_its_own_level():
    compat = json.loads((ROOT / "docs" / "matrix" / "compat.json").read_text())
    (release,) = [v for v in compat["versions"] if v["vllm"] == "0.26.0"]
    for cell in release["cells"]:
        records = cell["evidence_records"]
        if not cell["id"].startswith("cuda-"):
            assert records[0]["kind"] == "gate-only", cell["id"]
            continue
        kind = "native" if "-linux-" in cell["id"] else "emulated"
        assert records[0]["kind"] == kind and records[0]["source"] == "NVIDIA H200", (cell["id"], records[0])
        assert records[0]["runner"] == RUN.name and records[0]["origin"] == "maintainer"
    (probe,) = [p for p in compat["probes"] if p["gpu"] == "NVIDIA H200"]
    assert len(probe["bandwidth"]) == 10 and probe["bandwidth"][-1]["bytes"] == 1 << 30
    page = (ROOT / "docs" / "matrix" / "index.html").read_text()
    svg = (ROOT / "docs" / "matrix" / "bandwidth.svg").read_text()
    for picture in (page, svg):
        assert picture.count('class="curve"') >= 4 and "pinned → GPU" in picture and "pageable → GPU" in picture
    md = (ROOT / "docs" / "matrix" / "COMPATIBILITY.md").read_text()
    assert "](bandwidth.svg)" in md and "| 1 GiB | 54.0 GB/s | 7.54 GB/s | 7.2× |" in md


def test_a_store_probe_is_drawn_with_both_curves_in_order_of_size(tmp_path):
    (probe,) = load_probes(str(STORE / PROBES))
    sizes = [row.bytes for row in probe.bandwidth]
    assert sizes == sorted(sizes) and sizes[0] == 4096
    assert all(row.pinned_h2d_gbs > row.pageable_h2d_gbs for row in probe.bandwidth)
    assert any("pinned_copy faster than pageable_copy" in sentence for sentence in probe.offload_step)


def test_probes_are_kept_from_a_maintainers_run_only_and_never_without_a_gpu(tmp_path):
    record = json.loads((RUN / "probe.json").read_text())
    results = tmp_path / "results"
    results.mkdir()
    (results / "a.probe.json").write_text(json.dumps(record))
    record["host"] = {**record["host"], "stack": None, "gpu": "none"}
    (results / "b.probe.json").write_text(json.dumps(record))
    (results / "c.probe.json").write_text('{"schema": "wslpin-kit.probe/1"}')
    assert add_probes([str(results)], tmp_path / "store", Source.RUNNER).new == []
    added = add_probes([str(results)], tmp_path / "store", Source.MAINTAINER)
    assert [p.parent.name for p in added.new] == ["maintainer"]
    reasons = sorted(item.reason.split(":")[0] for item in added.not_kept)
    assert reasons == ["a probe record of a machine without a GPU", "not a probe record"]
    assert add_probes([str(results)], tmp_path / "store", Source.MAINTAINER).new == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{CHECKOUT}/tests/cell/test_repro.py:151: skipped", "tests/cell/test_repro.py:151: skipped"),
        ("C:\\Users\\ann\\kit\\tests\\cell\\test_gate.py:39: x", "tests/cell/test_gate.py:39: x"),
        (f'File "{CHECKOUT}/repro/engine.py", line 9', 'File "repro/engine.py", line 9'),
        # Not the kit's files: said as they were.
        ("https://github.com/o/kit/blob/main/tests/cell/test_repro.py", None),
        ("/usr/lib/python3.12/os.py and $OUT/env.json", None),
    ],
)
def test_a_path_names_the_kit_file_relative_to_the_kit(text, expected):
    assert kit_relative(text) == (text if expected is None else expected)


def planted_results(out: Path) -> Path:
    """A runner's cells as its split writes them, pytest's file naming its checkout and its home."""
    cells = select("cuda-wsl2new-*")
    env = EnvironmentRecord(
        {
            "packages": {"vllm": {"version": "0.26.0"}},
            "host": {"detected": "wsl2new"},
            "wsl": {"is_wsl": True},
            "gpu": {"devices": [{"name": "RTX 4090 (faked for the test)"}], "dev_dxg": True},
        }
    )
    run = RunInfo(env=env, kit_commit="test", runner_name="wsl-box", started_at="2026-12-03T03:17:00+00:00")
    raw = out / "pytest.junit"
    out.mkdir(parents=True)
    cases = "".join(
        f'<testcase classname="tests.cell.test_repro" name="test_x[{c.id}]" file="{CHECKOUT}/tests/cell/test_repro.py">'
        f'<properties><property name="cell" value="{c.id}"/><property name="cache" value="{HOME}/.cache/vllm"/>'
        "</properties>"
        f'<failure message="compile cache {HOME}/.cache/vllm/torch_compile_cache">Traceback:\n'
        f'  File "{CHECKOUT}/repro/offload.py", line 3\n  File "{CHECKOUT}/tests/cell/test_repro.py", line 151'
        "</failure></testcase>"
        for c in cells
    )
    raw.write_text(f"<testsuites><testsuite name='pytest'>{cases}</testsuite></testsuites>")
    write_cell_results([CellPlan(c, Execution.NATIVE, "faked for the test") for c in cells], raw, run, out)
    raw.unlink()
    return out


def test_no_runner_path_reaches_the_store_or_the_report(tmp_path):
    results = planted_results(tmp_path / "results")
    split = [p.read_text() for p in results.glob("*.xml")]
    # The split names the kit's files as the kit's; the home it leaves to what is published from it.
    assert all(CHECKOUT not in text and 'File "tests/cell/test_repro.py", line 151' in text for text in split)
    store = tmp_path / "store"
    assert len(add([str(results)], store, Source.MAINTAINER).new) == 4
    report = build_report([str(results)], kit_commit="test", stores=(store,))
    published = [p.read_text() for p in store.rglob("*.xml")]
    published += ["".join(chunks) for chunks in report_outputs(report).values()]
    assert [HOME in text for text in published] == [False] * len(published)
    assert all("~/.cache/vllm" in text for text in published[:4])


@pytest.mark.reads_host  # the bundle reads the names of the machine it is made on
def test_a_bundle_names_no_runner_path(tmp_path):
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    results = planted_results(tmp_path / "results" / "0.26.0" / "cell")
    for path in results.glob("*.xml"):
        path.write_text(path.read_text().replace('"kit_commit" value="test"', f'"kit_commit" value="{head.strip()}"'))
    done = run_module(
        "matrix",
        "bundle",
        "--results",
        str(tmp_path / "results"),
        "--vllm",
        "0.26.0",
        "--out",
        str(tmp_path / "bundle"),
    )
    assert done.returncode == 0, done.stderr
    (bundle,) = (tmp_path / "bundle").glob("*.json")
    assert CHECKOUT not in bundle.read_text() and HOME not in bundle.read_text()


# A path of some machine's own: a home, a temporary or scratch directory, a runner's work folder.
MACHINE_PATH = re.compile(r"(?<![\w.])(?:/home/\w|/root/|/Users/\w|/tmp/\w|/var/folders/|/work/\w|[A-Z]:\\\\Users)")


def test_nothing_published_names_a_machines_path():
    """The published matrix, the doctor's copy of it and the evidence store: what a runner ran where is no part."""
    published = [ROOT / "matrix" / "doctor" / "matrix.json"]
    for folder in ("docs/matrix", "docs/evidence"):
        published += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix != ".xz"]
    texts = {str(p.relative_to(ROOT)): p.read_text(errors="replace") for p in published}
    for release, files in read_committed(ROOT / "docs" / "evidence" / "history.tar.xz").items():
        texts |= {f"history.tar.xz:{release}/{name}": data.decode(errors="replace") for name, data in files.items()}
    named = sorted({f"{p}: {m.group()}" for p, text in texts.items() for m in MACHINE_PATH.finditer(text)})
    named += [f"{p}: this checkout's own path" for p, text in texts.items() if str(ROOT) in text]
    assert named == [], named[:10]


def test_the_run_folder_is_kept_as_it_came_back():
    assert sorted(p.name for p in RUN.iterdir()) == sorted(
        ["env.json", "gate.xml", "gpu-run.log", "plan.json", "probe.json", "probe.xml", "repro.xml", "run.json"]
    )
