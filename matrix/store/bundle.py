"""A community bundle: a user's own cell results, sent back to the kit as one file, checked when it comes in.

The people with the hardware the kit's runners lack are the ones asking whether their set-up works. After a cell
session on their own machine, ``python -m matrix bundle`` writes one file: each cell's JUnit file and the
environment record it was run under, every value and text in them scrubbed (``matrix.host.classify.scrub``: a
failure's message can name a credential, a home, an address, the machine, its distribution or its user, each
replaced), each with its SHA-256, with the kit commit and the vLLM release. They attach it to the repository's
issue form (``.github/ISSUE_TEMPLATE/community-result.yml``).

A maintainer ingests bundles with ``python -m matrix report --community DIR`` (shown, never published) or keeps
them in the evidence store with ``python -m matrix evidence add BUNDLE --source community`` (then published).
Their results are their own level, *community*: a native run nobody of the kit has verified, shown as such
and never above a result of the kit's own runners. A bundle is untrusted input: read within a bound, and
refused whole, in one line saying why, where a file's hash does not match it, where a cell's environment record
plans it otherwise than its envelope says it ran (or names another machine), or where its kit commit is not
one of this repository's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from xml.etree.ElementTree import Element

from matrix.cells import Cell
from matrix.envelope import Envelope
from matrix.errors import MatrixError
from matrix.host.classify import Names, environment_hash, scrub, scrubbed
from matrix.host.facts import names_here
from matrix.host.record import EnvironmentRecord
from matrix.io.bounded_json import parse as parse_json
from matrix.io.files import InputFileError, read_input
from matrix.junit import UnreadableError, as_text, kit_relative, parse, restate, suites
from matrix.plan import Execution, Plan
from matrix.store.layout import run_dir

BUNDLE_SCHEMA = "wslpin-kit.bundle/1"
# The kit's own repository, whose commits a bundle's results must name.
KIT = Path(__file__).resolve().parents[2]
# Far above a bundle of 24 cells (about 30 KB of JUnit and 10 KB of record each).
BUNDLE_LIMIT = 8 << 20
ISSUE_FORM = ".github/ISSUE_TEMPLATE/community-result.yml"
ISSUE_LABEL = "community-result"  # the form's own label, as it sets it
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True)
class BundledCell:
    cell: str
    junit: str  # the cell's JUnit file, as the session's split wrote it, scrubbed
    env: str  # the environment record it ran under (env.json), scrubbed


@dataclass(frozen=True)
class Bundle:
    vllm: str
    kit_commit: str
    created_at: str
    cells: tuple[BundledCell, ...]

    def to_json(self) -> str:
        def held(text: str) -> dict[str, str]:
            return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}

        cells = [{"cell": c.cell, "junit": held(c.junit), "env": held(c.env)} for c in self.cells]
        document = {
            "schema": BUNDLE_SCHEMA,
            "vllm": self.vllm,
            "kit_commit": self.kit_commit,
            "created_at": self.created_at,
            "cells": cells,
        }
        return json.dumps(document, indent=1) + "\n"


@dataclass(frozen=True)
class Checked:
    """A bundle's cells as the store keeps them: the envelope each states, its cases, and the environment record
    it ran under (what intake checks a GPU against)."""

    bundle: Bundle
    suites: tuple[tuple[Envelope, list[Element], EnvironmentRecord], ...]


def make(results: Path, vllm: str, now: dt.datetime | None = None) -> Bundle:
    """The bundle of the cells a cell session wrote into ``results/<vllm>/cell/``; MatrixError (one line) if none
    can be sent: no such results, a misrouted cell, or results of a kit with local changes."""
    where = run_dir(results, vllm, "cell")
    found = sorted(where.glob("*.xml")) if where.is_dir() else []
    if not found:
        raise MatrixError(
            f'no cell results in {where}: run your cell first, e.g. nox -s "cell(cuda, wsl2new, v2, graph)" '
            f"-- --vllm {vllm}"
        )
    here = names_here()
    cells, commits = [], set()
    for path in found:
        try:
            root = parse(path)
            (suite,), _ = suites(root)
            envelope = Envelope.from_properties(suite.props)
        except (UnreadableError, MatrixError, ValueError):
            raise MatrixError(f"{path} is not one cell's results as a cell session writes them: run it again") from None
        if envelope.execution is Execution.MISROUTED:
            raise MatrixError(f"{path} says the cell was misrouted: nothing of vLLM's to send")
        env = path.with_name(f"{envelope.cell.id}.env.json")
        try:
            data = parse_json(read_input(env))
        except (InputFileError, MatrixError):
            data = None
        if not isinstance(data, dict):
            raise MatrixError(f"{env} is missing or unreadable: run the cell session again")
        # Not checked here: intake checks it, and refuses the bundle in one line where it is no record.
        record = EnvironmentRecord(data)
        commits.add(envelope.kit_commit)
        # The machine as it knows itself and as the record it ran under names it.
        known = here.also(record.names)
        env_text = _rehashed(root, record, known)
        cells.append(BundledCell(envelope.cell.id, as_text(scrub_tree(root, known)), env_text))
    (commit,) = commits if len(commits) == 1 else ("",)
    if not _COMMIT.fullmatch(commit):
        said = ", ".join(sorted(commits))
        raise MatrixError(
            f"the results name kit commit {said}, not one commit of the kit's repository: run the cell session from "
            "a clean clone of the kit (no local changes), then bundle again"
        )
    created = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    return Bundle(vllm, commit, created, tuple(cells))


def _rehashed(root: Element, record: EnvironmentRecord, known: Names) -> str:
    """The text of ``record`` scrubbed, hashed again, and the envelope in ``root`` naming that hash: a hash of what
    was taken out would let anyone try names against it until one gives the hash."""
    data = {key: scrubbed(value, known) for key, value in record.data.items()}
    data["env_hash"] = digest = environment_hash(data)
    restate(root, "env_hash", record.env_hash, digest)
    return EnvironmentRecord(data).to_json()


def scrub_tree(root: Element, known: Names) -> Element:
    """``root`` with every attribute value and text scrubbed (matrix.host.classify.scrub), element by element, in
    place: a replacement such as ``<redacted>`` is escaped as XML when written, never breaks it."""
    for elem in root.iter():
        elem.attrib.update({name: scrub(kit_relative(value), known) for name, value in elem.attrib.items()})
        elem.text = scrub(kit_relative(elem.text), known) if elem.text else elem.text
        elem.tail = scrub(elem.tail, known) if elem.tail else elem.tail
    return root


def predicted_cells(bundle: Bundle) -> list[str]:
    """The cells of ``bundle`` that ran gate-only: vLLM's decisions on a machine without a GPU, which intake
    never keeps at a GPU's level."""
    predicted = []
    for bundled in bundle.cells:
        (suite,), _ = suites(parse(io.BytesIO(bundled.junit.encode())))
        if Envelope.from_properties(suite.props).execution is Execution.GATE_ONLY:
            predicted.append(bundled.cell)
    return predicted


