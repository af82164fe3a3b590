"""What a fresh machine installs: a generated gate lock, no reference to any machine's files."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest
from conftest import ROOT

# Files that say what gets installed or run. A path or URL into one machine's disk in any
# of these breaks every other machine (a `vllm @ file:///tmp/...` line once did).
INSTALL_AND_RUN_FILES = ("requirements/*", "pyproject.toml", "noxfile.py", ".ci/*", ".github/workflows/*", "tools/*")
MACHINE_LOCAL = re.compile(r"file:|(?<![\w.])/(?:tmp|opt|work|root|home|Users|mnt)/|[A-Za-z]:\\\\")
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+( ; .+)?$")


def _tracked(*patterns: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.split()


def _requirement_lines(path: str) -> list[str]:
    text = (ROOT / path).read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("path", _tracked(*INSTALL_AND_RUN_FILES))
def test_no_install_or_run_file_points_at_a_machines_own_files(path):
    lines = [
        f"{path}:{number}: {line.strip()}"
        for number, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), start=1)
        if MACHINE_LOCAL.search(line)
    ]
    assert not lines, "a machine-local path or file: URL; name packages by version instead:\n" + "\n".join(lines)


@pytest.mark.parametrize("path", _tracked("requirements/*.txt", "requirements/*.in"))
def test_requirement_files_name_packages_never_paths_or_urls(path):
    for line in _requirement_lines(path):
        assert " @ " not in line and "://" not in line, f"{path}: direct reference {line!r}"
        assert not line.startswith(("-", ".", "/")), f"{path}: option or path {line!r}: name a package instead"


def test_the_gate_lock_is_generated_and_pins_every_package():
    lock = ROOT / "requirements" / "gate.txt"
    assert "nox -s lock" in lock.read_text().splitlines()[1], "the lock's header names the command that wrote it"
    lines = _requirement_lines("requirements/gate.txt")
    assert lines and all(PIN.match(line) for line in lines), [line for line in lines if not PIN.match(line)]
    names = {re.split(r"[=; ]", line)[0].lower() for line in lines}
    # vLLM (installed --no-deps per release) and torch (the gate's own CPU build) stay out of it.
    assert not names & {"vllm", "torch"}


def _third_party_imports(*folders: str) -> set[str]:
    names = set()
    for folder in folders:
        for source in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    own = {"matrix", "repro", "tools", "noxfile"} | {source.stem for source in (ROOT / "tests").rglob("*.py")}
    return names - set(sys.stdlib_module_names) - {"__future__"} - own


def test_the_kit_declares_every_package_it_imports():
    declared = {
        re.split(r"[=<>!~\[; ]", requirement)[0].lower().replace("_", "-")
        for requirement in [
            *tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"],
            *sum(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"].values(), []),
        ]
    }
    # What the kit examines, never depends on: each cell installs the release under test.
    under_test = {"vllm", "torch", "triton"}
    distributions = metadata.packages_distributions()
    missing = {
        f"{module} ({', '.join(distributions.get(module, [module]))})"
        for module in _third_party_imports("matrix", "repro", "tests", "tools", "benchmarks")
        if not {d.lower().replace("_", "-") for d in distributions.get(module, [module])} & (declared | under_test)
    }
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"
