"""What the report shows, in words: one view model that COMPATIBILITY.md, index.html and the terminal render.

Every word, glyph and colour of the outputs is here or in a template: the
model (model.py, status.py) holds facts, this module puts them into sentences
once, and each renderer only adds its format's markup. Sentences with inline
markup are phrases (parts styled as code, strong, or a value from the inputs),
so Markdown and HTML escape and mark them up each their own way.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from matrix.cells import AXES, CELLS, WSL2_PIN_KERNEL, Axis, Cell, Host, Mode, ModelClass, Runner, Stack
from matrix.judge.verdicts import Answer, CellVerdicts, Level, Question, Verdict, Workaround
from matrix.questions import MODEL_CLASS_WORDS
from matrix.report.bandwidth import PinnedView, pinned_view
from matrix.report.model import COLUMNS, ROWS, Contradiction, Diff, Evidence, EvidenceKind, Report, detail_rows
from matrix.report.status import CellReport, Status
from matrix.store.claims import Suspect
from matrix.store.evidence import Source
from matrix.store.reading import Problem, ResultKind
from matrix.text.words import HOST_NAMES, MODE_NAMES, QUESTION_NAMES, STACK_NAMES
from matrix.variables import OPT_IN, PIN_MEMORY, V2_MODEL_RUNNER

TITLE = "vLLM WSL2 pinned-memory compatibility"
STRIPS_TITLE = "When did each set-up start or stop working? Each question's answer per vLLM release"
RUNNER_NAMES = {runner: runner.value.upper() for runner in Runner}
COLUMN_NAMES = {(r, m): f"{RUNNER_NAMES[r]} · {MODE_NAMES[m]}" for r, m in COLUMNS}
PROVENANCE = (
    ("vLLM", "vllm_version"),
    ("vLLM commit", "vllm_commit"),
    ("vLLM from", "vllm_source"),
    ("torch", "torch_version"),
    ("torch build", "torch_build"),
    ("vLLM asks for", "vllm_requires_torch"),
    ("torch mismatch", "torch_mismatch"),
    ("kernel", "kernel_release"),
    ("WSL", "wsl"),
    ("GPU", "gpu"),
    ("driver", "gpu_driver"),
    ("execution", "execution"),
    ("why", "execution_reason"),
    ("runner", "runner_name"),
    ("image", "image"),
    ("image digest", "image_digest"),
    ("started", "started_at"),
    ("environment hash", "env_hash"),
    ("kit", "kit_commit"),
)
FAILING = (Status.REGRESSION, Status.FLAKY, Status.FIXED, Status.KNOWN_FAIL)
# Per cell, the page lists this many failing tests with their messages; compat.json has them all.
LISTED_FAILURES = 40
# A release's page lists this many of its contradictions, then says how many more its case file holds: each is a
# case, and a run that contradicts every rule would make the page as large as the cases.
LISTED_CONTRADICTIONS = 500
MESSAGE_CHARS = 1500
NO_EVIDENCE = "no result"


@dataclass(frozen=True)
class StatusLook:
    """How a status shows: distinct glyphs, so no status depends on colour alone."""

    status: Status
    glyph: str
    meaning: str
    colour: str  # Okabe-Ito, safe for colour-blind readers
    ansi: str  # the terminal's SGR code

    @property
    def word(self) -> str:
        return self.status.value


# Plain Unicode glyphs that common fonts carry (emoji fonts are missing on many Linux desktops and CI).
LOOKS = {
    look.status: look
    for look in (
        StatusLook(Status.PASS, "✔", "everything as the rules expect", "#009E73", "32"),
        StatusLook(Status.KNOWN_FAIL, "⚠", "fails as expected; the linked issue explains it", "#E69F00", "33"),
        StatusLook(Status.REGRESSION, "✘", "expected to pass, failed", "#D55E00", "1;31"),
        StatusLook(Status.FIXED, "★", "expected to fail, passed: update the rule, close the issue", "#56B4E9", "36"),
        StatusLook(Status.FLAKY, "↻", "the same test passed and failed in one cell", "#CC79A7", "35"),
        StatusLook(Status.CRASHED, "☠", "no results: the session failed before writing them", "#000000", "1;37;41"),
        StatusLook(Status.MISROUTED, "⊘", "the runner is not the host its labels claim", "#F0E442", "1;33"),
        StatusLook(Status.SKIPPED, "○", "nothing could run here (the reason is given)", "#999999", "2"),
        StatusLook(Status.MISSING, "?", "no runner reported this cell", "#DDDDDD", "2"),
        StatusLook(Status.STALE, "◔", "the newest result is older than the freshness limit", "#0072B2", "34"),
    )
}


# --- evidence in words ----------------------------------------------------------------------


def kind_words(kind: ResultKind | None) -> str:
    """A kind of result as compat.json and the page name it: ``native``, a user's ``community-native``."""
    if kind is None:
        return ""
    said = kind.execution.value if kind.execution is not None else ""
    return f"community-{said}" if kind.community else said


