"""The published compat.json as the doctor reads it: releases, each cell's verdicts, evidence and command.

Only the fields the doctor uses are read, each checked, so a file of another shape is refused in one
line that names it, never half-read. ``matrix.report`` writes the file; its modules import packages
a bare Python lacks, hence this reader of its own. The doctor's part of it, which the kit's package carries, is
laid out a value a line (``write_packaged``) so that of its 14 releases' 336 cells the doctor decodes and checks
the one it answers from: the index at once, a release and its cell when the answer reaches them, each still
refused in one line where it departs from the shape.
"""

from __future__ import annotations

import argparse
import enum
import json
import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from matrix.cells import Axis, Cell, ModelClass, Runner, Stack
from matrix.errors import MatrixError
from matrix.io.bounded_json import parse
from matrix.io.files import InputFileError, read_input, write_file
from matrix.io.records import read_record
from matrix.questions import Level, Question, Verdict
from matrix.text.words import COMPAT_SCHEMA, COMPAT_WHOLE_SCHEMA

# The doctor's part of a compat.json: what the kit's package carries, so that an installed doctor answers with no
# checkout (``nox -s publish`` writes it beside this module from the published compat.json).
DOCTOR_SCHEMA = "wslpin-kit.doctor-matrix/2"
# Its layout before: one JSON document of every release's cells. A copy of it given to --matrix is read whole, as a
# compat.json is.
DOCTOR_SCHEMA_WHOLE = "wslpin-kit.doctor-matrix/1"
PACKAGED = Path(__file__).with_name("matrix.json")
# What each cell keeps: every field ``_cell`` reads (its id is the index's).
_CELL_FIELDS = ("command", "evidence", "verdicts", "status", "issues")
_VERDICT_FIELDS = ("verdict", "level", "advice", "why", "issues")
# What a kept answer says (compat.json's ``kept``), where a matrix has it: one made before is still read, without.
_KEPT_FIELDS = ("verdict", "level", "advice", "why")
_RELEASE_NEWER_FIELDS = ("v2_architectures",)
A = TypeVar("A", bound=Axis)
T = TypeVar("T")
REGENERATE = "regenerate it with `nox -s report`, or pass --matrix PATH"


# NamedTuples, not dataclasses: made at every start of the doctor, whose budget is 2x a bare Python's start.
class Kept(NamedTuple):
    """The answer for one who keeps VLLM_WSL2_ENABLE_PIN_MEMORY at a value (compat.json's ``kept``)."""

    verdict: Verdict
    level: Level
    advice: str
    why: str


class QuestionVerdict(NamedTuple):
    question: Question
    verdict: Verdict
    level: Level
    advice: str
    why: str
    issues: tuple[str, ...]  # the issues the verdict's rules name (URLs)
    # Per value of the variable ("unset", "1"); empty in a matrix made before the report wrote them.
    kept: Mapping[str, Kept]


class CellEntry(NamedTuple):
    cell: Cell
    command: str
    evidence: tuple[str, ...]
    verdicts: tuple[QuestionVerdict, ...]  # in Question's order
    status: str  # the cell's status against the kit's rules (pass, known-fail, ...)
    issues: tuple[str, ...]  # the issues the cell's known failures name (URLs)
    gpu: str = ""  # the GPU its strongest result ran on (native, emulated, community); empty where none ran it

    @property
    def level(self) -> Level:
        """The weakest of the verdicts' levels: how far the whole answer may be trusted."""
        return min(v.level for v in self.verdicts)


# A version as pip spells one (PEP 440, case-insensitive): the release, then a pre-release, post-release,
# development or local part. ``0.33.0rc1``, ``0.33.0.post1``, ``0.34.0.dev12+g1a2b3c``, ``0.33.0+cu129``.
# Compiled where it is used (re's cache), as only a version asked about or installed needs it.
_VERSION = (
    r"v?(?P<release>\d+(?:\.\d+)*)"
    r"(?P<pre>[-_.]?(?:alpha|beta|preview|pre|rc|a|b|c)[-_.]?\d*)?"
    r"(?P<post>[-_.]?(?:post|rev|r)[-_.]?\d*)?"
    r"(?P<dev>[-_.]?dev[-_.]?\d*)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?"
)


