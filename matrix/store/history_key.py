"""The key of one vLLM release's history results: a hash of everything they rest on.

``nox -s history`` (and ``publish``) runs the gate and engine-config tests of 24 cells against each release;
each release's results depend only on the inputs below, so a release whose key is unchanged is reused
(matrix.store.history) instead of run again. The key hashes, and each is in it because the results change with it:

* the vLLM release: the code whose decisions the tests record;
* requirements/gate.txt's text and the torch requirement: the rest of the release's venv, which vLLM's
  gate code imports (a different torch or transformers can change what it decides, or make it fail);
* the interpreter's version: the venv is made from it, and vLLM's code paths differ between Pythons;
* how this machine runs each cell (native, emulated, gate-only): the plan every case and envelope carries;
* the noxfile's recipe (the source of the steps from a bare venv to results, and the tests they run);
* every kit file those steps import or read (``key_files``): the test files, their conftest, the modules of
  ``python -m matrix env``, ``plan`` and ``split``, all they import of the kit's own packages, the data files
  those modules read (matrix/judge/expectations.toml, ...) and pyproject.toml (the kit's install and pytest's
  configuration). Files the steps never touch (the report's renderers, the README) are not in it, so
  changing them reuses every release.

The third-party packages the kit itself depends on are resolved when a release's venv is made and are in no
key; ``--recheck`` recomputes releases whose key is unchanged and fails where the result moved anyway.
Standard library only: the noxfile reads it before any venv exists.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

# The packages of the kit's own code; an import of anything else (vLLM, torch, pytest) is the venv's, in the key
# through the release, the lock and the interpreter.
KIT_PACKAGES = ("matrix", "repro")
# Read by pytest (its configuration) and by the installer (the kit's dependencies) in every release's venv.
ALWAYS = ("pyproject.toml",)
# The entry module of `python -m matrix`: of its lazy imports only those of the commands a run uses count.
MATRIX_MAIN = "matrix/__main__.py"


@dataclass(frozen=True, slots=True)
class KeyInputs:
    """What one release's history results are computed from (the module's docstring says why each is here)."""

    version: str
    lock_sha256: str
    torch: str
    python: str
    executions: tuple[tuple[str, str], ...]  # (cell id, how this machine runs it)
    recipe_sha256: str
    files: tuple[tuple[str, str], ...]  # (path relative to the kit, sha256 of its bytes)

    @property
    def key(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _module_file(search: Sequence[Path], name: str) -> Path | None:
    """The kit's file for module ``name``, if it is the kit's (a third-party module is in no search dir)."""
    parts = name.split(".")
    for base in search:
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


def _package_inits(root: Path, path: Path) -> Iterator[Path]:
    """The ``__init__.py`` of each package above ``path``: importing a module runs them first."""
    for parent in path.parents:
        if parent == root or root not in parent.parents:
            return
        init = parent / "__init__.py"
        if init.is_file():
            yield init


def _imports(tree: ast.AST, package: str) -> Iterator[str]:
    """Every module name ``tree`` imports, anywhere in it (a lazy import inside a function counts too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            # `from pkg import name`: name may be a submodule
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _entry_nodes(tree: ast.Module, functions: frozenset[str]) -> Iterator[ast.AST]:
    """A module's top level, and of its functions only ``functions``: the ones a command runs."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name not in functions:
            continue
        yield node


def _data_files(tree: ast.AST, directory: Path) -> Iterator[Path]:
    """Files beside the module that it names in a string (``Path(__file__).with_name("expectations.toml")``).

    A string that names a directory of data (no package: ``"schemas"``) brings all of its files.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and 0 < len(node.value) < 200:
            if "\n" in node.value or node.value.startswith(("/", ".")):
                continue
            candidate = directory / node.value
            if candidate.is_dir() and not (candidate / "__init__.py").exists():
                yield from (p for p in candidate.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            elif candidate.suffix not in ("", ".py") and candidate.is_file():
                yield candidate


def key_files(root: Path, tests: Iterable[str], commands: Iterable[str]) -> tuple[str, ...]:
    """The kit files a history run imports or reads: ``tests`` (pytest's arguments) and ``python -m matrix C``.

    A static import closure from the test files, their conftest files and, of ``matrix/__main__.py``, its top
    level and the ``cmd_<C>`` functions, restricted to the kit's own files, plus the data files they name.
    """
    test_files = [root / t for t in tests if t.endswith(".py")]
    test_dirs = sorted({t.parent for t in test_files})
    search = [root, *test_dirs]
    pending: list[tuple[Path, frozenset[str] | None]] = [(root / MATRIX_MAIN, frozenset(f"cmd_{c}" for c in commands))]
    for test in test_files:
        pending.append((test, None))
        for directory in (test.parent, *test.parent.parents):
            if directory == root.parent:
                break
            if (directory / "conftest.py").is_file():
                pending.append((directory / "conftest.py", None))
    found: set[Path] = {root / name for name in ALWAYS}
    seen: set[Path] = set()
    while pending:
        path, functions = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        found.add(path)
        tree = ast.parse(path.read_bytes(), filename=str(path))
        nodes = [tree] if functions is None else list(_entry_nodes(tree, functions))
        package = ".".join(path.relative_to(root).parts[:-1])  # a module's and an __init__'s alike
        for node in nodes:
            found.update(_data_files(node, path.parent))
            for name in _imports(node, package):
                module = _module_file(search, name)
                # The kit's packages, or a module beside a test file (pytest puts its directory on sys.path).
                if module is not None and (
                    module.parent in test_dirs or module.relative_to(root).parts[0] in KIT_PACKAGES
                ):
                    pending.append((module, None))
        pending.extend((init, None) for init in _package_inits(root, path))
    return tuple(sorted(str(p.relative_to(root)) for p in found))


def key_inputs(
    root: Path,
    version: str,
    *,
    lock: str,
    torch: str,
    python: str,
    executions: Iterable[tuple[str, str]],
    recipe: str,
    files: Iterable[str],
    commands: Iterable[str],
) -> KeyInputs:
    """The inputs of ``version``'s history results on this machine (``files`` and ``commands``: ``key_files``')."""
    run = frozenset(f"cmd_{c}" for c in commands)
    return KeyInputs(
        version=version,
        lock_sha256=_sha256(lock.encode()),
        torch=torch,
        python=python,
        executions=tuple(executions),
        recipe_sha256=_sha256(recipe.encode()),
        files=tuple((name, _digest(root, name, run)) for name in files),
    )


def _digest(root: Path, name: str, run: frozenset[str]) -> str:
    """A key file's hash: its bytes; of ``matrix/__main__.py``, its code without the commands a history run does
    not run (``cmd_report``…), as parsed, so a change to another command or a comment reuses the cache."""
    data = (root / name).read_bytes()
    if name != MATRIX_MAIN:
        return _sha256(data)
    tree = ast.parse(data, filename=name)
    kept = [
        node
        for node in tree.body
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("cmd_") and node.name not in run)
    ]
    return _sha256("\n".join(ast.dump(node) for node in kept).encode())
