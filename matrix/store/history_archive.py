"""Where history results are kept: the user's cache outside the clone, and the archive the kit commits.

A release's results (``results/history/<v>/``: ``<cell>.xml``, ``<cell>.env.json``) are kept under
``<cache>/<v>/<key>/`` (matrix.store.history_key), each entry whole or not at all (a manifest names its files).
Beside the user's cache, the kit commits each release's entry for its key, all in one archive
(``docs/evidence/history.tar.xz``, written by ``nox -s publish``): a fresh clone, CI's among them, reuses those
whose key its own code gives, so an empty user cache costs no recomputation, and the committed matrix can be
checked against the results it came from. One xz archive because the 13 releases' files are 9.7 MB as files and
45 KB together (they repeat each other), and the kit's tree travels whole to a borrowed GPU machine, 64 MiB a call.
Standard library only, and no import of ``repro/``: the noxfile reads it before any venv exists.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from matrix.errors import MatrixError
from matrix.store.history_key import KeyInputs
from matrix.variables import HISTORY_CACHE

# Each release's history results for the key this kit gives them, committed (relative to the kit's root): what
# `nox -s publish` writes, so a fresh clone (CI's) reuses them, the releases the published matrix holds
# (matrix.store.release_index), and what a source tree's gate is compared with (matrix.report.branch).
COMMITTED_HISTORY = Path("docs/evidence/history.tar.xz")
CACHE_VARIABLE = HISTORY_CACHE.name
MANIFEST = "manifest.json"
# An entry being written: never read as an entry, whatever it holds.
PARTIAL_PREFIX = ".partial-"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_dir(environ: Mapping[str, str]) -> Path:
    """``$WSLPIN_HISTORY_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/wslpin-kit/history``: outside any clone."""
    if environ.get(CACHE_VARIABLE):
        return Path(environ[CACHE_VARIABLE]).expanduser()
    base = Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "wslpin-kit" / "history"


def result_files(directory: Path) -> dict[str, str]:
    return {p.name: _sha256(p.read_bytes()) for p in sorted(directory.iterdir()) if p.is_file()}


def cached_entry(entry: Path) -> Path | None:
    """``entry`` if it is whole (its manifest names exactly its files, with their hashes), else None."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        files = result_files(entry)
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


def entry_files(entry: Path) -> dict[str, bytes]:
    return {name: (entry / name).read_bytes() for name in result_files(entry)}


def unpacked(files: Mapping[str, bytes], where: Path, key: str) -> Path | None:
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
        for name in result_files(results):
            shutil.copy2(results / name, partial / name)
        manifest = {"key": inputs.key, "inputs": asdict(inputs), "files": result_files(partial)}
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if entry.exists():  # --fresh or a damaged entry: the old one goes aside first, never half replaced
            stale = Path(tempfile.mkdtemp(prefix=PARTIAL_PREFIX, dir=entry.parent))
            entry.rename(stale / entry.name)
            shutil.rmtree(stale)
        partial.rename(entry)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def place(source: Path, target: Path) -> None:
    """``target`` holds exactly ``source``'s result files (a previous run's leftovers removed)."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in result_files(source):
        if name != MANIFEST:
            shutil.copy2(source / name, target / name)