def issue_form_url(kit: Path = KIT) -> str:
    """The address of the issue form, prefilled, on the repository the kit was cloned from (its ``origin``);
    the form's path in the repository where it has none."""
    done = subprocess.run(["git", "-C", str(kit), "remote", "get-url", "origin"], capture_output=True, text=True)
    remote = done.stdout.strip() if done.returncode == 0 else ""
    if found := re.fullmatch(r"(?:https://|ssh://git@|git@)(github\.com)[/:]([\w.-]+/[\w.-]+?)(?:\.git)?/?", remote):
        host, repository = found.groups()
        return f"https://{host}/{repository}/issues/new?template={Path(ISSUE_FORM).name}&labels={ISSUE_LABEL}"
    return f'a new issue on the kit\'s repository with the form "Community result" ({ISSUE_FORM})'


def load(path: Path) -> Bundle:
    """The bundle at ``path`` if it is one and each file matches its hash; else MatrixError saying why."""
    try:
        document = parse_json(read_input(path, BUNDLE_LIMIT))
    except (InputFileError, MatrixError) as exc:
        raise MatrixError(f"is not a bundle: {exc}") from None
    if not isinstance(document, dict) or document.get("schema") != BUNDLE_SCHEMA:
        raise MatrixError(f"is not a bundle (schema {BUNDLE_SCHEMA})")
    texts = [document.get(name) for name in ("vllm", "kit_commit", "created_at")]
    cells = document.get("cells")
    if not all(isinstance(t, str) for t in texts) or not isinstance(cells, list) or not 0 < len(cells) <= 24:
        raise MatrixError("is not a bundle as `python -m matrix bundle` writes one (its fields)")
    bundled = []
    for item in cells:
        if not isinstance(item, dict) or not isinstance(item.get("cell"), str):
            raise MatrixError("is not a bundle as `python -m matrix bundle` writes one (a cell)")
        files = [_held(item, part) for part in ("junit", "env")]
        bundled.append(BundledCell(item["cell"], *files))
    vllm, commit, created = texts
    return Bundle(str(vllm), str(commit), str(created), tuple(bundled))


