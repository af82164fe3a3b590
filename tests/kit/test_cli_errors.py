"""A newcomer's mistakes, through the real commands: one line that says what to do, the documented status,
and nothing written or overwritten."""

import subprocess
import venv

import pytest
from conftest import ROOT

BENCH = ("bench", "--cell", "cuda-wsl2new-v2-graph", "--server", "fake")


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A Python with nothing installed, as on a fresh runner."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(where, with_pip=False)
    return str(where / "bin" / "python")


@pytest.mark.parametrize(
    "args, missing",
    [
        (("repro", "--help"), "packaging"),
        (("repro", *BENCH), "packaging"),
        (("matrix", "report", "tests/corpus", "--out", "{tmp}/report"), "packaging"),
        (("matrix", "split", "junit.xml", "--env", "env.json", "--out", "{tmp}/results"), "junitparser"),
    ],
)
def test_a_python_without_the_kits_dependencies_says_how_to_get_them(bare_python, tmp_path, args, missing):
    module, *rest = args
    done = subprocess.run(
        [bare_python, "-m", module, *(a.format(tmp=tmp_path) for a in rest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    line = one_error_line(done)
    assert f"has no module {missing!r}" in line
    assert "pip install -e '.[test]'" in line and str(ROOT / ".nox" / "tests" / "bin" / "python") in line
    assert list(tmp_path.iterdir()) == []
