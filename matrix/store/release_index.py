"""Which vLLM releases the package index has, and which of them the published matrix covers.

The index is asked as the machine's own pip reaches it (its configuration, PIP_INDEX_URL and the like, used as
they are): through this Python's pip, or through uv's where this Python has none (a venv uv made, such as nox's).
One call, ``pip index versions vllm --pre``: pip lists every version, and the rule below, not pip's, says which
count.

A release counts when it is final: pre-releases (rc, alpha, beta), dev releases and local versions never do. A post
release does: PEP 440 makes it a final release, and vLLM's carried code (0.8.5.post1 fixed 0.8.5), so the gate can
answer differently. Releases older than the matrix's first (``HISTORY_VERSIONS[0]``) never count.

"Covered" is what the published matrix holds: the releases of the committed history archive that ``nox -s
publish`` writes beside it (``matrix.store.history_archive``). Publish computes those and ``HISTORY_VERSIONS``
(``known``), and with ``--with-new-releases`` the index's newer ones too: a new release needs no edit of the tuple.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

from matrix.errors import MatrixError
from matrix.releases import HISTORY_VERSIONS
from matrix.store.history_archive import read_committed

PACKAGE = "vllm"
FIRST = HISTORY_VERSIONS[0]
# How `pip index versions` names the list on stdout (pip 21.2 to 26 alike); what else it prints varies.
LISTED = "Available versions:"


@dataclass(frozen=True)
class Releases:
    """The index's final releases from the matrix's first on, and the published matrix's; each oldest first."""

    found: tuple[str, ...]
    covered: tuple[str, ...]

    @property
    def missing(self) -> tuple[str, ...]:
        covered = {Version(v) for v in self.covered}
        return tuple(v for v in self.found if Version(v) not in covered)

    @property
    def newest_covered(self) -> str | None:
        return self.covered[-1] if self.covered else None

    @property
    def new(self) -> tuple[str, ...]:
        """The missing releases newer than every covered one: a matrix that is behind, not one with a gap."""
        return newer(self.missing, self.newest_covered)

    def as_dict(self) -> dict[str, object]:
        return {
            "first": FIRST,
            "found": list(self.found),
            "covered": list(self.covered),
            "newest_covered": self.newest_covered,
            "missing": list(self.missing),
            "new": list(self.new),
        }


def final(versions: Iterable[str], first: str = FIRST) -> tuple[str, ...]:
    """The final releases among ``versions`` from ``first`` on, oldest first (the module's docstring says which)."""
    kept: dict[Version, str] = {}
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or version.local is not None or version < Version(first):
            continue
        kept.setdefault(version, text)
    return tuple(kept[v] for v in sorted(kept))


def newer(releases: Iterable[str], than: str | None) -> tuple[str, ...]:
    """Those of ``releases`` newer than ``than`` (all of them when there is nothing to be newer than)."""
    return tuple(v for v in releases if than is None or Version(v) > Version(than))


def has_pip() -> bool:
    """Whether this Python has pip installed, asked of its metadata: ``find_spec("pip")`` would pass through
    setuptools' distutils shim, which takes any look-up of pip for pip's own start and turns itself off for the
    rest of the process (a vLLM child forked from it then fails importing setuptools)."""
    try:
        metadata.distribution("pip")
    except metadata.PackageNotFoundError:
        return False
    return True


def _pip() -> list[str]:
    if has_pip():
        return [sys.executable, "-m", "pip"]
    uv = shutil.which("uv")
    if uv is not None:
        return [uv, "tool", "run", "pip"]
    raise MatrixError(f"this Python ({sys.executable}) has no pip and there is no uv on PATH: install either")


def index_releases() -> tuple[str, ...]:
    """The final releases of vLLM the package index has, from the matrix's first on (one pip call)."""
    argv = [*_pip(), "index", "versions", PACKAGE, "--pre", "--disable-pip-version-check"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    listed = [line for line in done.stdout.splitlines() if line.startswith(LISTED)]
    if done.returncode != 0 or not listed:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        why = said[-1] if said else f"exit {done.returncode}"
        raise MatrixError(
            f"the package index gave no list of {PACKAGE} releases ({why}): check the network and pip's "
            "index settings (`pip config list`)"
        )
    return final(v.strip() for v in listed[0].removeprefix(LISTED).split(","))


def covered(archive: Path) -> tuple[str, ...]:
    """The releases the published matrix holds: the committed history archive's, oldest first."""
    if not archive.is_file():
        raise MatrixError(f"{archive} does not exist: run this from a clone of the kit, where publish commits it")
    return tuple(sorted(read_committed(archive), key=Version))


def known(archive: Path) -> tuple[str, ...]:
    """The releases publish computes unless told otherwise, oldest first: ``HISTORY_VERSIONS`` and every release
    the published matrix covers, so that one found on the index and published once stays in every later matrix."""
    return tuple(sorted({*HISTORY_VERSIONS, *read_committed(archive)}, key=Version))


def releases(archive: Path) -> Releases:
    """What the index has against what the matrix covers: the index is asked first, the archive read after."""
    return Releases(found=index_releases(), covered=covered(archive))


def render(found: Releases) -> list[str]:
    """``python -m matrix releases``' words."""
    lines = [
        f"the package index: {len(found.found)} final {PACKAGE} release(s) from {FIRST} on",
        f"covered by the published matrix: {', '.join(found.covered)}",
        f"missing: {', '.join(found.missing) or 'none'}",
    ]
    if found.new:
        lines.append(
            f"new: {', '.join(found.new)}, newer than the newest covered ({found.newest_covered}): compute and "
            "publish with `nox -s publish -- --with-new-releases`"
        )
    else:
        lines.append(f"nothing newer than {found.newest_covered} is missing")
    return lines


def to_json(found: Releases) -> str:
    return json.dumps(found.as_dict(), indent=2)