def _held(item: dict, part: str) -> str:
    held = item.get(part)
    if not isinstance(held, dict) or not all(isinstance(held.get(k), str) for k in ("sha256", "text")):
        raise MatrixError(f"is not a bundle as `python -m matrix bundle` writes one ({item['cell']}'s {part})")
    if hashlib.sha256(held["text"].encode()).hexdigest() != held["sha256"]:
        raise MatrixError(f"{item['cell']}'s {part} file does not match its hash: changed after it was bundled")
    return str(held["text"])


def check(bundle: Bundle, kit: Path) -> Checked:
    """``bundle``'s cells, each one as its own files say it ran; MatrixError (one line) for the first that is not,
    or for a kit commit that is not one of the kit's repository at ``kit``."""
    if not _COMMIT.fullmatch(bundle.kit_commit) or not _makes_bundles(kit, bundle.kit_commit):
        raise MatrixError(
            f"names kit commit {bundle.kit_commit!r}, which is not a commit of this kit's history that makes bundles"
        )
    return Checked(bundle, tuple(_checked_cell(bundle, bundled) for bundled in bundle.cells))


def _checked_cell(bundle: Bundle, bundled: BundledCell) -> tuple[Envelope, list[Element], EnvironmentRecord]:
    name = bundled.cell
    try:
        found, stray = suites(parse(io.BytesIO(bundled.junit.encode())))
    except UnreadableError as exc:
        raise MatrixError(f"{name}'s JUnit file {exc}") from None
    if stray or len(found) != 1:
        raise MatrixError(f"{name}'s JUnit file is not one cell's suite")
    (suite,) = found
    try:
        envelope = Envelope.from_properties(suite.props)
        record = EnvironmentRecord.from_json(parse_json(bundled.env.encode()), f"{name}'s environment record", "")
    except MatrixError as exc:
        raise MatrixError(str(exc).rstrip(": ")) from None
    stated = (envelope.cell.id, envelope.vllm_version, envelope.kit_commit, envelope.env_hash)
    if stated != (name, bundle.vllm, bundle.kit_commit, record.env_hash):
        raise MatrixError(
            f"{name}'s envelope names cell {stated[0]}, vLLM {stated[1]}, kit {stated[2]} and environment "
            f"{stated[3]}, not the bundle's ({name}, {bundle.vllm}, {bundle.kit_commit}, {record.env_hash})"
        )
    (planned,) = Plan.from_record([Cell.parse(name)], record).cells
    if envelope.execution is not planned.execution:
        ran = envelope.execution.value if envelope.execution else "no execution"
        raise MatrixError(
            f"{name}'s envelope says {ran}, but its own environment record plans the cell {planned.execution.value}"
            f" ({planned.reason})"
        )
    if envelope.contradiction:
        raise MatrixError(f"{name}: {envelope.contradiction}")
    return envelope, suite.cases, record


def _makes_bundles(kit: Path, commit: str) -> bool:
    """Whether ``commit`` is in the history of the kit's checked-out branch and has this module: any other
    object of the repository (a commit of another branch, the root commit, a tree) could not have made it."""

    def git(*args: str) -> bool:
        return subprocess.run(["git", "-C", str(kit), *args], capture_output=True, check=False).returncode == 0

    return git("merge-base", "--is-ancestor", commit, "HEAD") and any(
        git("cat-file", "-e", f"{commit}:{path}") for path in _PATHS
    )


# Where this module has lived: a bundle made before a move is as good as one made after it.
_PATHS = ("matrix/store/bundle.py", "matrix/bundle.py")
