"""The history cache: one vLLM release's gate results, kept outside the clone under a key of all they rest on.

``nox -s history`` (and ``publish``) runs the gate and engine-config tests of 24 cells against 13 releases;
each release's results (``results/history/<v>/``: ``<cell>.xml``, ``<cell>.env.json``) depend only on the
inputs below, so a release whose key is unchanged is copied from ``<cache>/<v>/<key>/`` instead of run again.
The key hashes, and each is in it because the results change with it:

* the vLLM release: the code whose decisions the tests record;
* requirements/gate.txt's text and the torch requirement: the rest of the release's venv, which vLLM's
  gate code imports (a different torch or transformers can change what it decides, or make it fail);
* the interpreter's version: the venv is made from it, and vLLM's code paths differ between Pythons;
* how this machine runs each cell (native, emulated, gate-only): the plan every case and envelope carries;
* the noxfile's recipe (the source of the steps from a bare venv to results, and the tests they run);
* every kit file those steps import or read (``key_files``): the test files, their conftest, the modules of
  ``python -m matrix env``, ``plan`` and ``split``, all they import of the kit's own packages, the data files
  those modules read (matrix/expectations.toml, ...) and pyproject.toml (the kit's install and pytest's
  configuration). Files the steps never touch (the report's renderers, the README) are not in it, so
  changing them reuses every release.

The third-party packages the kit itself depends on are resolved when a release's venv is made and are in no
key; ``--recheck`` recomputes releases whose key is unchanged and fails where the result moved anyway.

Beside the user's cache, the kit commits each release's entry for its key, all in one archive
(``docs/evidence/history.tar.xz``, written by ``nox -s publish``): a fresh clone, CI's among them, reuses those
whose key its own code gives, so an empty user cache costs no recomputation, and the committed matrix can be
checked against the results it came from. One xz archive because the 13 releases' files are 9.7 MB as files and
45 KB together (they repeat each other), and the kit's tree travels whole to a borrowed GPU machine, 64 MiB a call.
Standard library only, and no import of ``repro/``: the noxfile reads it before any venv exists.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from xml.etree import ElementTree

from matrix.errors import MatrixError
from matrix.junit import properties
from matrix.progress import progress

# The packages of the kit's own code; an import of anything else (vLLM, torch, pytest) is the venv's, in the key
# through the release, the lock and the interpreter.
KIT_PACKAGES = ("matrix", "repro")
# Read by pytest (its configuration) and by the installer (the kit's dependencies) in every release's venv.
ALWAYS = ("pyproject.toml",)
# The entry module of `python -m matrix`: of its lazy imports only those of the commands a run uses count.
MATRIX_MAIN = "matrix/__main__.py"

# Volatile by nature, so no difference between a cached and a recomputed release: when and how long a
# test ran (gate_seconds and the like, the suite's started_at), which commit of the kit ran it (kit_commit: a
# commit that changes no key file gives the same results), the hash of an environment record that holds
# those (env_hash), and what names this machine at the moment (runner_name, kernel_release, after an update).
# XML attributes (time, timestamp, hostname) are never compared: only names, outcomes and properties are.
VOLATILE_CASE_PROPERTIES = frozenset({"gate_seconds", "engine_seconds", "probe_seconds"})
VOLATILE_SUITE_PROPERTIES = frozenset({"started_at", "kit_commit", "env_hash", "runner_name", "kernel_release"})

# How a case says a vLLM child was killed by its timeout (repro/isolation.py's outcome, as tests/cell words it):
# on a machine busy with other work the engine-config children can take more than their 180 s. Such a result
# is the machine's load, not the inputs', so it is placed for this run but never stored to be reused.
TIMED_OUT = "(timeout)"

# Each release's history results for the key this kit gives them, committed (relative to the kit's root): what
# `nox -s publish` writes, so a fresh clone (CI's) reuses them, the releases the published matrix holds
# (matrix.release_index), and what a source tree's gate is compared with (matrix.branch).
COMMITTED_HISTORY = Path("docs/evidence/history.tar.xz")
CACHE_VARIABLE = "WSLPIN_HISTORY_CACHE"
MANIFEST = "manifest.json"
# An entry being written: never read as an entry, whatever it holds.
PARTIAL_PREFIX = ".partial-"


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


def cache_dir(environ: Mapping[str, str]) -> Path:
    """``$WSLPIN_HISTORY_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/wslpin-kit/history``: outside any clone."""
    if environ.get(CACHE_VARIABLE):
        return Path(environ[CACHE_VARIABLE]).expanduser()
    base = Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "wslpin-kit" / "history"


def _result_files(directory: Path) -> dict[str, str]:
    return {p.name: _sha256(p.read_bytes()) for p in sorted(directory.iterdir()) if p.is_file()}


def cached_entry(entry: Path) -> Path | None:
    """``entry`` if it is whole (its manifest names exactly its files, with their hashes), else None."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        files = _result_files(entry)
    except (OSError, ValueError):
        return None
    files.pop(MANIFEST)
    return entry if isinstance(manifest, dict) and manifest.get("files") == files and files else None