def _evidence_words(evidence: Evidence) -> tuple[str, str, str]:
    """(what, in brackets, after): the sentence is ``what (in brackets)after``; the grid shows ``what``."""
    match evidence.kind:
        case EvidenceKind.GATE_ONLY:
            what = f"predicted: vLLM {evidence.source}'s own code decides, without a GPU (gate-only)"
            return what, evidence.date, _origin_words(evidence)
        case EvidenceKind.EMULATED:
            what = f"emulated on {evidence.source}: native Linux, the uname presented as the cell's"
            what += f", runner {evidence.runner}" if evidence.runner else ""
            return what, evidence.date, _origin_words(evidence)
        case EvidenceKind.NATIVE:
            return f"native run on {evidence.source}, runner {evidence.runner}", evidence.date, _origin_words(evidence)
        case EvidenceKind.SUPERSEDED:
            counts = ", ".join(f"{n} {status}" for status, n in evidence.counts or ())
            return f"also a {kind_words(evidence.execution)} result, not used for the status", counts, ""
        case EvidenceKind.PROBE:
            return (
                f"probe on {evidence.source}",
                evidence.date,
                f": mechanism {'works' if evidence.passed else 'fails'}",
            )
        case EvidenceKind.BENCH:
            bench = evidence.bench
            assert bench is not None, "bench evidence carries its benchmark"
            return (
                f"bench {evidence.date}",
                f"vLLM {bench.vllm_version}, concurrency {bench.concurrency}",
                f": {bench.verdict}",
            )


ORIGIN_WORDS = {
    Source.RUNNER: "a self-hosted runner's nightly result, kept in the evidence store",
    Source.MAINTAINER: "a maintainer's own run, added to the evidence store by hand",
    Source.COMMUNITY: "a user's own run, sent as a bundle: not verified by the kit's runners",
}


def _origin_words(evidence: Evidence) -> str:
    return f", {ORIGIN_WORDS[evidence.origin]}" if evidence.origin is not None else ""


def default_runners_sentence(runners: Mapping[str, str | None]) -> str:
    """Which runner a release picks per model class with the runner's variable unset, and how that is known."""
    said = [
        f"the {RUNNER_NAMES[Runner(runner)]} runner for {MODEL_CLASS_WORDS[ModelClass(kind)]}"
        for kind, runner in runners.items()
        if runner is not None
    ]
    if not said:
        return f"Which runner this release picks with {V2_MODEL_RUNNER.name} unset: none of its results says"
    return (
        f"With {V2_MODEL_RUNNER.name} unset, this release picks {' and '.join(said)} "
        "(its engine config, asked for the reproduction's engine)"
    )


def architectures_sentence(by_stack: Mapping[str, Mapping] | None) -> str:
    """Where a release picks the default runner by the model's architecture: which architectures get V2 on each
    stack, and what every other gets; empty where the architecture does not decide."""
    if not by_stack:
        return ""

    def runners(runner: Mapping[str, str], where: str) -> str:
        if runner[f"{where}-dense"] == runner[f"{where}-moe"]:
            return f"the {RUNNER_NAMES[Runner(runner[f'{where}-dense'])]} runner"
        return " and ".join(
            f"the {RUNNER_NAMES[Runner(runner[f'{where}-{kind.value}'])]} runner for {MODEL_CLASS_WORDS[kind]}"
            for kind in ModelClass
        )

    said = [
        f"on {STACK_NAMES[Stack(stack)]}, {', '.join(found['listed'])}: {runners(found['runner'], 'listed')}; "
        f"every other architecture: {runners(found['runner'], 'unlisted')}"
        for stack, found in by_stack.items()
    ]
    return (
        "Up to 0.28.0 the model's architecture picks the default runner (the release's config code, asked per class "
        f"of architecture): {'. '.join(said)}"
    )


