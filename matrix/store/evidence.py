"""The evidence store: every result a GPU gave, kept in the repository, one small record per cell and run.

The history (``docs/evidence/history.tar.xz``) holds the predictions, recomputed from vLLM's code whenever
the kit changes. What no recomputation can give back is a run on a real GPU: a self-hosted runner's night,
the offline GPU run, a maintainer's container run. Those are kept here, by vLLM release, cell and source,
as ``<store>/<vLLM>/<cell>/<source>/<date>-<execution>-<digest>.xml``: the cell's suite from that run,
normalized (its envelope, and each case's name, properties, outcome and message, nothing else), named by
the digest of its result (``identity``: all of it but when it ran and how long it took), so the same run
added twice is kept once. Each night is an event: a result equal to the newest record of its cell and source
is a *seen again* entry beside that record (``<date>-<execution>-<digest>.seen``, holding when it ran), not a
copy; one that differs from the newest, even if it equals an older one (a regression come back), is a new
record with its own date. Records are only ever added: a night that brings less takes nothing away.

Intake believes only what it can check. A result is kept at a GPU's level only where its own environment
record says a GPU ran it (``gpu_evidence_missing``); a release name must be a final release the kit covers
or the package index lists; a start time in the future, or before the matrix's first release, is refused.
On every read (``verified``) a record must match the name and folder it is kept under.

``publish``, the report the nightly workflow deploys and, through the published matrix, the doctor all read
the whole store beside the history; per cell the strongest result wins (``matrix.plan.Execution.strength``)
and the report says where it came from.

Predictions are not kept (the history owns them), nor a misrouted runner's cells (no answer of vLLM's),
nor a run that names no release; each is said, with every file that was not kept and why.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from xml.etree.ElementTree import Element

from packaging.version import InvalidVersion, Version

from matrix.case_facts import TIMINGS
from matrix.cells import Stack
from matrix.envelope import RUN_STAMP, Envelope
from matrix.errors import MatrixError
from matrix.host.classify import scrub
from matrix.host.record import EnvironmentRecord
from matrix.io.bounded_json import parse as parse_json
from matrix.io.files import InputFileError, read_input, write_file
from matrix.junit import SKIPPED, XFAIL, UnreadableError, outcome, parse, properties, record_file, suites
from matrix.plan import Execution
from matrix.store.bundle import KIT, check, load, scrub_tree
from matrix.store.claims import Claims
from matrix.store.groups import GROUP_TESTS
from matrix.store.history_archive import COMMITTED_HISTORY
from matrix.store.layout import ENGINE_BENCH_SUFFIX, ENGINE_BENCHES, PROBES
from matrix.store.reading import InputError, Problem, expand, run_order
from matrix.store.release_index import index_releases, known
from matrix.text.visible import visible


class Source(enum.StrEnum):
    """Who brought a record into the store."""

    RUNNER = "runner"  # a self-hosted runner's nightly artifact, checked against the night's plan (--runners)
    MAINTAINER = "maintainer"  # a run a maintainer added by hand: the offline GPU run, a container run
    COMMUNITY = "community"  # a user's own run, sent as a bundle (matrix.store.bundle) and checked when it came in


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


def add(
    inputs: list[str],
    store: Path,
    source: Source,
    claims: Claims | None = None,
    now: dt.datetime | None = None,
    releases: Callable[[], Iterable[str]] = index_releases,
    workflow_run: str = "",
) -> Added:
    """Each cell suite in ``inputs`` (JUnit files, directories, globs) that is a GPU's answer, kept in ``store``.

    ``claims`` (a night's plan): a native or emulated suite counts only from the artifact of the runner its
    cell was given to, as in the report; anything else is not kept, and said. A runner's suite counts only
    where the environment record the split wrote beside it (``<cell>.env.json``) says a GPU ran it.
    ``releases``: the package index's list, asked only for a release the kit does not cover.
    ``workflow_run`` (the night's run, its page's URL): a runner's suite counts only where its environment record
    was made in that run, and its record names the run, attempt and job that made it.
    """
    try:
        files, refused = expand(inputs)
    except InputError as exc:
        raise MatrixError(str(exc)) from None
    intake = _Intake(store, now or dt.datetime.now(dt.UTC), releases, workflow_run)
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
            _keep(path, suite.props, suite.cases, intake, source, claims, added)
    return added


@dataclass
class _Intake:
    """What every record of one ``add`` is checked against: the store, the time now, and the releases."""

    store: Path
    now: dt.datetime
    index: Callable[[], Iterable[str]]
    workflow_run: str = ""
    _covered: frozenset[str] | None = None
    _listed: frozenset[str] | None = None

    def not_a_release(self, vllm: str) -> str:
        """Why ``vllm`` is no release a record may be kept under, or empty: a final release (no dev, local,
        post, pre or epoch part, written as PEP 440 writes it) that the kit covers or the index lists."""
        try:
            version = Version(vllm)
        except InvalidVersion:
            return f"names no vLLM release ({vllm!r})"
        if str(version) != vllm or version.epoch or version.pre or version.post or version.dev or version.local:
            return f"names vLLM {vllm!r}, not a final release (a source build or a pre-release is no release)"
        if vllm in self.covered() or vllm in self._index():
            return ""
        return (
            f"names vLLM {vllm}, which the kit does not cover and the package index does not list: gate it first "
            "(nox -s history -- --with-new-releases), then add it again"
        )

    def covered(self) -> frozenset[str]:
        """The releases the kit covers: its committed history, unpacked once per ``add``, not once a record."""
        if self._covered is None:
            self._covered = frozenset(known(KIT / COMMITTED_HISTORY))
        return self._covered

    def _index(self) -> frozenset[str]:
        """The index's releases, asked once, and only for a release the kit does not cover."""
        if self._listed is None:
            try:
                self._listed = frozenset(self.index())
            except MatrixError:
                self._listed = frozenset()
        return self._listed

    def not_dated(self, started_at: str) -> str:
        """Why ``started_at`` cannot date a night, or empty: a time that cannot be read, one in the future
        (which would pin a cell's answer for ever), or one before the matrix's first release."""
        try:
            started = dt.datetime.fromisoformat(started_at)
        except (TypeError, ValueError):
            return f"its start time {started_at!r} cannot be read: a night is kept with its date"
        started = started if started.tzinfo else started.replace(tzinfo=dt.UTC)
        if started > self.now + CLOCK_SKEW:
            return f"its start time {started_at} is in the future"
        if started < EARLIEST:
            return f"its start time {started_at} is before the matrix's first release"
        return ""


# A runner's clock may run a little ahead of the machine that takes its results in.
CLOCK_SKEW = dt.timedelta(days=1)
# vLLM 0.23.0, the oldest release the matrix covers, is from 2025: no result can be older.
EARLIEST = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _keep(
    path: str,
    props: dict[str, str],
    cases: list[Element],
    intake: _Intake,
    source: Source,
    claims: Claims | None,
    added: Added,
) -> None:
    try:
        envelope = Envelope.from_properties(props)
    except MatrixError as exc:
        added.not_kept.append(NotKept(path, props.get("cell_id", ""), f"no cell envelope: {exc}"))
        return
    why_not = _why_not_kept(path, envelope, len(cases), claims, intake)
    if not why_not and source is Source.RUNNER:
        try:
            record = _record_beside(Path(path), envelope)
        except MatrixError as exc:
            why_not = str(exc)
        else:
            why_not = gpu_evidence_missing(record, envelope, cases)
            if not why_not and intake.workflow_run:
                why_not, made_by = from_workflow_run(record, intake.workflow_run)
                envelope = replace(envelope, extra=(*envelope.extra, *made_by))
    if why_not:
        added.not_kept.append(NotKept(path, envelope.cell.id, why_not))
        return
    _put(intake.store, source, envelope, cases, added)


def _record_beside(path: Path, envelope: Envelope) -> EnvironmentRecord:
    """The environment record a cell session's split wrote beside the cell's JUnit file; MatrixError if none."""
    where = path.with_name(f"{envelope.cell.id}.env.json")
    try:
        return EnvironmentRecord.from_json(
            parse_json(read_input(where)), f"its {where.name}", "made again by the session"
        )
    except InputFileError as exc:
        raise MatrixError(
            f"its environment record {where.name} (as the cell session's split writes it) {exc}"
        ) from None


# The kit's own stand-in for nvidia-smi (tests/stand-in-gpu/): it answers for an H200 on any machine.
STAND_IN_GPU = "stand-in-gpu/"
# The reproduction's test module: its cases run vLLM's engine and the offload on the GPU; the gate's need none.
_ON_A_GPU = GROUP_TESTS["repro"][0].removesuffix(".py").replace("/", ".")
_GPU_TOOLS = {Stack.CUDA: ("nvidia-smi",), Stack.ROCM: ("amd-smi", "rocm-smi")}
_BACKEND = {Stack.CUDA: "cuda", Stack.ROCM: "hip"}


def gpu_evidence_missing(record: EnvironmentRecord, envelope: Envelope, cases: list[Element]) -> str:
    """The first fact a GPU's result must have that its own environment record lacks, or empty.

    A result counts at a GPU's level (native, emulated) only where the record it ran under says a GPU ran it:
    vLLM installed at the release its results name, a torch with the stack's backend, a GPU tool that is not
    the kit's stand-in, a case of the reproduction that ran (not only the gate's, which need no GPU), and on a
    native WSL2 claim, WSL's GPU device. A machine with none of these makes gate cases that look like any other.
    """
    data, stack = record.data, envelope.cell.stack
    if record.env_hash != envelope.env_hash:
        return f"its environment record is {record.env_hash or 'unhashed'}, not the {envelope.env_hash} it names"
    vllm = _at(data, "packages", "vllm", "version")
    if vllm != envelope.vllm_version:
        had = f"vLLM {vllm}" if vllm else "no vLLM"
        return f"its environment record has {had} installed, not {envelope.vllm_version}"
    if not _at(data, "packages", "torch", _BACKEND[stack]):
        return f"its environment record has no torch with {stack.value}'s backend"
    tools = [str(_at(data, "gpu", "tools", tool) or "") for tool in _GPU_TOOLS[stack]]
    if not any(tools):
        return f"its environment record names no GPU tool ({', '.join(_GPU_TOOLS[stack])})"
    if any(STAND_IN_GPU in tool for tool in tools):
        return "its GPU tool is the kit's stand-in (tests/stand-in-gpu), which answers for a GPU on any machine"
    if envelope.execution is Execution.NATIVE and envelope.cell.host.is_wsl:
        if _at(data, "wsl", "is_wsl") is not True or _at(data, "gpu", "dev_dxg") is not True:
            return "a native WSL2 result whose environment record shows no WSL2 with its GPU device (/dev/dxg)"
    if not any(case.get("classname", "") == _ON_A_GPU and outcome(case)[0] not in (SKIPPED, XFAIL) for case in cases):
        return "only gate cases ran (no case of the reproduction), which need no GPU: a prediction, not a GPU's answer"
    return ""


# A workflow run's page, as GitHub names it (``$GITHUB_SERVER_URL/<owner>/<repo>/actions/runs/<id>``): its id.
WORKFLOW_RUN = re.compile(r"https?://\S+/actions/runs/(\d+)")


def from_workflow_run(record: EnvironmentRecord, run: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Why a runner's result was not made by the workflow run at ``run`` (its page), or empty; and, where it was,
    the envelope properties that say so: an artifact left from another run, or a file put where the night's
    artifacts are, names another run or none. GitHub sets the run's id, attempt and job in every step's
    environment, and the environment record keeps them."""
    named_run = WORKFLOW_RUN.fullmatch(run)
    run_id = named_run[1] if named_run else ""
    said = _at(record.data, "environment", "GITHUB_RUN_ID")
    if said != run_id:
        named = f"workflow run {said}" if said else "no workflow run"
        return f"its environment record names {named}, not the night's ({run})", ()
    attempt = str(_at(record.data, "environment", "GITHUB_RUN_ATTEMPT") or "1")
    job = str(_at(record.data, "environment", "GITHUB_JOB") or "")
    return "", (("workflow_run", f"{run}/attempts/{attempt}"), ("workflow_job", job))


def _at(data: object, *path: str) -> object:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def add_bundles(bundles: list[Path], store: Path, kit: Path = KIT, now: dt.datetime | None = None) -> Added:
    """Each cell of each bundle (matrix.store.bundle) kept in ``store`` as a user's own (Source.COMMUNITY), once; a
    bundle that is not one, that its own files or the kit's repository at ``kit`` contradict, that names one of
    the kit's own runners, or whose environment records do not show a GPU ran it, kept not at all, with the
    reason. The index is never asked for a user's release: it must be one the kit covers."""
    intake = _Intake(store, now or dt.datetime.now(dt.UTC), lambda: ())
    ours = _runner_names(store)
    added = Added()
    for path in bundles:
        try:
            checked = check(load(path), kit)
            if problem := intake.not_a_release(checked.bundle.vllm):
                raise MatrixError(problem)
            for envelope, cases, record in checked.suites:
                cell = envelope.cell.id
                if envelope.runner_name in ours:
                    raise MatrixError(f"{cell} names {envelope.runner_name!r}, one of the kit's own runners")
                if problem := intake.not_dated(envelope.started_at) or gpu_evidence_missing(record, envelope, cases):
                    raise MatrixError(f"{cell}: {problem}")
        except MatrixError as exc:
            added.not_kept.append(NotKept(str(path), "", f"refused: {exc}"))
            continue
        for envelope, cases, record in checked.suites:
            # What the record says names the machine is taken out of what is kept (a bundle's maker took out what
            # its machine knew; one made otherwise may hold it).
            known = record.names
            props = {name: scrub(value, known) for name, value in envelope.to_properties().items()}
            kept = [scrub_tree(case, known) for case in cases]
            _put(store, Source.COMMUNITY, Envelope.from_properties(props), kept, added)
    return added


def _runner_names(store: Path) -> frozenset[str]:
    """The runners whose results the kit itself keeps (a runner's nights, a maintainer's runs)."""
    return frozenset(
        record.envelope.runner_name
        for record in verified(store)[0]
        if record.source is not Source.COMMUNITY and record.envelope.runner_name
    )


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
    from matrix.store.probe import read_probe

    try:
        probe = read_probe(path)
    except MatrixError as exc:
        return f"not a probe record: {exc}", ""
    if probe.stack == "none" or probe.gpu in ("", "?", "none"):
        return "a probe record of a machine without a GPU", ""
    return "", f"{_date(probe.collected_at)}-{probe.stack}-{probe.host}"


def _engine_bench(path: Path) -> tuple[str, str]:
    from matrix.store.engine_bench import read_engine_bench

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
    """Keep one night's result of a cell from ``source``: a new record where it differs from that source's
    newest, else a *seen again* entry beside the newest (the same run added twice is kept once)."""
    data = record_file(envelope, cases)
    # Named by what is kept (scrubbed, normalized), so that every later read can check the name against it.
    (kept_suite,), _ = suites(parse(io.BytesIO(data)))
    digest = identity(Envelope.from_properties(kept_suite.props), kept_suite.cases)
    folder = store / envelope.vllm_version / envelope.cell.id / source.value
    execution = envelope.execution.value if envelope.execution else ""
    dated = f"{_date(envelope.started_at)}-{execution}-{digest}"
    kept = [*sorted(folder.glob(f"*-{digest}.xml")), *sorted(folder.glob(f"*-{digest}.seen"))]
    if any(_started(path) == envelope.started_at for path in kept):
        added.already.append(kept[0])
        return
    newest = max(folder.glob("*.xml"), key=_started_order, default=None) if folder.is_dir() else None
    if newest is not None and newest.name.endswith(f"-{digest}.xml"):
        added.already.append(write_file(folder, f"{dated}.seen", f"{envelope.started_at}\n".encode()))
        return
    added.new.append(write_file(folder, f"{dated}.xml", data))


def _started(path: Path) -> str:
    """When the night of a record or a seen-again entry started, as its envelope (or the entry) says."""
    try:
        if path.suffix == ".seen":
            return read_input(path, 256).decode().strip()
        (suite,), _ = suites(parse(path))
        return suite.props.get("started_at", "")
    except (InputFileError, UnreadableError, UnicodeDecodeError, ValueError):
        return ""


def _started_order(path: Path) -> tuple[int, float, str]:
    return run_order(_started(path))


# What differs between two runs that gave the same result: the run's stamp (matrix.envelope), and the workflow
# run and job that made them (a kept record's, from_workflow_run).
VOLATILE_ENVELOPE = RUN_STAMP | {"workflow_run", "workflow_job"}


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
                {k: v for k, v in properties(case).items() if k not in TIMINGS},
            ]
            for case in cases
        ),
    ]
    return hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()[:16]