class Kind(enum.Enum):
    """What a version is besides its release number."""

    FINAL = "final"  # the release itself; a local build of it (``+cu129``) too
    PRE = "pre"  # a release candidate, alpha or beta of it
    DEV = "dev"  # a development build on the way to it
    POST = "post"  # a post-release of it


class Version(NamedTuple):
    """A vLLM version asked about or installed."""

    text: str  # as given
    release: str  # its release part as written: ``0.33.0`` of ``0.33.0rc1``
    number: tuple[int, ...]  # release_number(release)
    kind: Kind


def parse_version(text: str) -> Version | None:
    """``text`` as a version pip would accept; None when it is not one."""
    match = re.fullmatch(_VERSION, text.strip(), re.IGNORECASE)
    if match is None:
        return None
    release = match["release"]
    kind = Kind.DEV if match["dev"] else Kind.PRE if match["pre"] else Kind.POST if match["post"] else Kind.FINAL
    number = release_number(release)
    if number is None:
        return None
    return Version(text, release, number, kind)


def release_number(text: str) -> tuple[int, ...] | None:
    """``0.25.1`` -> (0, 25, 1); the leading numbers of an installed build (``0.33.0+cu129``); None without any.

    Trailing zeros are dropped, so 0.33 and 0.33.0 are the same release.
    """
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    if match is None:
        return None
    try:
        number = [int(part) for part in match[0].split(".")]
    except ValueError:  # a part past Python's int() limit (4,300 digits): no release anyone made
        return None
    while len(number) > 1 and number[-1] == 0:
        number.pop()
    return tuple(number)


class V2Architectures(NamedTuple):
    """How a release that picks its runner by the model's architecture picks it (compat.json's v2_architectures)."""

    listed: tuple[str, ...]  # vLLM's DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES on the stack's platform
    runner: Mapping[str, Runner]  # "listed-dense", "listed-moe", "unlisted-dense", "unlisted-moe"
    # Where the runner depends on MoE-ness: the architectures vLLM reads as MoE, and as dense, from each one's
    # default config; an architecture in neither is not known.
    moe: tuple[str, ...] = ()
    dense: tuple[str, ...] = ()


RUNNER_KEYS = tuple(f"{listed}-{kind.value}" for listed in ("listed", "unlisted") for kind in ModelClass)


class Release(NamedTuple):
    vllm: str
    number: tuple[int, ...]
    default_runners: Mapping[ModelClass, Runner]  # the runner vLLM picks with the variable unset; absent: not said
    # By cell id, each read and checked when the answer needs it: the doctor answers from one cell (two where
    # vLLM cannot read a WSL2 kernel's version), not from a release's 24.
    cells: Mapping[str, Callable[[], CellEntry]]
    # Per GPU stack (the list is the platform's); None: the release does not pick by architecture.
    v2_architectures: Mapping[Stack, V2Architectures] | None = None

    def entry(self, cell: Cell) -> CellEntry | None:
        read = self.cells.get(cell.id)
        return read() if read is not None else None


class Listed(NamedTuple):
    """A release as the matrix lists it: its number, and how to read its answers (``read``) once it is chosen."""

    vllm: str
    number: tuple[int, ...]
    read: Callable[[], Release]


class Published(NamedTuple):
    name: str  # how messages name the file
    releases: tuple[Listed, ...]  # newest first
    generated_at: str = ""  # when the report was made, as written ("" where the file does not say)
    kit_commit: str = ""  # the kit that made it


class _ShapeError(Exception):
    """Where the file departs from the shape the doctor reads."""


_JSON_NAMES: dict[type, str] = {dict: "object", list: "array", str: "string"}


def _get(obj: Any, key: str, kind: type, where: str) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind):
        raise _ShapeError(f"{where} has no {_JSON_NAMES[kind]} {key!r}")
    return value


def _axis(axis: type[A], text: str, where: str) -> A:
    try:
        return axis.parse(text)
    except MatrixError as exc:
        raise _ShapeError(f"{where}: {exc}") from None