def evidence_sentence(evidence: Evidence) -> str:
    """The evidence as one sentence (compat.json's ``evidence`` strings)."""
    what, brackets, after = _evidence_words(evidence)
    return f"{what} ({brackets}){after}"


# --- phrases: sentences with inline markup --------------------------------------------------


class Style(enum.StrEnum):
    TEXT = "text"  # a value from the inputs: escaped, and flattened to one line in Markdown
    CODE = "code"
    STRONG = "strong"


@dataclass(frozen=True, slots=True)
class Part:
    text: str
    style: Style


# The kit's own words are plain strings, fit for any format as they are; values are Parts.
Phrase = tuple[str | Part, ...]


def spell(phrase: Phrase, marks: Mapping[Style, Callable[[str], str]]) -> str:
    """A phrase in one format: the kit's words as they are, each value through its style's markup."""
    return "".join(part if isinstance(part, str) else marks[part.style](part.text) for part in phrase)


def plain(phrase: Phrase) -> str:
    """A phrase as plain text (compat.json, the terminal)."""
    return "".join(part if isinstance(part, str) else part.text for part in phrase)


def _text(value: object) -> Part:
    return Part(str(value), Style.TEXT)


def _code(value: object) -> Part:
    return Part(str(value), Style.CODE)


def _strong(value: object) -> Part:
    return Part(str(value), Style.STRONG)


# --- verdicts in words ---------------------------------------------------------------------


@dataclass(frozen=True)
class VerdictLook:
    """How a verdict shows: what a user reads first in a cell."""

    verdict: Verdict
    glyph: str
    meaning: str
    colour: str  # a light fill, far from every status colour (STATUS_VERDICT_DISTANCE)

    @property
    def word(self) -> str:
        return self.verdict.value


KERNEL = ".".join(map(str, WSL2_PIN_KERNEL))
VERDICT_LOOKS = {
    look.verdict: look
    for look in (
        VerdictLook(Verdict.WORKS, "✔", "works as installed", "#BBDDAA"),
        VerdictLook(Verdict.NEEDS_OPT_IN, "⚑", f"works only with {PIN_MEMORY.name}={OPT_IN}", "#BBCCEE"),
        VerdictLook(Verdict.NEEDS_WSL_UPDATE, "⇧", f"works after wsl --update (kernel ≥ {KERNEL})", "#9988CC"),
        VerdictLook(Verdict.BROKEN, "✘", "fails whatever the variable says", "#FFAAAA"),
        VerdictLook(Verdict.IGNORED, "∅", "accepted, but does nothing", "#DDDDAA"),
        VerdictLook(Verdict.SLOW, "◑", "works, through pageable copies every step", "#FFDDAA"),
        VerdictLook(Verdict.UNKNOWN, "?", "no evidence", "#FFFFFF"),
    )
}
# Verdicts fill a cell, statuses mark only the status line: two palettes a reader cannot take for each other.
# The least CIE76 colour difference between any verdict colour and any status colour (10: plainly different
# side by side); tests/kit/test_page_chooser.py measures it on the page as Chromium computes it.
STATUS_VERDICT_DISTANCE = 10.0
WORKAROUNDS: dict[Workaround, tuple[str | Part, ...]] = {
    Workaround.EAGER: ("use ", Part("--enforce-eager", Style.CODE), " (slower)"),
    Workaround.V1_RUNNER: ("use the V1 runner: ", Part(f"{V2_MODEL_RUNNER.name}=0", Style.CODE)),
    Workaround.V2_RUNNER: ("unset ", Part(V2_MODEL_RUNNER.name, Style.CODE), " (the V2 runner is the only one)"),
}
SET_OPT_IN: tuple[str | Part, ...] = ("set ", Part(f"{PIN_MEMORY.name}={OPT_IN}", Style.CODE))
WSL_UPDATE: tuple[str | Part, ...] = ("run ", Part("wsl --update", Style.CODE), f" (kernel ≥ {KERNEL})")


