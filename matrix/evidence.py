"""The evidence store: every result a GPU gave, kept in the repository, one small record per cell and run.

The history (``docs/evidence/history.tar.xz``) holds the predictions, recomputed from vLLM's code whenever
the kit changes. What no recomputation can give back is a run on a real GPU: a self-hosted runner's night,
the offline GPU run, a maintainer's container run. Those are kept here, by vLLM release, cell and source,
as ``<store>/<vLLM>/<cell>/<source>/<date>-<execution>-<digest>.xml``: the cell's suite from that run,
normalized (its envelope, and each case's name, properties, outcome and message, nothing else), named by
the digest of its result (``identity``: all of it but when it ran and how long it took), so the same run
added twice is kept once, and so is a set-up that answers the same night after night: the store grows when
a result changes, not by a night. Records are only ever added: a night that brings less than the one before
takes nothing away. ``publish``, the report the nightly workflow
deploys and, through the published matrix, the doctor all read the whole store beside the history; per
cell the strongest result wins (``matrix.plan.Execution.strength``) and the report says where it came from.

Predictions are not kept (the history owns them), nor a misrouted runner's cells (no answer of vLLM's),
nor a run that names no release; each is said, with every file that was not kept and why.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree.ElementTree import Element

from matrix.bundle import KIT, check, load
from matrix.envelope import Envelope
from matrix.errors import MatrixError
from matrix.expectations import release_version
from matrix.files import write_file
from matrix.history_cache import VOLATILE_CASE_PROPERTIES
from matrix.junit import properties, record_file
from matrix.layout import ENGINE_BENCH_SUFFIX, ENGINE_BENCHES, PROBES
from matrix.plan import Execution
from matrix.report.claims import Claims
from matrix.report.reading import InputError, UnreadableError, expand, outcome, parse, suites
from matrix.report.visible import visible


class Source(enum.StrEnum):
    """Who brought a record into the store."""

    RUNNER = "runner"  # a self-hosted runner's nightly artifact, checked against the night's plan (--runners)
    MAINTAINER = "maintainer"  # a run a maintainer added by hand: the offline GPU run, a container run
    COMMUNITY = "community"  # a user's own run, sent as a bundle (matrix.bundle) and checked when it came in


@dataclass(frozen=True, slots=True)
class NotKept:
    path: str
    cell: str  # "" where the file names none
    reason: str


@dataclass
class Added:
    """What one ``add`` did: every suite read is in exactly one of the three."""

    new: list[Path] = field(default_factory=list)
    already: list[Path] = field(default_factory=list)
    not_kept: list[NotKept] = field(default_factory=list)


_RECORD = re.compile(r"^(?:\d{4}-\d\d-\d\d|undated)-[a-z-]+-[0-9a-f]{16}\.xml$")


def origin(path: str, store: Path) -> Source | None:
    """The source of a file the report read, where it is a record of ``store``; None for any other file."""
    try:
        parts = Path(path).resolve().relative_to(store.resolve()).parts
    except ValueError:
        return None
    if len(parts) != 4 or not _RECORD.match(parts[3]):
        return None
    try:
        return Source(parts[2])
    except ValueError:
        return None


def add(inputs: list[str], store: Path, source: Source, claims: Claims | None = None) -> Added:
    """Each cell suite in ``inputs`` (JUnit files, directories, globs) that is a GPU's answer, kept in ``store``.

    ``claims`` (a night's plan): a native or emulated suite counts only from the artifact of the runner its
    cell was given to, as in the report; anything else is not kept, and said.
    """
    try:
        files, refused = expand(inputs)
    except InputError as exc:
        raise MatrixError(str(exc)) from None
    added = Added(not_kept=[NotKept(p.path, "", p.reason) for p in refused])
    for path in files:
        try:
            root = parse(path)
        except UnreadableError as exc:
            added.not_kept.append(NotKept(path, "", str(exc)))
            continue
        found, stray = suites(root)
        if stray or not found:
            added.not_kept.append(NotKept(path, "", "testcases outside any cell's suite" if stray else "no suite"))
        for suite in found:
            _keep(path, suite.props, suite.cases, store, source, claims, added)
    return added


def _keep(
    path: str,
    props: dict[str, str],
    cases: list[Element],
    store: Path,
    source: Source,
    claims: Claims | None,
    added: Added,
) -> None:
    try:
        envelope = Envelope.from_properties(props)
    except MatrixError as exc:
        added.not_kept.append(NotKept(path, props.get("cell_id", ""), f"no cell envelope: {exc}"))
        return
    why_not = _why_not_kept(path, envelope, len(cases), claims)
    if why_not:
        added.not_kept.append(NotKept(path, envelope.cell.id, why_not))
        return
    _put(store, source, envelope, cases, added)


def add_bundles(bundles: list[Path], store: Path, kit: Path = KIT) -> Added:
    """Each cell of each bundle (matrix.bundle) kept in ``store`` as a user's own (Source.COMMUNITY), once; a
    bundle that is not one, or that its own files or the kit's repository at ``kit`` contradict, kept not at
    all, with the reason."""
    added = Added()
    for path in bundles:
        try:
            checked = check(load(path), kit)
            if problem := _not_a_release(checked.bundle.vllm):
                raise MatrixError(problem)
        except MatrixError as exc:
            added.not_kept.append(NotKept(str(path), "", f"refused: {exc}"))
            continue
        for envelope, cases in checked.suites:
            _put(store, Source.COMMUNITY, envelope, cases, added)
    return added


def add_probes(inputs: list[str], store: Path, source: Source) -> Added:
    """Each probe record (``*.probe.json``) and engine-level benchmark record (``*.engine-bench.json``) among
    ``inputs`` that a GPU measured, kept once (by the digest of its bytes) in ``store/probes/<source>/`` or
    ``store/engine-bench/<source>/``; any other, not kept, with the reason.

    Only a maintainer's run brings them in: a night's artifacts carry no plan such a record can be checked
    against (it names no cell), and a record is believed no further than it can be checked. A stand-in's
    benchmark measures the bench, never pinned memory: it is never kept."""
    added = Added()
    if source is not Source.MAINTAINER:
        return added
    for path in _named(inputs, ".probe.json"):
        why_not, date = _probe(path)
        _keep_record(path, why_not, store / PROBES / source.value, date, added)
    for path in _named(inputs, ENGINE_BENCH_SUFFIX):
        why_not, date = _engine_bench(path)
        _keep_record(path, why_not, store / ENGINE_BENCHES / source.value, date, added)
    return added


def _named(inputs: list[str], suffix: str) -> list[Path]:
    found: list[Path] = []
    for item in map(Path, inputs):
        found += sorted(item.rglob(f"*{suffix}")) if item.is_dir() else [item] if item.name.endswith(suffix) else []
    return found


def _probe(path: Path) -> tuple[str, str]:
    """Why the probe record at ``path`` is not kept (empty: it is), and its name's date and host."""
    from matrix.report.model import read_probe

    try:
        probe = read_probe(path)
    except MatrixError as exc:
        return f"not a probe record: {exc}", ""
    if probe.stack == "none" or probe.gpu in ("", "?", "none"):
        return "a probe record of a machine without a GPU", ""
    return "", f"{_date(probe.collected_at)}-{probe.stack}-{probe.host}"


def _engine_bench(path: Path) -> tuple[str, str]:
    from matrix.report.engine_bench import read_engine_bench

    try:
        bench = read_engine_bench(path)
    except MatrixError as exc:
        return f"not an engine-level benchmark record: {exc}", ""
    if bench.stand_in:
        return f"a stand-in's benchmark, which measures the bench and not vLLM ({bench.stand_in_reason})", ""
    if not bench.gpu or not bench.benches:
        return "an engine-level benchmark that measured nothing on a GPU", ""
    return "", f"{_date(bench.started_at)}-vllm-{bench.vllm_version}"


def _keep_record(path: Path, why_not: str, folder: Path, named: str, added: Added) -> None:
    if why_not:
        added.not_kept.append(NotKept(str(path), "", why_not))
        return
    data = path.read_bytes()
    kept_as = f"{hashlib.sha256(data).hexdigest()[:16]}{''.join(path.suffixes[-2:])}"
    present = sorted(folder.parent.glob(f"*/*-{kept_as}"))
    if present:
        added.already.append(present[0])
        return
    added.new.append(write_file(folder, f"{named}-{kept_as}", data))


def _put(store: Path, source: Source, envelope: Envelope, cases: list[Element], added: Added) -> None:
    cell = envelope.cell.id
    digest = identity(envelope, cases)
    folder = store / envelope.vllm_version / cell
    present = sorted(folder.glob(f"*/*-{digest}.xml"))
    if present:
        added.already.append(present[0])
        return
    execution = envelope.execution.value if envelope.execution else ""
    name = f"{_date(envelope.started_at)}-{execution}-{digest}.xml"
    added.new.append(write_file(folder / source.value, name, record_file(envelope, cases)))


# What differs between two runs that gave the same result: when they ran, with which commit of the kit (one that
# changed no test gives the same cases), and the hash of an environment record that holds those.
VOLATILE_ENVELOPE = frozenset({"started_at", "kit_commit", "env_hash"})


def identity(envelope: Envelope, cases: list[Element]) -> str:
    """The digest of a run's result: the same for every night the same set-up gave the same answers, so the
    store grows when a result changes (a release, a driver, a kernel, an outcome), not by a record a night."""
    said = [
        {name: value for name, value in envelope.to_properties().items() if name not in VOLATILE_ENVELOPE},
        *(
            [
                case.get("classname", ""),
                case.get("name", ""),
                *outcome(case),
                {k: v for k, v in properties(case).items() if k not in VOLATILE_CASE_PROPERTIES},
            ]
            for case in cases
        ),
    ]
    return hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()[:16]


def _why_not_kept(path: str, envelope: Envelope, testcases: int, claims: Claims | None) -> str:
    execution = envelope.execution
    if execution is None:
        return "no execution in its envelope"
    if execution is Execution.GATE_ONLY:
        return "a prediction (gate-only): the history keeps those"
    if execution is Execution.MISROUTED:
        return "a misrouted runner's cell: no answer of vLLM's"
    if problem := _not_a_release(envelope.vllm_version):
        return problem
    if envelope.contradiction:
        return f"its envelope contradicts itself: {envelope.contradiction}"
    if claims is not None:
        suspect = claims.suspect(path, envelope, testcases)
        if suspect is not None:
            artifact = suspect.artifact or "no artifact"
            return f"a {execution.value} result from {artifact}, which the night's plan did not give this cell"
    return ""


def _not_a_release(vllm: str) -> str:
    """Why ``vllm`` cannot name a release's directory of the store (it becomes one), or empty."""
    if release_version(vllm) is None or not re.fullmatch(r"[0-9A-Za-z.+!-]+", vllm):
        return f"names no vLLM release ({vllm!r})"
    return ""


def _date(started_at: str) -> str:
    try:
        return dt.datetime.fromisoformat(started_at).date().isoformat()
    except (TypeError, ValueError):
        return "undated"


# How many files a reason for not keeping them names; the rest are counted.
NAMED = 3


def render(added: Added, store: Path) -> str:
    """What ``add`` did, in a few lines: the new records by name, the others counted, each reason once."""
    lines = [f"{len(added.new)} new record(s) in {store}, {len(added.already)} the same as one kept before"]
    lines += [f"  new: {path}" for path in added.new]
    reasons: dict[str, list[NotKept]] = {}
    for item in added.not_kept:
        reasons.setdefault(item.reason, []).append(item)
    for reason, items in reasons.items():
        named = ", ".join(f"{i.path}" + (f" ({i.cell})" if i.cell else "") for i in items[:NAMED])
        more = f" and {len(items) - NAMED} more" if len(items) > NAMED else ""
        lines.append(visible(f"  not kept, {len(items)} suite(s): {reason}: {named}{more}"))
    return "\n".join(lines)