def _issues(obj: Any, where: str) -> tuple[str, ...]:
    issues = _get(obj, "issues", list, where)
    if not all(isinstance(issue, str) for issue in issues):
        raise _ShapeError(f"{where} has issues that are not strings")
    return tuple(issues)


def _kept(obj: Any, here: str) -> Kept:
    return Kept(
        _axis(Verdict, _get(obj, "verdict", str, here), here),
        _axis(Level, _get(obj, "level", str, here), here),
        _get(obj, "advice", str, here),
        _get(obj, "why", str, here),
    )


def _verdict(obj: Any, question: Question, where: str) -> QuestionVerdict:
    here = f"{where} verdict {question.value}"
    said = _kept(obj, here)
    kept = obj.get("kept", {})
    if not isinstance(kept, dict):
        raise _ShapeError(f"{here} has a kept that is not an object")
    return QuestionVerdict(
        question,
        said.verdict,
        said.level,
        said.advice,
        said.why,
        _issues(obj, here),
        # null: the same answer as the published one (the doctor's part leaves it out: ``doctor_part``).
        {pin: said if answer is None else _kept(answer, f"{here} kept {pin}") for pin, answer in kept.items()},
    )


def _cell(obj: Any, cell_id: str, where: str) -> CellEntry:
    here = f"{where} cell {cell_id}"
    if not isinstance(obj, dict):
        raise _ShapeError(f"{here} is not an object")
    try:
        cell = Cell.parse(cell_id)
    except MatrixError as exc:
        raise _ShapeError(f"{here}: {exc}") from None
    evidence = _get(obj, "evidence", list, here)
    if not all(isinstance(sentence, str) for sentence in evidence):
        raise _ShapeError(f"{here} has evidence that is not sentences")
    verdicts = _get(obj, "verdicts", dict, here)
    gpu = obj.get("gpu", _gpu(obj))
    return CellEntry(
        cell,
        _get(obj, "command", str, here),
        tuple(evidence),
        tuple(_verdict(verdicts.get(q.value), q, here) for q in Question),
        _get(obj, "status", str, here),
        _issues(obj, here),
        gpu if isinstance(gpu, str) else "",
    )


# The kinds of evidence a GPU gave (compat.json's evidence_records[].kind).
_GPU_KINDS = ("native", "emulated", "community")


def _gpu(cell: Any) -> str:
    """The GPU a compat.json cell's strongest result ran on: its first evidence record's, where a GPU gave it."""
    records = cell.get("evidence_records")
    first = records[0] if isinstance(records, list) and records and isinstance(records[0], dict) else {}
    source = first.get("source")
    return source if first.get("kind") in _GPU_KINDS and isinstance(source, str) else ""


def _number(vllm: str, where: str) -> tuple[int, ...]:
    number = release_number(vllm)
    if number is None:
        raise _ShapeError(f"{where} is not a release number")
    return number


def _release(obj: Any, vllm: str, number: tuple[int, ...], cells: Mapping[str, Callable[[], CellEntry]]) -> Release:
    where = f"version {vllm}"
    if not isinstance(obj, dict):
        raise _ShapeError(f"{where} is not an object")
    # Per model class; a matrix made before the kit asked per model says default_runner alone, of no model.
    runners = obj.get("default_runners", {ModelClass.DENSE.value: obj.get("default_runner")})
    if not isinstance(runners, dict) or not all(r is None or isinstance(r, str) for r in runners.values()):
        raise _ShapeError(f"{where} has default_runners that are not a model class's runner each")
    return Release(
        vllm,
        number,
        {
            _axis(ModelClass, kind, where): _axis(Runner, runner, where)
            for kind, runner in runners.items()
            if runner is not None
        },
        cells,
        _architectures(obj.get("v2_architectures"), where),
    )


def _names(obj: Any, key: str, where: str) -> tuple[str, ...]:
    names = _get(obj, key, list, where)
    if not all(isinstance(name, str) for name in names):
        raise _ShapeError(f"{where} has {key} that are not architecture names")
    return tuple(names)


def _architectures(obj: Any, where: str) -> Mapping[Stack, V2Architectures] | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise _ShapeError(f"{where} has v2_architectures that are not an object per GPU stack")
    return {
        _axis(Stack, stack, where): _stack_architectures(entry, f"{where} v2_architectures {stack}")
        for stack, entry in obj.items()
    }