def advice(answer: Answer) -> Phrase:
    """What to set or do, in one phrase."""
    match answer.verdict:
        case Verdict.WORKS:
            return ("nothing to set",)
        case Verdict.NEEDS_OPT_IN:
            return SET_OPT_IN
        case Verdict.UNKNOWN:
            return ("no evidence yet: run the cell",)
    # Needs the update, or slow until it: `wsl --update` first, then the variable where the new kernel needs it.
    if answer.verdict is Verdict.NEEDS_WSL_UPDATE or answer.after_update:
        then = (", then ", *WORKAROUNDS[answer.then]) if answer.then is not None else ()
        return WSL_UPDATE + ((", then ", *SET_OPT_IN) if answer.and_opt_in else ()) + then
    steps = [SET_OPT_IN] if answer.and_opt_in else []
    if answer.workaround is not None:
        steps.append(WORKAROUNDS[answer.workaround])
    if not steps:
        if answer.works_in is not None:
            return (f"no setting avoids it: upgrade to vLLM {answer.works_in}, where it works as installed",)
        return ("no setting avoids it: see the issue" if answer.issues else "no setting avoids it",)
    return steps[0] + ((" and ", *steps[1]) if len(steps) > 1 else ())


def why(answer: Answer) -> str:
    """What happens, in one sentence: by default, or what the advice changes."""
    if answer.unset is None:
        return "no result of this cell says"
    found = answer.decisive or answer.unset
    said = found.rule.why + (f" {found.shown}" if found.shown else "")
    if answer.fixed is not None:
        steps = (("after wsl --update", answer.after_update), (f"with {PIN_MEMORY.name}={OPT_IN}", answer.and_opt_in))
        fix = " ".join(step for step, taken in steps if taken)
        return f"{said}; {fix}: {answer.fixed.rule.why}"
    match answer.verdict:
        case Verdict.NEEDS_OPT_IN if answer.opt_in is not None:
            return f"without {PIN_MEMORY.name}={OPT_IN}: {said}; with it: {answer.opt_in.rule.why}"
        case Verdict.NEEDS_WSL_UPDATE:
            return f"on a kernel below {KERNEL}: {said}"
        case Verdict.WORKS:
            return said
    return f"with {PIN_MEMORY.name}={OPT_IN}: {said}" if answer.and_opt_in else said


def level_words(level: Level, vllm: str, host: Host) -> str:
    return {
        Level.DOCUMENTED: "from a vendor's documented requirement, nothing run",
        Level.PREDICTED: f"predicted from vLLM {vllm}'s own decisions, without a GPU",
        Level.COMMUNITY: f"reported by a user on {HOST_NAMES[host]}, not verified by the kit's runners",
        Level.EMULATED: f"emulated on native Linux (uname presented as {HOST_NAMES[host]})",
        Level.NATIVE: f"measured on {HOST_NAMES[host]}",
        Level.NONE: "no evidence",
    }[level]


def setup_words(cell: Cell, vllm: str) -> str:
    graphs = "CUDA graphs" if cell.mode is Mode.GRAPH else "eager (--enforce-eager)"
    runner = RUNNER_NAMES[cell.runner]
    return f"vLLM {vllm}, {STACK_NAMES[cell.stack]}, {HOST_NAMES[cell.host]}, {runner} runner, {graphs}"


def answer_sentence(cell: Cell, vllm: str, verdicts: CellVerdicts) -> str:
    """The set-up's answer in one sentence: the chooser's, Markdown's and compat.json's."""
    head = verdicts.headline
    parts = "; ".join(f"{QUESTION_NAMES[a.question]} {a.verdict.value}" for a in verdicts.answers)
    level = level_words(head.level, vllm, cell.host)
    return f"{setup_words(cell, vllm)}: {head.verdict.value}, {plain(advice(head))} ({parts}; {level})."


# --- the chooser: "Does it work on my set-up?" -------------------------------------------------

# Each of the chooser's selects, in the order of AXES (so their values, joined by "-", are a cell's id).
AXIS_LABELS: dict[type[Axis], tuple[str, Mapping[Any, str]]] = {
    Stack: ("GPU stack", STACK_NAMES),
    Host: ("host", HOST_NAMES),
    Runner: ("model runner", RUNNER_NAMES),
    Mode: ("graph mode", MODE_NAMES),
}
CHOOSER_TITLE = "Does it work on my set-up?"
CHOOSER_HINTS: tuple[Phrase, ...] = (
    (
        "Which WSL2 kernel: run ",
        Part("uname -r", Style.CODE),
        f" inside WSL (a number below {KERNEL}: the old kernel; ",
        Part("wsl --update", Style.CODE),
        " brings a newer one).",
    ),
    ("On the machine itself, ", Part("python3 -m matrix doctor", Style.CODE), " answers for it."),
)