# An archive member: <version>/<file name>, nothing else (no directories, links, paths above or below).
_MEMBER = re.compile(r"[0-9][0-9A-Za-z.+_-]*/[0-9A-Za-z_][0-9A-Za-z.+_-]*")


def read_committed(archive: Path) -> dict[str, dict[str, bytes]]:
    """The committed archive's entries: release -> file name -> bytes; empty where there is no archive.

    Only regular files named ``<release>/<file>`` are read (it is the kit's own file, but a checkout is anyone's).
    """
    if not archive.is_file():
        return {}
    entries: dict[str, dict[str, bytes]] = {}
    try:
        with tarfile.open(archive, "r:xz") as tar:
            for member in tar:
                if not (member.isfile() and _MEMBER.fullmatch(member.name)):
                    raise MatrixError(f"{archive} holds {member.name!r}, which is no release's file")
                release, name = member.name.split("/")
                handle = tar.extractfile(member)
                entries.setdefault(release, {})[name] = handle.read() if handle else b""
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise MatrixError(f"{archive} cannot be read ({exc}): restore it from git, or run with -- --fresh") from None
    return entries


def write_committed(archive: Path, entries: Mapping[str, Mapping[str, bytes]]) -> None:
    """``entries`` as the committed archive, the same bytes for the same files (sorted, no times, no owners),
    written under a fresh name beside it and renamed into place."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{PARTIAL_PREFIX}{archive.name}")
    try:
        with tarfile.open(partial, "w:xz", format=tarfile.USTAR_FORMAT, preset=9) as tar:
            for release in sorted(entries):
                for name, data in sorted(entries[release].items()):
                    info = tarfile.TarInfo(f"{release}/{name}")
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
        partial.replace(archive)
    finally:
        partial.unlink(missing_ok=True)


def _entry_files(entry: Path) -> dict[str, bytes]:
    return {name: (entry / name).read_bytes() for name in _result_files(entry)}


def _unpacked(files: Mapping[str, bytes], where: Path, key: str) -> Path | None:
    """A committed entry's ``files`` written to ``where``, if they are whole and were computed under ``key``."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    for name, data in files.items():
        (where / name).write_bytes(data)
    if cached_entry(where) is None or json.loads((where / MANIFEST).read_text()).get("key") != key:
        return None
    return where


def store(entry: Path, results: Path, inputs: KeyInputs) -> None:
    """``results``' files as the cache entry ``entry``, written whole: in a directory beside it, then renamed."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=PARTIAL_PREFIX, dir=entry.parent))
    try:
        for name in _result_files(results):
            shutil.copy2(results / name, partial / name)
        manifest = {"key": inputs.key, "inputs": asdict(inputs), "files": _result_files(partial)}
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if entry.exists():  # --fresh or a damaged entry: the old one goes aside first, never half replaced
            stale = Path(tempfile.mkdtemp(prefix=PARTIAL_PREFIX, dir=entry.parent))
            entry.rename(stale / entry.name)
            shutil.rmtree(stale)
        partial.rename(entry)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _place(source: Path, target: Path) -> None:
    """``target`` holds exactly ``source``'s result files (a previous run's leftovers removed)."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in _result_files(source):
        if name != MANIFEST:
            shutil.copy2(source / name, target / name)