def _stack_architectures(obj: Any, here: str) -> V2Architectures:
    if not isinstance(obj, dict):
        raise _ShapeError(f"{here} is not an object")
    runner = _get(obj, "runner", dict, here)
    if set(runner) != set(RUNNER_KEYS) or not all(isinstance(r, str) for r in runner.values()):
        raise _ShapeError(f"{here} has a runner that is not a runner for each of {', '.join(RUNNER_KEYS)}")
    return V2Architectures(
        _names(obj, "listed", here),
        {key: _axis(Runner, runner[key], here) for key in RUNNER_KEYS},
        *(_names(obj, kind, here) if kind in obj else () for kind in ("moe", "dense")),
    )


def _checked(name: str, read: Callable[[], T]) -> Callable[[], T]:
    """``read``, raising a departure from the shape the doctor reads as the one line a person is given."""

    def checked() -> T:
        try:
            return read()
        except _ShapeError as exc:
            raise MatrixError(f"{name} is not a compat.json the doctor can read ({exc}): {REGENERATE}") from None

    return checked


def _given(value: T) -> Callable[[], T]:
    return lambda: value


def _whole(document: Any) -> tuple[Listed, ...]:
    """The releases of a compat.json (or of a doctor's part in its layout before, ``DOCTOR_SCHEMA_WHOLE``): decoded
    whole, so read and checked whole, as the doctor always read them."""

    def listed(version: Any) -> Listed:
        vllm = _get(version, "vllm", str, "a version")
        where, number = f"version {vllm}", _number(vllm, f"version {vllm}")
        cells = {}
        for cell in _get(version, "cells", list, where):
            cell_id = _get(cell, "id", str, where)
            cells[cell_id] = _given(_cell(cell, cell_id, where))
        return Listed(vllm, number, _given(_release(version, vllm, number, cells)))

    return tuple(listed(version) for version in _get(document, "versions", list, "the document"))


def _by_line(index: dict[str, Any], lines: list[bytes], name: str) -> tuple[Listed, ...]:
    """The releases the index (line 1) lists; each release's line and its cells' lines are decoded only when the
    answer asks for them."""

    def value(at: int) -> Any:
        # The writer's layout: "[" before the first value, "," after each but the last, "]" after that one.
        if at >= len(lines):
            raise _ShapeError(f"it ends before line {at + 1}")
        try:
            return parse(lines[at][1 if at == 0 else 0 : -1])
        except MatrixError as exc:
            raise _ShapeError(f"line {at + 1} cannot be read ({exc})") from None

    def cell(at: int, cell_id: str, where: str) -> CellEntry:
        return _cell(value(at), cell_id, where)

    def release(at: int, vllm: str, number: tuple[int, ...], ids: list[str]) -> Release:
        obj = value(at)
        if _get(obj, "vllm", str, f"line {at + 1}") != vllm:
            raise _ShapeError(f"line {at + 1} is not version {vllm}'s, which the index places there")
        where = f"version {vllm}"
        cells = {cell_id: _checked(name, partial(cell, at + 1 + i, cell_id, where)) for i, cell_id in enumerate(ids)}
        return _release(obj, vllm, number, cells)

    found, at = [], 1
    for version in _get(index, "versions", list, "the index"):
        vllm = _get(version, "vllm", str, "a version")
        where, number = f"version {vllm}", _number(vllm, f"version {vllm}")
        ids = _get(version, "cells", list, where)
        if not all(isinstance(cell_id, str) for cell_id in ids):
            raise _ShapeError(f"{where} has cells that are not cell ids")
        found.append(Listed(vllm, number, _checked(name, partial(release, at, vllm, number, ids))))
        at += 1 + len(ids)
    return tuple(found)