@dataclass(frozen=True)
class Choice:
    """One select of the chooser: an axis of the matrix, or the release."""

    name: str  # the axis (stack, host, runner, mode) or "release"
    label: str
    options: tuple[tuple[str, str], ...]  # (value, words), in the matrix's order


@dataclass(frozen=True)
class Chooser:
    title: str
    axes: tuple[Choice, ...]  # in the order of a cell id's parts
    release: Choice  # every release of the report, newest first
    hints: tuple[Phrase, ...]
    link: str  # the link to the chosen cell in the grid


def chooser(release_names: Iterable[str]) -> Chooser:
    """The chooser's selects, from the matrix's axes and the report's releases: no second list of cells."""
    axes = tuple(
        Choice(axis.__name__.lower(), AXIS_LABELS[axis][0], tuple((v.value, AXIS_LABELS[axis][1][v]) for v in axis))
        for axis in AXES
    )
    releases = Choice("release", "vLLM release", tuple((vllm, vllm) for vllm in release_names))
    return Chooser(CHOOSER_TITLE, axes, releases, CHOOSER_HINTS, "show it in the grid")


@dataclass(frozen=True, slots=True)
class Item:
    phrase: Phrase
    notes: tuple[str, ...] = ()  # lines under the item, from the inputs
    look: StatusLook | VerdictLook | None = None  # the legend's status or verdict


@dataclass(frozen=True)
class Section:
    # changes, contradictions, legend, diff, inputs, suspect, unplaced, not-planned; verdicts (before the releases)
    key: str
    title: str
    level: int  # heading level
    items: Iterable[Item]  # produced while rendered: a report may contradict its rules 100k times


# --- the view ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    generated: str  # YYYY-MM-DD HH:MM, UTC
    kit_commit: str
    files: int
    testcases: int
    unattributed: int
    unreadable: int


@dataclass(frozen=True)
class TimelineStep:
    vllm: str
    look: StatusLook
    summary: str


@dataclass(frozen=True)
class FailingCase:
    look: StatusLook
    name: str
    message: str  # cut to MESSAGE_CHARS


@dataclass(frozen=True)
class BenchLine:
    sentence: str
    short: str


@dataclass(frozen=True)
class AnswerView:
    question: str
    look: VerdictLook
    advice: Phrase
    why: str
    issues: tuple[str, ...]


@dataclass(frozen=True)
class CellView:
    id: str
    # What a user reads first: the most urgent of the cell's answers, and what to set or do.
    verdict: VerdictLook
    advice: Phrase
    answers: tuple[AnswerView, ...]
    answer: str  # the set-up's answer in one sentence, with what it rests on
    look: StatusLook
    underlying: StatusLook | None  # what a stale cell showed
    reason: str
    summary: str
    title: str  # the provenance on hover
    provenance: tuple[tuple[str, str], ...] | None  # None: no result, so no envelope
    evidence: tuple[str, ...]
    evidence_line: str  # the first evidence, short
    bench: BenchLine | None
    command: str
    # The cell across releases, oldest first, shown once: in the newest release's grid (so the page
    # grows linearly with releases); older releases' cells name that release in timeline_in instead.
    timeline: tuple[TimelineStep, ...]
    timeline_in: str  # "" where the timeline is shown here, or there is none (one release)
    issues: tuple[str, ...]
    failing: tuple[FailingCase, ...]
    more_failing: int  # failing cases not listed

    @property
    def line(self) -> str:
        """Under the status on the page: the behaviour, or the reason where no envelope shows it."""
        return self.summary or ("" if self.provenance is not None else self.reason)


@dataclass(frozen=True)
class GridRow:
    stack: str
    host: str
    cells: tuple[CellView, ...]


@dataclass(frozen=True)
class ReleaseView:
    vllm: str
    columns: tuple[str, ...]
    rows: tuple[GridRow, ...]
    default_runners: str  # which runner the release picks per model class, in a sentence
    evidence: tuple[tuple[str, int], ...]  # each sentence and how many cells rest on it
    benches: tuple[tuple[str, str], ...]  # cell id, benchmark sentence


