"""``python -m matrix branch`` on the kit's committed gate results: what a tree changes against its release, and
the one line it says where the release's side is not there. (A real branch's gate session, laid over the
installed vLLM, is tests/kit/test_vllm_source.py's.)"""

from __future__ import annotations

from pathlib import Path

from matrix.__main__ import build_parser
from matrix.store.history_archive import COMMITTED_HISTORY, read_committed
from matrix.text.cli import KIT_ROOT, run_command_line

CELLS = "cuda-wsl2new-v1-*"
RELEASE = "0.33.0"


def _results(tmp_path: Path, vllm: str) -> Path:
    """The release's committed gate results of CELLS, their envelopes naming ``vllm``."""
    out = tmp_path / vllm
    out.mkdir()
    for name, data in read_committed(KIT_ROOT / COMMITTED_HISTORY)[RELEASE].items():
        if name.startswith("cuda-wsl2new-v1-") and name.endswith(".xml"):
            version = b'name="vllm_version" value="%s"'
            (out / name).write_bytes(data.replace(version % RELEASE.encode(), version % vllm.encode()))
    return out


def test_a_tree_that_decides_as_its_release_changes_nothing(tmp_path, capsys):
    tree = _results(tmp_path, f"{RELEASE}+g1a2b3c4d5")
    assert run_command_line(build_parser, ["branch", "--branch-results", str(tree), "--cells", CELLS]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"vLLM {RELEASE}+g1a2b3c4d5 against the release it was cut from, vLLM {RELEASE}'s gate results "
        f"committed in {COMMITTED_HISTORY}:"
    )
    assert out[1] == "no question's verdict and no checked value changed"
    assert out[2].startswith("0 fixed, 0 regressed, 104 unchanged: the 3 questions' verdicts and every checked value")


def test_a_release_the_history_lacks_is_one_line_saying_how_to_get_its_results(tmp_path, capsys):
    tree = _results(tmp_path, "0.99.0+g1a2b3c4d5")
    assert run_command_line(build_parser, ["branch", "--branch-results", str(tree), "--cells", CELLS]) == 2
    said = capsys.readouterr().err.strip()
    assert said == (
        f"error: vLLM 0.99.0's gate results are not in {KIT_ROOT / COMMITTED_HISTORY}: run the release's gate "
        "(`nox -s gate -- --vllm 0.99.0 --cells ...`, an install and a few minutes) and give its "
        "results/0.99.0/gate with --release-results"
    )
    # Given them, the tree is compared with those instead.
    release = _results(tmp_path, "0.99.0")
    argv = ["branch", "--branch-results", str(tree), "--release-results", str(release), "--cells", CELLS]
    assert run_command_line(build_parser, argv) == 0
    assert f"the gate results in {release}/:" in capsys.readouterr().out