Case = tuple[str, str, tuple[tuple[str, str], ...]]  # (classname::name, outcome, properties)


def _properties(element: ElementTree.Element, volatile: frozenset[str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, value) for name, value in properties(element).items() if name not in volatile))


def _outcome(case: ElementTree.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


def normalised(directory: Path) -> dict[str, tuple[tuple[tuple[str, str], ...], dict[str, Case]]]:
    """Per cell file: its suite's properties and its cases, without what is volatile by nature."""
    cells = {}
    for path in sorted(directory.glob("*.xml")):
        # The kit's own files (split wrote them, or the cache copied them): no runner's XML is read here.
        root = ElementTree.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        suite_props: tuple[tuple[str, str], ...] = ()
        cases: dict[str, Case] = {}
        for suite in suites:
            suite_props += _properties(suite, VOLATILE_SUITE_PROPERTIES)
            for case in suite.iter("testcase"):
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                cases[name] = (name, _outcome(case), _properties(case, VOLATILE_CASE_PROPERTIES))
        cells[path.name] = (suite_props, cases)
    return cells


def result_differences(cached: Path, recomputed: Path) -> tuple[str, ...]:
    """Each way ``recomputed``'s JUnit differs from ``cached``'s, one line each (normalised: see above)."""
    old, new = normalised(cached), normalised(recomputed)
    lines = [f"{name}: only in the cached copy" for name in sorted(old.keys() - new.keys())]
    lines += [f"{name}: only in the recomputation" for name in sorted(new.keys() - old.keys())]
    for name in sorted(old.keys() & new.keys()):
        (old_props, old_cases), (new_props, new_cases) = old[name], new[name]
        if old_props != new_props:
            changed = sorted(set(old_props) ^ set(new_props))
            lines.append(f"{name}: suite properties {changed}")
        for case in sorted(old_cases.keys() | new_cases.keys()):
            before, after = old_cases.get(case), new_cases.get(case)
            if before is None or after is None:
                lines.append(f"{name}: {case}: only in the {'recomputation' if before is None else 'cached copy'}")
            elif before[1] != after[1]:
                lines.append(f"{name}: {case}: {before[1]} -> {after[1]}")
            elif before[2] != after[2]:
                old_map, new_map = dict(before[2]), dict(after[2])
                for prop in sorted(old_map.keys() | new_map.keys()):
                    if old_map.get(prop) != new_map.get(prop):
                        lines.append(f"{name}: {case}: {prop}: {old_map.get(prop)!r} -> {new_map.get(prop)!r}")
    return tuple(lines)


def timed_out(directory: Path) -> bool:
    """Whether any case in ``directory``'s JUnit failed because a child ran out of time (``TIMED_OUT``)."""
    for path in directory.glob("*.xml"):
        for element in ElementTree.parse(path).getroot().iter():
            if element.tag in ("failure", "error") and TIMED_OUT in (element.get("message") or ""):
                return True
    return False


def recheck_choice(versions: Sequence[str], commit: str) -> frozenset[str]:
    """``--recheck auto``: the newest release (``versions`` oldest first) and one other picked by the commit."""
    if not versions:
        return frozenset()
    others = versions[:-1]
    try:
        pick = int(commit, 16) if commit else 0
    except ValueError:
        raise MatrixError(f"{commit!r} is not a git commit hash: run from a git clone of the kit") from None
    return frozenset({versions[-1], *([others[pick % len(others)]] if others else [])})


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the history did with one release."""

    version: str
    key: str
    action: str  # "reused", "computed", "recomputed" (a cached copy was checked), "computed nothing", or not stored
    seconds: float
    differences: tuple[str, ...] = ()
    source: str = "cache"  # of a reused or rechecked copy: the user's "cache" or the kit's "committed" results

    def line(self) -> str:
        copy = "its committed copy" if self.source == "committed" else "its cached copy"
        said = self.action
        if self.action == "reused" and self.source == "committed":
            said = "reused its committed results"
        elif self.action == "recomputed":
            said = f"recomputed, {'DIFFERS from' if self.differences else 'same as'} {copy}"
        return f"vLLM {self.version}: {said} (key {self.key}) in {self.seconds:.1f} s"


def run_history(
    releases: Sequence[KeyInputs],
    compute: Callable[[str, Path], None],
    *,
    results: Path,
    cache: Path,
    scratch: Path,
    committed: Path | None = None,
    record: bool = False,
    fresh: bool = False,
    recheck: frozenset[str] = frozenset(),
    say: Callable[[str], None] = print,
) -> list[Outcome]:
    """Each release's results into ``results/<v>/``: reused from ``cache`` or ``committed`` (the kit's committed
    archive, where its entry's key is this one), or computed by ``compute(v, dir)`` and cached.

    ``record``: the archive ends holding each release's entry for its key (``publish``: the kit commits what made
    its matrix); it is rewritten only where that changes it.
    ``fresh``: compute every release. ``recheck``: compute these even if cached, and report where they differ
    from the cached copy (which is then kept, not replaced: which side is wrong is for a person to find out).
    A computation that raises stores nothing; one that writes no file (``nox --install-only``) neither, nor one
    in which a child timed out (``TIMED_OUT``). After each release, a line says how far it is (``progress``).
    """
    outcomes = []
    began = time.perf_counter()
    shelf = read_committed(committed) if committed is not None else {}
    unpacked = scratch / ".committed"

    def committed_copy(r: KeyInputs) -> Path | None:
        files = shelf.get(r.version)
        return _unpacked(files, unpacked / r.version, r.key) if files else None

    in_cache = [cached_entry(cache / r.version / r.key) for r in releases]
    in_archive = [committed_copy(r) for r in releases]
    cached = [c or a for c, a in zip(in_cache, in_archive, strict=True)]
    reuse = [
        entry is not None and not fresh and r.version not in recheck for r, entry in zip(releases, cached, strict=True)
    ]
    computed: list[float] = []
    changed = False
    for index, inputs in enumerate(releases):
        started = time.perf_counter()
        version, key = inputs.version, inputs.key
        entry, found = cache / version / key, cached[index]
        source = "committed" if found is not None and found != entry else "cache"
        if reuse[index] and found is not None:
            _place(found, results / version)
            outcome = Outcome(version, key, "reused", time.perf_counter() - started, source=source)
        else:
            where = scratch / version
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir(parents=True)
            compute(version, where)
            differences: tuple[str, ...] = ()
            if not _result_files(where):
                action = "computed nothing"
            elif timed_out(where):
                action = "computed, not stored: a vLLM child timed out"
            elif found is not None and version in recheck:
                action, differences = "recomputed", result_differences(found, where)
            else:
                action = "computed"
            if action == "computed":  # a checked copy stays as it was: same, or for a person to look at
                store(entry, where, inputs)
                found = entry
            if action != "computed nothing":
                _place(where, results / version)
            outcome = Outcome(version, key, action, time.perf_counter() - started, differences, source)
            computed.append(outcome.seconds)
        if record and found is not None and in_archive[index] is None:
            shelf[version] = _entry_files(found)
            changed = True
        say(outcome.line())
        outcomes.append(outcome)
        still = sum(not reused for reused in reuse[index + 1 :])
        say(progress(index + 1, len(releases), time.perf_counter() - began, still, computed))
    if changed and committed is not None:
        write_committed(committed, shelf)
    shutil.rmtree(unpacked, ignore_errors=True)
    return outcomes