@dataclass(frozen=True)
class DetailRow:
    name: str
    looks: tuple[StatusLook | None, ...]  # per cell of CELLS; None where the cell has no such test


@dataclass(frozen=True)
class DetailView:
    cell_ids: tuple[str, ...]
    rows: tuple[DetailRow, ...]


@dataclass(frozen=True)
class StripMark:
    look: VerdictLook
    title: str  # on hover: the cell, the release and the answer


@dataclass(frozen=True)
class StripRow:
    cell: str
    marks: tuple[StripMark, ...]  # per release, oldest first


@dataclass(frozen=True)
class Strip:
    question: str
    rows: tuple[StripRow, ...]  # every cell of the matrix, in its order


@dataclass(frozen=True)
class StripsView:
    """Per question, when did a set-up start or stop working: cells down, releases across (oldest first)."""

    title: str
    releases: tuple[str, ...]
    cells: tuple[str, ...]  # the rows of every strip, in the matrix's order
    strips: tuple[Strip, ...]  # one per question
    legend: tuple[VerdictLook, ...]


@dataclass(frozen=True)
class ReportView:
    """The report in words. Releases, their detail and the sections after them are built when
    rendered, one at a time, so a large report is never held whole in two shapes at once."""

    title: str
    header: Header
    release_names: tuple[str, ...]
    report: Report = field(repr=False, compare=False)
    timelines: dict[str, tuple[TimelineStep, ...]] = field(repr=False, compare=False)
    summaries: dict[tuple[str, str], str] = field(repr=False, compare=False)

    @property
    def legend(self) -> Section:
        looks = LOOKS.values()
        return Section(
            "legend", "Legend", 3, [Item((f"{x.glyph} ", _strong(x.word), ": ", x.meaning), look=x) for x in looks]
        )

    @property
    def chooser(self) -> Chooser:
        return chooser(self.release_names)

    @property
    def verdicts(self) -> Section:
        """What a cell's first line says: shown before the grids, which lead with it."""
        items = [Item((f"{x.glyph} ", _strong(x.word), ": ", x.meaning), look=x) for x in VERDICT_LOOKS.values()]
        return Section("verdicts", "Does it work? Each cell's first line", 3, items)

    def sections(self) -> Iterator[Section]:
        """What follows the releases, in this order."""
        report = self.report
        if report.changes:
            items = (
                Item((_code(c.cell), " since ", _strong(c.vllm), ": ", _text(c.before), " → ", _text(c.after)), c.rules)
                for c in report.changes
            )
            yield Section("changes", "Changes across releases", 2, items)
        if contradictions := report.contradictions:
            yield Section("contradictions", "Rules the results contradict", 2, map(_contradiction, contradictions))
        yield self.legend
        if report.diff is not None:
            yield Section("diff", "Changes since the previous report", 2, _diff(report.diff))
        inputs = report.inputs
        problems = [("unreadable", p) for p in inputs.unreadable] + [("unattributed", p) for p in inputs.unattributed]
        problems += [("warning", p) for p in inputs.warnings]
        if problems:
            items = (
                Item((f"{kind}: ", _code(p.path), ": ", _text(p.reason), *_unplaced_failures(p)))
                for kind, p in problems
            )
            yield Section("inputs", "Inputs not counted in the grid", 2, items)
        if inputs.suspect:
            title = "Suspect results: runs claimed outside the runner's cells"
            yield Section("suspect", title, 2, _suspect(inputs.suspect))
        if report.unplaced:
            items = (Item(("crashed: ", _code(c.cell.id), ": ", _text(c.reason))) for c in report.unplaced)
            yield Section("unplaced", "Runs that crashed before vLLM answered (in no release)", 2, items)
        if inputs.claims is not None and inputs.claims.not_planned:
            items = (
                Item(
                    (
                        *("not planned: ", _code(kind.name), f" ({len(kind.cells)} cells): ", _text(kind.reason)),
                        "; its cells rest on the gate job's predictions, no runner was waited for",
                    )
                )
                for kind in inputs.claims.not_planned
            )
            yield Section("not-planned", "Runner kinds not planned in this run", 2, items)

    @property
    def contradicted(self) -> dict[str, int]:
        """Per release with any, how many of its results contradict their rules: the glance counts them, and each
        release's page lists its own (one per case, they would outgrow the glance)."""
        return {vllm: len(found) for vllm, found in self.report.contradicted.items()}

    def contradictions(self, vllm: str) -> Iterator[Item]:
        """The release's first LISTED_CONTRADICTIONS contradictions."""
        return map(_contradiction, self.report.contradicted.get(vllm, [])[:LISTED_CONTRADICTIONS])

    def releases(self) -> Iterator[ReleaseView]:
        for vllm in self.release_names:
            yield self.release(vllm)

    @property
    def pinned(self) -> PinnedView:
        """What the probes measured pinned memory to buy (matrix.report.bandwidth)."""
        return pinned_view(self.report)

    @property
    def strips(self) -> StripsView:
        oldest_first = tuple(reversed(self.release_names))
        verdicts = self.report.verdicts

        def mark(vllm: str, cell: Cell, question: Question) -> StripMark:
            answer = verdicts[(vllm, cell.id)][question]  # every release has every cell: "unknown" without a result
            look = VERDICT_LOOKS[answer.verdict]
            said = plain(advice(answer))
            return StripMark(look, f"{cell.id}, vLLM {vllm}: {QUESTION_NAMES[question]} {look.word}, {said}")

        strips = tuple(
            Strip(
                QUESTION_NAMES[question],
                tuple(StripRow(cell.id, tuple(mark(v, cell, question) for v in oldest_first)) for cell in CELLS),
            )
            for question in Question
        )
        cells = tuple(cell.id for cell in CELLS)
        return StripsView(STRIPS_TITLE, oldest_first, cells, strips, tuple(VERDICT_LOOKS.values()))

    def detail(self, vllm: str) -> DetailView:
        rows = tuple(
            DetailRow(name, tuple(LOOKS[row[c.id]] if c.id in row else None for c in CELLS))
            for name, row in detail_rows(self.report, vllm)
        )
        return DetailView(tuple(c.id for c in CELLS), rows)

    def release(self, vllm: str) -> ReleaseView:
        tally: dict[str, int] = {}
        benches = []
        views = {}
        for cell in self.report.versions[vllm]:
            evidence = self.report.evidence(cell)
            for sentence in [evidence_sentence(e) for e in evidence] or [NO_EVIDENCE]:
                tally[sentence] = tally.get(sentence, 0) + 1
            view = views[(cell.cell.stack, cell.cell.host, cell.cell.runner, cell.cell.mode)] = self._cell(
                cell, evidence
            )
            if view.bench is not None:
                benches.append((view.id, view.bench.sentence))
        rows = tuple(
            GridRow(STACK_NAMES[stack], HOST_NAMES[host], tuple(views[(stack, host, *column)] for column in COLUMNS))
            for stack, host in ROWS
        )
        return ReleaseView(
            vllm,
            tuple(COLUMN_NAMES[c] for c in COLUMNS),
            rows,
            ". ".join(
                filter(
                    None,
                    (
                        default_runners_sentence(self.report.default_runners(vllm)),
                        architectures_sentence(self.report.v2_architectures(vllm)),
                    ),
                )
            ),
            tuple(tally.items()),
            tuple(benches),
        )

    def _cell(self, cell: CellReport, evidence: list[Evidence]) -> CellView:
        env = cell.envelope
        provenance = None
        if env:
            props = env.to_properties()
            provenance = tuple((label, props[key]) for label, key in PROVENANCE if props.get(key))
            if cell.age_days is not None:
                provenance += (("age", f"{cell.age_days:g} days"),)
        failing = [case for case in cell.cases if case.status in FAILING]
        bench_line = None
        for found in evidence:
            if found.kind is EvidenceKind.BENCH and found.bench is not None:
                bench_line = BenchLine(evidence_sentence(found), f"bench: {found.bench.verdict}")
        verdicts = self.report.verdicts_of(cell)
        head = verdicts.headline
        timeline = self.timelines.get(cell.cell.id, ())
        if len(timeline) < 2:
            timeline = ()
        newest = self.release_names[0]
        here = cell.vllm == newest
        return CellView(
            id=cell.cell.id,
            verdict=VERDICT_LOOKS[head.verdict],
            advice=advice(head),
            answers=tuple(
                AnswerView(QUESTION_NAMES[a.question], VERDICT_LOOKS[a.verdict], advice(a), why(a), a.issues)
                for a in verdicts.answers
            ),
            answer=answer_sentence(cell.cell, cell.vllm, verdicts),
            look=LOOKS[cell.status],
            underlying=LOOKS[cell.underlying] if cell.underlying else None,
            reason=cell.reason,
            summary=self.summaries[(cell.vllm, cell.cell.id)],
            title=_title(cell),
            provenance=provenance,
            evidence=tuple(evidence_sentence(e) for e in evidence),
            evidence_line=_evidence_words(evidence[0])[0] if evidence else "",
            bench=bench_line,
            command=cell.command,
            timeline=timeline if here else (),
            timeline_in=newest if timeline and not here else "",
            issues=tuple(cell.issues),
            failing=tuple(
                FailingCase(LOOKS[case.status], case.name, case.message[:MESSAGE_CHARS])
                for case in failing[:LISTED_FAILURES]
            ),
            more_failing=max(0, len(failing) - LISTED_FAILURES),
        )