def read_published(path: Path, name: str) -> Published:
    """The file at ``path`` (``name`` in messages), a compat.json or its doctor's part, or one line saying what is
    wrong with it and what to do. Of the doctor's part (one value per line, ``doctor_part``) only the index is read
    here; a release's answers are read, and checked, when the answer needs them."""
    if not path.exists():
        raise MatrixError(f"{name} does not exist: {REGENERATE}")
    try:
        data = read_input(path)
    except InputFileError as exc:
        raise MatrixError(f"{name} is {exc}: {REGENERATE}") from None
    lines = data.split(b"\n") if data.startswith(b"[") else []
    try:
        document = parse(lines[0][1:-1] if lines else data)
    except MatrixError as exc:
        raise MatrixError(f"{name} cannot be read ({exc}): {REGENERATE}") from None
    schemas = (COMPAT_SCHEMA, COMPAT_WHOLE_SCHEMA, DOCTOR_SCHEMA_WHOLE) if not lines else (DOCTOR_SCHEMA,)
    if not isinstance(document, dict) or document.get("schema") not in schemas:
        raise MatrixError(f"{name} is not a compat.json (schema {' or '.join(schemas)}): {REGENERATE}")
    try:
        releases = _by_line(document, lines, name) if lines else _whole(document)
    except _ShapeError as exc:
        raise MatrixError(f"{name} is not a compat.json the doctor can read ({exc}): {REGENERATE}") from None
    if not releases:
        raise MatrixError(
            f"{name} holds no vLLM release (a report of crashed runs alone; `nox -s clean` removes them): {REGENERATE}"
        )
    made, kit = document.get("generated_at"), document.get("kit_commit")
    return Published(
        name,
        tuple(sorted(releases, key=lambda r: r.number, reverse=True)),
        made if isinstance(made, str) else "",
        kit if isinstance(kit, str) else "",
    )


def _doctor_verdict(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict as the doctor reads it: a kept answer that is the published one again is null (half of them)."""
    part = {key: verdict[key] for key in _VERDICT_FIELDS}
    if "kept" in verdict:
        part["kept"] = {
            pin: None if all(answer.get(key) == verdict[key] for key in _KEPT_FIELDS) else answer
            for pin, answer in verdict["kept"].items()
        }
    return part


def doctor_part(document: dict[str, Any]) -> list[Any]:
    """Of a compat.json the kit wrote, what the doctor reads (about 3% of it; the cases stay in compat.json), as
    the values ``write_packaged`` puts one per line: the index of releases and their cells' ids, then each release
    (its default runners, its runners per architecture) followed by its cells, in the index's order."""
    versions = document["versions"]
    index = {
        "schema": DOCTOR_SCHEMA,
        "generated_at": document["generated_at"],
        "kit_commit": document["kit_commit"],
        "versions": [
            {"vllm": version["vllm"], "cells": [cell["id"] for cell in version["cells"]]} for version in versions
        ],
    }
    values: list[Any] = [index]
    for version in versions:
        values.append(
            {
                "vllm": version["vllm"],
                "default_runners": version["default_runners"],
                **{key: version[key] for key in _RELEASE_NEWER_FIELDS if key in version},
            }
        )
        values += [
            {
                **{key: cell[key] for key in _CELL_FIELDS if key != "verdicts"},
                "gpu": _gpu(cell),
                "verdicts": {question: _doctor_verdict(verdict) for question, verdict in cell["verdicts"].items()},
            }
            for cell in version["cells"]
        ]
    return values


def write_packaged(compat: Path, out: Path = PACKAGED) -> Path:
    """``out`` holding the doctor's part of the compat.json at ``compat`` (the published one, by ``nox -s publish``):
    a JSON array with one value on each line, so that the doctor decodes the index and the lines it answers from."""
    document = read_record(compat, (COMPAT_SCHEMA, COMPAT_WHOLE_SCHEMA), str(compat), "a compat.json", REGENERATE)
    values = [json.dumps(value, separators=(",", ":"), ensure_ascii=False) for value in doctor_part(document)]
    return write_file(out.parent, out.name, ("[" + ",\n".join(values) + "]\n").encode())


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Write the doctor's part of a compat.json.")
    parser.add_argument("compat", type=Path, help="the compat.json `nox -s publish` wrote")
    parser.add_argument("--out", type=Path, default=PACKAGED, help=f"default: {PACKAGED.name} beside this module")
    parser.set_defaults(func=lambda args: print(write_packaged(args.compat, args.out)) or 0)
    return parser