def _why_not_kept(path: str, envelope: Envelope, testcases: int, claims: Claims | None, intake: _Intake) -> str:
    execution = envelope.execution
    if execution is None:
        return "no execution in its envelope"
    if execution is Execution.GATE_ONLY:
        return "a prediction (gate-only): the history keeps those"
    if execution is Execution.MISROUTED:
        return "a misrouted runner's cell: no answer of vLLM's"
    if problem := intake.not_a_release(envelope.vllm_version) or intake.not_dated(envelope.started_at):
        return problem
    if envelope.contradiction:
        return f"its envelope contradicts itself: {envelope.contradiction}"
    if claims is not None:
        suspect = claims.suspect(path, envelope, testcases)
        if suspect is not None:
            artifact = suspect.artifact or "no artifact"
            return f"a {execution.value} result from {artifact}, which the night's plan did not give this cell"
    return ""


@dataclass(frozen=True, slots=True)
class Record:
    """A record of the store as read back: where it is kept, who brought it, and the envelope it holds."""

    path: Path
    source: Source
    envelope: Envelope


def verified(store: Path) -> tuple[list[Record], list[Problem]]:
    """Every record of ``store`` whose content matches its name and folder, and every other file laid out as a
    record, with why it is not believed: a record added by hand (a pull request can add one) is read only
    where it is what the store would have written for its content."""
    records: list[Record] = []
    refused: list[Problem] = []
    for path in sorted(store.rglob("*.xml")) if store.is_dir() else []:
        if origin(str(path), store) is None:
            refused.append(Problem(str(path), "in the store but not laid out as its records are: not read"))
            continue
        try:
            found, stray = suites(parse(path))
            if stray or len(found) != 1:
                raise MatrixError("it is not one cell's suite")
            (suite,) = found
            envelope = Envelope.from_properties(suite.props)
        except (UnreadableError, MatrixError) as exc:
            refused.append(Problem(str(path), f"a store record that cannot be read: {exc}"))
            continue
        vllm, cell, source = path.relative_to(store).parts[:3]
        execution = envelope.execution.value if envelope.execution else ""
        named = f"-{execution}-{identity(envelope, suite.cases)}.xml"
        if (envelope.vllm_version, envelope.cell.id) != (vllm, cell) or not path.name.endswith(named):
            refused.append(Problem(str(path), "a store record whose content is not what its name and folder say"))
            continue
        records.append(Record(path, Source(source), envelope))
    return records, refused


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