def _title(cell: CellReport) -> str:
    env = cell.envelope
    bits = [f"{cell.cell.id}: {cell.status.value}"]
    if env:
        bits.append(f"vLLM {env.vllm_version or '?'} · {env.gpu or '?'} · {env.runner_name or '?'}")
        if cell.age_days is not None:
            bits.append(f"{cell.age_days:g} days old")
    elif cell.reason:
        bits.append(cell.reason)
    return "\n".join(bits)


def _unplaced_failures(problem: Problem) -> tuple[Part | str, ...]:
    """What failed among a problem's test cases, which are in no cell: named, so no failure is only a count."""
    if not problem.failed:
        return ()
    more = problem.failed - len(problem.failures)
    named = "; ".join(problem.failures) + (f"; and {more} more" if more else "")
    return ("; ", _strong(f"{problem.failed} failed"), ": ", _text(named))


def _contradiction(c: Contradiction) -> Item:
    return Item(
        (
            *("rule ", _code(c.rule), " expects ", _text(c.key), "=", _text(c.expected), " for ", _code(c.cell)),
            *(" (pin_env ", _text(c.pin_env), ") with vLLM ", _text(c.vllm), "; vLLM decided ", _text(c.observed)),
            *(" (", _text(c.status), ")"),
        )
    )


