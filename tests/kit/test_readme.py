"""The documents' marked examples (tools/readme.py): made by running their commands, and checked against them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

from tools.readme import documents, examples, new_user_env

TOOL = [sys.executable, str(ROOT / "tools" / "readme.py")]


def readme_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TOOL, *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.reads_host
def test_the_readmes_examples_print_what_they_show():
    # The examples show a machine whose python3 has no vLLM, as a new user's has.
    has_vllm = subprocess.run(
        ["python3", "-c", "import importlib.metadata as m; m.version('vllm')"],
        env=new_user_env(dict(os.environ)),
        capture_output=True,
        check=False,
    )
    if has_vllm.returncode == 0:
        pytest.skip("this machine's python3 has vLLM installed: the README's examples show one without")
    # The slow ones (a whole nox session) are fresh-machine lines: `nox -s clean_machine` checks what they print.
    done = readme_tool("--check", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_stale_example_is_named_then_rewritten_and_a_timing_is_no_difference(tmp_path):
    readme = tmp_path / "README.md"
    command = 'python3 -c \'print("ran in 1.3 s"); print("3 cells")\''
    readme.write_text(f"# Kit\n\n<!-- readme: run -->\n```console\n$ {command}\nran in 55 s\n3 cells\n```\n\nText.\n")
    assert readme_tool("--check", str(readme)).returncode == 0  # only the time differs
    readme.write_text(readme.read_text().replace("55 s\n3 cells", "55 s\n2 cells"))
    stale = readme_tool("--check", str(readme))
    assert stale.returncode == 1
    assert stale.stdout == f"stale: README.md's example of `{command}` is not what it prints now: run `nox -s readme`\n"
    assert "55 s\n2 cells" in readme.read_text()  # --check writes nothing
    assert readme_tool(str(readme)).returncode == 0
    assert readme.read_text().endswith(f"```console\n$ {command}\nran in 1.3 s\n3 cells\n```\n\nText.\n")
    assert readme_tool("--check", str(readme)).returncode == 0


def test_a_readme_without_examples_or_with_a_failing_command_is_one_line(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Kit\n")
    done = readme_tool("--check", str(readme))
    assert (done.returncode, done.stderr.count("\n")) == (2, 1) and "has no example marked" in done.stderr
    readme.write_text("<!-- readme: run -->\n```console\n$ python3 -c 'raise SystemExit(3)'\n```\n")
    done = readme_tool(str(readme))
    assert done.returncode == 2 and done.stderr.startswith("error: `python3 -c 'raise SystemExit(3)'` exited 3")
    assert readme.read_text().endswith("```\n")


def test_a_slow_example_shows_the_part_its_mark_names_and_quick_leaves_it_out(tmp_path):
    readme = tmp_path / "README.md"
    command = "python3 -c 'print(\"progress\\ncell  pass\\nc1    38\\n\\nafter\")'"
    mark = '<!-- readme: run slow, from "cell " -->'
    readme.write_text(f"{mark}\n```console\n$ {command}\ncell  pass\nc1    14\n```\n")
    assert readme_tool("--check", "--quick", str(readme)).returncode == 0  # left out: nothing run
    assert readme_tool("--check", str(readme)).returncode == 1
    assert readme_tool(str(readme)).returncode == 0
    # Only the table: from its header to the blank line, the progress before and the line after left out.
    assert readme.read_text() == f"{mark}\n```console\n$ {command}\ncell  pass\nc1    38\n```\n"
    readme.write_text(readme.read_text().replace('"cell "', '"table "'))
    done = readme_tool("--check", str(readme))
    assert done.returncode == 2 and "printed no line starting with 'table '" in done.stderr


def test_every_document_a_reader_is_sent_to_is_read_and_the_examples_are_in_more_than_the_readme():
    names = [str(path.relative_to(ROOT)) for path in documents()]
    assert names[:2] == ["README.md", "CONTRIBUTING.md"]
    assert "docs/using.md" in names and "docs/doctor.md" in names
    assert not [name for name in names if name.startswith(("docs/matrix/", "docs/evidence/"))]
    marked = {name for name, path in zip(names, documents(), strict=True) if examples(path.read_text())}
    assert {"README.md", "docs/using.md"} <= marked


def test_each_file_named_is_checked_and_rewritten_apart_and_a_stale_one_is_named_by_its_file(tmp_path):
    good, stale, bare = tmp_path / "good.md", tmp_path / "stale.md", tmp_path / "bare.md"
    block = "<!-- readme: run -->\n```console\n$ python3 -c 'print(1)'\n{}\n```\n"
    good.write_text(block.format("1"))
    stale.write_text("# Guide\n\n" + block.format("2"))
    bare.write_text("# Nothing generated here\n")
    done = readme_tool("--check", str(good), str(stale))
    assert (done.returncode, done.stdout) == (
        1,
        "stale: stale.md's example of `python3 -c 'print(1)'` is not what it prints now: run `nox -s readme`\n",
    )
    assert readme_tool(str(good), str(stale)).returncode == 0
    assert stale.read_text() == "# Guide\n\n" + block.format("1")
    assert readme_tool("--check", str(good), str(stale)).returncode == 0
    # A file named that holds no example is a mistake, even beside one that does.
    done = readme_tool("--check", str(good), str(bare))
    assert done.returncode == 2 and "bare.md has no example marked" in done.stderr
