"""A vLLM source checkout as the kit runs it: the checkout's files laid over an installed release's compiled ones.

A maintainer checking a fix has a branch, not a wheel, and building a wheel means building vLLM's CUDA
kernels. The gate and engine-config questions need none of them (without the cell's GPU they are stubbed,
``repro.emulation``), so the checkout's files over the compiled parts of the release it was cut from give
vLLM's answers for that branch. The result is a directory holding a ``vllm`` package and its own
``.dist-info``: first on ``PYTHONPATH`` it is the vLLM every process sees, with a version of its own
(``0.33.0+g1a2b3c4.dirty``) so its results never mix with a release's, and a PEP 610 ``direct_url.json``
naming the checkout (``matrix env`` records it).

``describe`` runs git in the checkout; ``lay_over`` runs in the Python that has the release installed.
"""

from __future__ import annotations

import argparse
import base64
import compileall
import hashlib
import json
import os
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

from matrix.errors import MatrixError

PACKAGE = "vllm"
# Built from vLLM's C++/CUDA sources: always the release's, even where a checkout holds an in-place build of
# its own (the release's match the release's torch, which the environment has).
COMPILED_SUFFIXES = (".so", ".pyd", ".dll", ".dylib")
# Written by vLLM's build (setuptools-scm), never in a checkout: the layer writes its own with its version.
VERSION_FILE = "vllm/_version.py"
RELEASE_TAGS = "v[0-9]*"
# A layer directory says it is one, so that remaking it never removes a directory the kit did not make.
MARKER = ".wslpin-vllm-layer"
_DESCRIBED = re.compile(r"^v(?P<release>.+)-(?P<distance>\d+)-g(?P<commit>[0-9a-f]+)$")
# From the release's .dist-info: what the layer's own one says differently (or the installer wrote).
_DIST_INFO_REWRITTEN = frozenset({"METADATA", "RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})


@dataclass(frozen=True)
class SourceTree:
    """A vLLM git checkout, as ``git describe`` places it after its nearest release tag."""

    path: Path
    commit: str  # the full hash of HEAD
    release: str  # the nearest release tag's version: whose compiled files it is laid over
    distance: int  # commits since that tag
    dirty: bool  # files under vllm/ differ from HEAD, or are new

    @property
    def label(self) -> str:
        """The tree's own version (PEP 440, a local version of its release), as results and the report name it."""
        return f"{self.release}+g{self.commit[:9]}" + (".dirty" if self.dirty else "")

    @property
    def commit_id(self) -> str:
        """HEAD as vLLM's own ``_version.py`` spells a commit."""
        return f"g{self.commit[:9]}"


@dataclass(frozen=True)
class Layer:
    """A directory whose ``vllm`` is a checkout laid over an installed release."""

    tree: SourceTree
    root: Path
    release: str  # the installed release whose files fill in what the checkout lacks
    from_checkout: int
    from_release: int

    def summary(self) -> str:
        return (
            f"vLLM {self.tree.label}: {self.from_checkout} files of {self.tree.path} (commit {self.tree.commit[:12]}"
            f"{', with uncommitted changes' if self.tree.dirty else ''}) over {self.from_release} compiled or "
            f"generated files of vLLM {self.release} -> {self.root}"
        )


def _git(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise MatrixError("git is not installed: the kit labels a vLLM source tree by its git commit") from None


def describe(path: Path) -> SourceTree:
    """The checkout at ``path``; one line saying what to do where it is not a vLLM git checkout with tags."""
    if not (path / PACKAGE / "__init__.py").is_file():
        raise MatrixError(
            f"{path} is not a vLLM source checkout (no {PACKAGE}/__init__.py in it): give the directory vLLM was "
            "cloned into, a vLLM wheel file, or a release such as 0.33.0"
        )
    head = _git(path, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        raise MatrixError(
            f"{path} is not a git checkout with a commit: the kit names a source tree's results by its commit"
        )
    found = _git(path, "describe", "--tags", "--long", "--abbrev=40", "--match", RELEASE_TAGS, "HEAD")
    match = _DESCRIBED.match(found.stdout.strip())
    if found.returncode != 0 or match is None:
        raise MatrixError(
            f"{path} has no release tag (v0.33.0, ...) before its HEAD: fetch vLLM's tags (`git fetch --tags`), "
            "since the kit lays the checkout over the compiled files of the release it was cut from"
        )
    release = match["release"]
    try:
        Version(release)
    except InvalidVersion:
        raise MatrixError(f"{path}'s nearest tag v{release} does not name a vLLM release") from None
    changed = _git(path, "status", "--porcelain", "--untracked-files=all", "--", PACKAGE)
    return SourceTree(
        path=path.resolve(),
        commit=head.stdout.strip(),
        release=release,
        distance=int(match["distance"]),
        dirty=bool(changed.stdout.strip()),
    )


def _compiled(name: str) -> bool:
    return name.endswith(COMPILED_SUFFIXES) or ".so." in name


def _checkout_files(tree: SourceTree) -> list[str]:
    """The package's files as git sees the working tree: tracked (as they are now) and new, never ignored ones."""
    listed = _git(tree.path, "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", PACKAGE)
    names = sorted({n for n in listed.stdout.split("\0") if n})
    return [
        n
        for n in names
        if (tree.path / n).is_file() and not _compiled(n) and n != VERSION_FILE and "__pycache__" not in n
    ]


def installed_release() -> metadata.Distribution:
    """vLLM as installed in this Python's own site-packages (never a layer on ``PYTHONPATH``)."""
    places = list(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    found = list(metadata.distributions(name=PACKAGE, path=places))
    if not found:
        raise MatrixError(
            "this Python has no vLLM release installed to lay the checkout over: install the release the "
            "checkout was cut from (`pip install --no-deps vllm==X`)"
        )
    return found[0]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _release_records(dist: metadata.Distribution) -> dict[str, str]:
    """The release's RECORD, by file: its hash and size, so linked files need not be read again."""
    entries = {}
    for line in (dist.read_text("RECORD") or "").splitlines():
        name, _, rest = line.partition(",")
        entries[name] = rest
    return entries


def _version_module(tree: SourceTree) -> str:
    parts = ", ".join(repr(int(p)) if p.isdigit() else repr(p) for p in re.split(r"[.+]", tree.label))
    return (
        "# Written by the kit (matrix.commands.vllm_source): this checkout laid over a release's compiled files.\n"
        f"__version__ = version = {tree.label!r}\n"
        f"__version_tuple__ = version_tuple = ({parts},)\n"
        f"__commit_id__ = commit_id = {tree.commit_id!r}\n"
    )


def _links(release_files: list[str], checkout: list[str]) -> list[str]:
    """What to link for ``release_files``: the highest directory the checkout has nothing in, else the file.

    A linked directory brings the release's compiled bytecode along (found beside the sources as imported), so
    only the checkout's own files need compiling, which matters to a bisection that lays out a tree per commit.
    """
    touched = {str(Path(name).parent) for name in checkout} | {PACKAGE}
    touched |= {str(parent) for name in list(touched) for parent in Path(name).parents}
    links = []
    for name in release_files:
        parts = Path(name).parts
        for depth in range(2, len(parts)):
            directory = "/".join(parts[:depth])
            if directory not in touched:
                links.append(directory)
                break
        else:
            links.append(name)
    return list(dict.fromkeys(links))


def _remake(root: Path) -> None:
    if root.exists():
        if not (root / MARKER).is_file():
            raise MatrixError(f"{root} exists and is not a layer the kit made: give a new directory")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / MARKER).write_text("")


def lay_over(tree: SourceTree, root: Path) -> Layer:
    """``root`` made into ``tree``'s vLLM over the installed release: the checkout's files copied, the release's
    other files (compiled modules, build outputs) linked, a version module and a .dist-info of its own."""
    dist = installed_release()
    _remake(root)
    checkout = _checkout_files(tree)
    taken = set(checkout)
    for name in checkout:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree.path / name, target)
    release_files = [
        str(f)
        for f in dist.files or ()
        if str(f).startswith(f"{PACKAGE}/") and "__pycache__" not in str(f) and str(f) not in taken
    ]
    release_records = _release_records(dist)
    kept = [n for n in release_files if n != VERSION_FILE]
    for name in _links(kept, checkout):
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(Path(str(dist.locate_file(name))).resolve())
    (root / VERSION_FILE).write_text(_version_module(tree))
    # Children import the layer again and again, and Python may not be allowed to write bytecode
    # (PYTHONDONTWRITEBYTECODE): compiled once here, as an installer would. Linked directories are skipped:
    # their own __pycache__ is the release's.
    compileall.compile_dir(str(root / PACKAGE), quiet=1, workers=0)
    _write_dist_info(dist, tree, root, written=[*checkout, VERSION_FILE], linked=kept, records=release_records)
    return Layer(tree, root, dist.version or "", from_checkout=len(checkout), from_release=len(kept))


def _write_dist_info(
    dist: metadata.Distribution,
    tree: SourceTree,
    root: Path,
    written: Iterable[str],
    linked: Iterable[str],
    records: dict[str, str],
) -> None:
    info = f"{PACKAGE}-{tree.label}.dist-info"
    (root / info).mkdir()
    for file in dist.files or ():
        text = str(file)
        if ".dist-info/" in text and text.startswith(f"{PACKAGE}-") and file.name not in _DIST_INFO_REWRITTEN:
            target = root / info / text.partition("/")[2]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(str(dist.locate_file(file)), target)
    metadata_text = re.sub(
        r"^Version: .*$", f"Version: {tree.label}", dist.read_text("METADATA") or "", count=1, flags=re.M
    )
    (root / info / "METADATA").write_text(metadata_text)
    # PEP 610: where this distribution came from (a local directory), as pip and uv record it.
    (root / info / "direct_url.json").write_text(json.dumps({"url": tree.path.as_uri(), "dir_info": {}}) + "\n")
    lines = []
    for name in written:
        data = (root / name).read_bytes()
        lines.append(f"{name},{_record_hash(data)},{len(data)}")
    lines.extend(f"{name},{records.get(name, ',')}" for name in linked)
    for path in sorted((root / info).rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            lines.append(f"{path.relative_to(root).as_posix()},{_record_hash(data)},{len(data)}")
    lines.append(f"{info}/RECORD,,")
    (root / info / "RECORD").write_text("\n".join(lines) + "\n")


def python_path(layer: Path, current: str | None) -> str:
    """``PYTHONPATH`` with the layer first, so that it is the vLLM every process and child imports."""
    return os.pathsep.join([str(layer), *([current] if current else [])])


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Lay a vLLM source checkout over this Python's installed vLLM release, into a directory "
        "to put first on PYTHONPATH.",
    )
    parser.add_argument("checkout", type=Path, help="a vLLM git checkout (with its release tags)")
    parser.add_argument("--out", type=Path, required=True, help="the directory to make (remade if the kit made it)")
    parser.set_defaults(func=_lay_over_command)
    return parser


def _lay_over_command(args: argparse.Namespace) -> int:
    print(lay_over(describe(args.checkout), args.out).summary())
    return 0