def _diff(diff: Diff) -> Iterator[Item]:
    for title, changes in (
        ("New regressions", diff.new_regressions),
        ("Newly fixed", diff.newly_fixed),
        ("Went missing", diff.went_missing),
    ):
        listed: list[str | Part] = []
        for i, c in enumerate(changes):
            listed += [", "] if i else []
            listed += [_code(c.cell), " (vLLM ", _text(c.vllm), ", was ", _text(c.was), ")"]
        yield Item((_strong(title), ": ", *(listed or ["none"])))


def _suspect(suspects: Iterable[Suspect]) -> Iterator[Item]:
    for s in suspects:
        source: Phrase = ("it is in no runner's artifact",)
        if s.contradiction:
            source = (_text(s.contradiction),)
        elif s.artifact:
            source = ("the artifact ", _code(s.artifact), " is not the runner the plan gave it")
        yield Item(
            (
                *("suspect: ", _code(s.path), " claims a ", _strong(s.execution), " run of ", _code(s.cell)),
                *(" (vLLM ", _text(s.vllm or "?"), ", ", str(s.testcases), " test cases), but ", *source),
                ": shown here, never counted as evidence",
            )
        )


def build_view(report: Report) -> ReportView:
    inputs = report.inputs
    summaries = {(c.vllm, c.cell.id): c.summary for c in report.all_cells}
    steps: dict[str, list[TimelineStep]] = {}
    for vllm in reversed(list(report.versions)):
        for c in report.versions[vllm]:
            steps.setdefault(c.cell.id, []).append(TimelineStep(vllm, LOOKS[c.status], summaries[(vllm, c.cell.id)]))
    return ReportView(
        title=TITLE,
        header=Header(
            f"{report.generated_at:%Y-%m-%d %H:%M}",
            report.kit_commit,
            len(inputs.files),
            inputs.testcases_read,
            len(inputs.unattributed),
            len(inputs.unreadable),
        ),
        release_names=tuple(report.versions),
        report=report,
        timelines={cell: tuple(found) for cell, found in steps.items()},
        summaries=summaries,
    )
