"""The set-up asked about (this machine, or flags over it) and the published answer for it: pure decisions.

Each choice keeps where it came from, so the answer can say what it assumed and how to ask otherwise. What the
doctor cannot answer is a ``RefusedError`` holding one small record of why; ``render`` words it, as it words the answer.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, Union

from matrix.cells import Cell, Host, Mode, ModelClass, Runner, Stack
from matrix.doctor.published import (
    CellEntry,
    Kept,
    Kind,
    Listed,
    Published,
    QuestionVerdict,
    Release,
    Version,
    parse_version,
    release_number,
)
from matrix.host.classify import (
    HostFacts,
    classify_host,
    classify_stack,
    is_wsl1,
    parse_kernel_version,
    vllm_in_wsl,
    vllm_kernel_version,
    wsl_outside_uname,
)
from matrix.questions import Level, Question, Verdict
from matrix.variables import OPT_IN, PIN_MEMORY, UNSET, V2_MODEL_RUNNER, Variable, vllm_reads

T = TypeVar("T")


class Source(enum.Enum):
    FLAG = "flag"  # a command-line flag
    MACHINE = "machine"  # read from this machine
    VARIABLE = "variable"  # VLLM_USE_V2_MODEL_RUNNER
    MATRIX = "matrix"  # the published matrix: the release's default runner
    ARCHITECTURE = "architecture"  # the published matrix: the release's runner for the model's architecture
    MODEL = "model"  # the model directory's config.json (--model)
    DEFAULT = "default"  # vLLM's own default
    ASSUMED = "assumed"  # nothing says: the doctor's guess


class HostNote(enum.Enum):
    """What the doctor says beside the host it answers for, which is vLLM's reading of the uname."""

    NONE = "none"
    # WSL2 by its uname, with a version a person reads (5.15.0rc1) that vLLM's int() does not: vLLM takes the
    # old-kernel path and never reads the variable.
    VERSION_UNREADABLE = "version-unreadable"
    # WSL by its own signs (WSL_DISTRO_NAME, its interop file), but no "microsoft" in the uname: vLLM decides as
    # on native Linux.
    WSL_OUTSIDE_UNAME = "wsl-outside-uname"
    WSL1 = "wsl1"  # no GPU reaches WSL1; vLLM reads its 4.4.0 kernel as an old WSL2 one


# NamedTuples, not dataclasses: made at every start of the doctor, whose budget is 2x a bare Python's start.
if TYPE_CHECKING:  # a generic NamedTuple needs Python 3.11 at run time, and the doctor runs on 3.8

    class Chosen(NamedTuple, Generic[T]):
        value: T
        source: Source

else:

    class Chosen(NamedTuple):
        value: Any
        source: Source


class Asked(NamedTuple):
    """The flags: each None where the machine is to be read instead."""

    kernel: str | None = None
    stack: Stack | None = None
    vllm: str | None = None
    runner: Runner | None = None
    mode: Mode | None = None
    model_class: ModelClass | None = None
    model_class_source: Source = Source.FLAG  # --moe, or --model's config.json
    architecture: str | None = None  # the model's config.json `architectures` entry (--arch, --model)


class Reads(enum.Enum):
    """What vLLM makes of a variable's value here (``matrix.variables.vllm_reads``)."""

    UNSET = "unset"
    ON = "on"  # read as 1
    OFF = "off"  # read as 0
    UNREADABLE = "unreadable"  # int() raises ValueError: vLLM stops at start-up
    NOT_READ = "not-read"  # the release answering predates the variable


class Setting(NamedTuple):
    """One of the variables the doctor reads, as set here and as vLLM reads it."""

    variable: Variable
    value: str | None  # None: unset
    reads: Reads


def _setting(variable: Variable, value: str | None, release: tuple[int, ...] | None = None) -> Setting:
    """``variable`` set to ``value`` (None: unset) as vLLM reads it; ``release``: the vLLM answering, if it matters."""
    if value is None:
        return Setting(variable, None, Reads.UNSET)
    if release is not None and variable.since is not None and release < (release_number(variable.since) or ()):
        return Setting(variable, value, Reads.NOT_READ)
    read = vllm_reads(value)
    return Setting(variable, value, Reads.UNREADABLE if read is None else Reads.ON if read else Reads.OFF)


class SetUp(NamedTuple):
    kernel: Chosen[str]  # a uname release
    kernel_read: bool  # False: the machine's release is not one the doctor can read, and ``host`` is assumed
    host: Host  # as vLLM reads the uname
    host_note: HostNote
    stack: Chosen[Stack]
    stack_reason: str  # how detection found the stack; empty for --stack
    installed_vllm: str | None
    vllm: Chosen[str] | None  # None: neither asked nor installed
    runner: Chosen[Runner] | None  # None: the release's default decides
    mode: Chosen[Mode]
    model_class: Chosen[ModelClass]  # what the release's default runner depends on
    architecture: Chosen[str] | None  # what 0.23.0 to 0.28.0's default runner depends on; None: not asked
    pin_memory: str | None  # PIN_MEMORY's value here; None when unset
    runner_variable: Setting  # V2_MODEL_RUNNER here
    origin: str = ""  # where the machine's facts came from when not this machine (``collected``): a file


# Why the doctor cannot answer: one record each, worded by render.refusal, which tells them apart by their class
# (as tuples, no two could be equal: their fields differ in number or kind).
class UnreadableKernel(NamedTuple):
    release: str  # --kernel's value: not a `uname -r` release


class NoStack(NamedTuple):
    kernel: str
    host: Host
    reason: str  # what detection found instead
    where: str = "here"  # this machine, or "in <the file>" for another's


class NotARelease(NamedTuple):
    asked: Chosen[str]  # --vllm's value or the installed version


class OlderThanAll(NamedTuple):
    asked: str
    matrix: str
    oldest: str


class NoCell(NamedTuple):
    matrix: str
    cell: Cell
    vllm: str


Refusal = Union[UnreadableKernel, NoStack, NotARelease, OlderThanAll, NoCell]


class RefusedError(Exception):
    """The doctor cannot answer: ``refusal`` says why."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal)
        self.refusal = refusal


def _host_note(facts: HostFacts) -> HostNote:
    """Where a reading of the uname that a person would make is not vLLM's, for a release the doctor reads."""
    release = facts.uname.get("release", "")
    if not vllm_in_wsl(facts.uname):
        return HostNote.WSL_OUTSIDE_UNAME if wsl_outside_uname(facts) else HostNote.NONE
    if is_wsl1(release):
        return HostNote.WSL1
    return HostNote.VERSION_UNREADABLE if vllm_kernel_version(release) is None else HostNote.NONE


def set_up(facts: HostFacts, asked: Asked, origin: str = "") -> SetUp:
    """The set-up: each flag given, else what ``facts`` say (this machine's, or ``origin``'s: a file describing
    another); refused for a --kernel that is no kernel release."""
    if asked.kernel is not None:
        if parse_kernel_version(asked.kernel) is None:
            raise RefusedError(UnreadableKernel(asked.kernel))
        # The release alone decides, as in vLLM: "microsoft" in it is WSL2, anything else native Linux.
        flagged = HostFacts(uname={"release": asked.kernel})
        kernel, host = Chosen(asked.kernel, Source.FLAG), classify_host(flagged)
        kernel_read = True
        note = _host_note(flagged)
    else:
        # A machine's release the doctor cannot read is answered for what classify_host makes of it, said so:
        # native Linux, or on WSL2 a kernel below the gate, as vLLM takes a WSL2 kernel it cannot parse.
        release = facts.uname.get("release", "")
        kernel, host = Chosen(release, Source.MACHINE), classify_host(facts)
        kernel_read = parse_kernel_version(release) is not None
        note = _host_note(facts) if kernel_read else HostNote.NONE
    if asked.stack is not None:
        stack, reason = Chosen(asked.stack, Source.FLAG), ""
    else:
        detected, reason = classify_stack(facts)
        if detected is None:
            # Still say what was read: the kernel's side of the gate answers half the question already.
            raise RefusedError(NoStack(kernel.value, host, reason, f"in {origin}" if origin else "here"))
        stack = Chosen(detected, Source.MACHINE)
    installed = (facts.vllm or {}).get("version")
    if asked.vllm is not None:
        vllm: Chosen[str] | None = Chosen(asked.vllm, Source.FLAG)
    else:
        vllm = Chosen(installed, Source.MACHINE) if installed else None
    runner_variable = _setting(V2_MODEL_RUNNER, facts.environ.get(V2_MODEL_RUNNER.name))
    if asked.runner is not None:
        runner: Chosen[Runner] | None = Chosen(asked.runner, Source.FLAG)
    elif runner_variable.reads in (Reads.ON, Reads.OFF):
        runner = Chosen(Runner.V2 if runner_variable.reads is Reads.ON else Runner.V1, Source.VARIABLE)
    else:
        runner = None  # unset, or a value vLLM cannot read (said beside the answer): the release's default
    return SetUp(
        kernel=kernel,
        kernel_read=kernel_read,
        host=host,
        host_note=note,
        stack=stack,
        stack_reason=reason,
        installed_vllm=installed,
        vllm=vllm,
        runner=runner,
        mode=Chosen(asked.mode, Source.FLAG) if asked.mode else Chosen(Mode.GRAPH, Source.DEFAULT),
        model_class=(
            Chosen(asked.model_class, asked.model_class_source)
            if asked.model_class
            else Chosen(ModelClass.DENSE, Source.DEFAULT)
        ),
        architecture=(
            Chosen(asked.architecture, asked.model_class_source if asked.model_class else Source.FLAG)
            if asked.architecture
            else None
        ),
        pin_memory=facts.environ.get(PIN_MEMORY.name),
        runner_variable=runner_variable,
        origin=origin,
    )


class Match(enum.Enum):
    """How the release answering stands to the version asked about."""

    NEWEST = "newest"  # nothing asked or installed: the newest release answers
    SAME = "same"  # the asked version's release (for a pre-, dev or post-release: the nearest published one)
    NEAREST_OLDER = "nearest-older"  # the matrix lacks it: the nearest older release
    NEWER_PATCH = "newer-patch"  # newer than the newest, in the same minor release: the newest
    NEWER = "newer"  # newer than the newest by more than a patch: the newest, with a gap nothing published covers


class Basis(enum.Enum):
    """What the verdicts shown are: the published ones, or what the published runs give for this set-up."""

    PUBLISHED = "published"  # the cell's verdicts, for the variable unset
    OPTED_IN = "opted-in"  # the cell's answers for one who keeps VLLM_WSL2_ENABLE_PIN_MEMORY=1, as set here
    # A WSL2 kernel release vLLM cannot parse: its old-kernel path, which never reads the variable, on a kernel the
    # GPU works on: the new kernel's cell's answers with the variable unset
    NOT_READ = "not-read"
    ENGINE_STOPS = "engine-stops"  # a variable here vLLM cannot read: it stops with a ValueError at start-up
    # The variable is set, but the matrix was made before it said the answers with it set: the published ones
    PUBLISHED_UNSET = "published-unset"


class Shown(NamedTuple):
    """One question's answer as the doctor gives it for this set-up."""

    question: Question
    verdict: Verdict
    level: Level
    said: Kept | None  # the published words (advice, why); None where the doctor's own reason stands (ENGINE_STOPS)


class ByArchitecture(NamedTuple):
    """How a release that picks its runner by architecture picked it for the model asked about."""

    architecture: str
    listed: bool  # on the release's list of architectures that get the V2 runner by default
    moe: bool
    moe_from: Source  # FLAG (--moe), MODEL (config.json), MATRIX (the release's list of MoE architectures), DEFAULT


class Answer(NamedTuple):
    setup: SetUp
    matrix: str  # the file's name in messages
    release: Release
    version: Version | None  # the version asked about or installed; None: neither
    match: Match
    runner: Chosen[Runner]
    entry: CellEntry
    pin: Setting  # PIN_MEMORY as the release answering reads it here
    matrix_made: str = ""  # when the matrix answering was made (its generated_at, as written)
    matrix_kit: str = ""  # the kit commit that made it
    basis: Basis = Basis.PUBLISHED
    shown: tuple[Shown, ...] = ()  # one per Question, in its order
    by_architecture: ByArchitecture | None = None  # None: the release's default_runners (or a flag) chose

    @property
    def cell(self) -> Cell:
        return self.entry.cell

    @property
    def nearest_older(self) -> bool:
        """The matrix lacks the asked release: an older one answers."""
        return self.match in (Match.NEAREST_OLDER, Match.NEWER_PATCH, Match.NEWER)

    @property
    def not_final(self) -> bool:
        """The version asked about is a pre-, dev or post-release, which no published release is."""
        return self.version is not None and self.version.kind is not Kind.FINAL

    @property
    def opted_in(self) -> bool:
        """Whether vLLM reads PIN_MEMORY as 1 here, as a needs-opt-in verdict asks."""
        return self.pin.reads is Reads.ON

    @property
    def issues(self) -> tuple[str, ...]:
        """Every issue the published entry names, the cell's known failures' first, once each."""
        named = list(self.entry.issues) + [issue for v in self.entry.verdicts for issue in v.issues]
        return tuple(dict.fromkeys(named))


def _version(setup: SetUp) -> Version | None:
    if setup.vllm is None:
        return None
    version = parse_version(setup.vllm.value)
    if version is None:
        raise RefusedError(NotARelease(setup.vllm))
    return version


def _release(version: Version | None, published: Published) -> tuple[Listed, Match]:
    """The release that answers for ``version`` and how it stands to it; refused below every release."""
    newest = published.releases[0]
    if version is None:
        return newest, Match.NEWEST
    asked = version.number
    if asked > newest.number:
        # The same minor release (0.33.x of 0.33.0) differs by patches; another minor by anything.
        same_minor = (asked + (0, 0))[:2] == (newest.number + (0, 0))[:2]
        return newest, Match.NEWER_PATCH if same_minor else Match.NEWER
    older = [r for r in published.releases if r.number <= asked]
    if not older:
        raise RefusedError(OlderThanAll(version.text, published.name, published.releases[-1].vllm))
    return older[0], Match.SAME if older[0].number == asked else Match.NEAREST_OLDER


def _by_architecture(setup: SetUp, release: Release) -> ByArchitecture | None:
    """Where the release picks its runner by architecture and one was asked about: how it picks it."""
    by_stack, architecture = release.v2_architectures, setup.architecture
    table = by_stack.get(setup.stack.value) if by_stack is not None else None
    if table is None or architecture is None:
        return None
    name = architecture.value
    if setup.model_class.value is ModelClass.MOE:
        moe, moe_from = True, setup.model_class.source
    else:
        known = name in table.moe or name in table.dense
        moe, moe_from = name in table.moe, Source.MATRIX if known else Source.DEFAULT
    return ByArchitecture(name, name in table.listed, moe, moe_from)


def _runner(setup: SetUp, release: Release, picked: ByArchitecture | None) -> Chosen[Runner]:
    if setup.runner is not None:
        return setup.runner
    if picked is not None and release.v2_architectures is not None:
        key = f"{'listed' if picked.listed else 'unlisted'}-{'moe' if picked.moe else 'dense'}"
        return Chosen(release.v2_architectures[setup.stack.value].runner[key], Source.ARCHITECTURE)
    if setup.model_class.value in release.default_runners:
        return Chosen(release.default_runners[setup.model_class.value], Source.MATRIX)
    return Chosen(Runner.V2, Source.ASSUMED)


def _shown(verdict: QuestionVerdict | Kept, question: Question) -> Shown:
    said = Kept(verdict.verdict, verdict.level, verdict.advice, verdict.why)
    return Shown(question, verdict.verdict, verdict.level, said)


def _verdicts(setup: SetUp, release: Release, entry: CellEntry, pin: Setting) -> tuple[Basis, tuple[Shown, ...]]:
    """The answers for this set-up, from the published runs: a decision of what vLLM does with the variables here."""
    published = entry.verdicts
    if Reads.UNREADABLE in (pin.reads, setup.runner_variable.reads):
        # vLLM's envs.py int()s both as its engine starts: nothing runs, whatever the cell would do.
        return Basis.ENGINE_STOPS, tuple(Shown(v.question, Verdict.BROKEN, Level.PREDICTED, None) for v in published)
    if setup.host_note is HostNote.VERSION_UNREADABLE and setup.host is Host.WSL2OLD:
        # The GPU is there (the kernel is new enough for it) and vLLM decides as below its gate, never reading the
        # variable: what the new kernel's cell does with it unset.
        newer = release.entry(entry.cell._replace(host=Host.WSL2NEW))
        kept = [v.kept.get(UNSET) for v in newer.verdicts] if newer else []
        if kept and all(kept):
            return Basis.NOT_READ, tuple(_shown(k, v.question) for k, v in zip(kept, published) if k)
    if pin.reads is Reads.ON:
        opted = [v.kept.get(OPT_IN) for v in published]
        if all(opted):
            return Basis.OPTED_IN, tuple(_shown(k, v.question) for k, v in zip(opted, published) if k)
        return Basis.PUBLISHED_UNSET, tuple(_shown(v, v.question) for v in published)
    return Basis.PUBLISHED, tuple(_shown(v, v.question) for v in published)


def answer(setup: SetUp, published: Published) -> Answer:
    """The published cell and release for ``setup``; refused when the matrix has no cell for it."""
    version = _version(setup)
    listed, match = _release(version, published)
    release = listed.read()  # this release's answers alone: the others are never read
    picked = _by_architecture(setup, release)
    runner = _runner(setup, release, picked)
    cell = Cell(setup.stack.value, setup.host, runner.value, setup.mode.value)
    entry = release.entry(cell)
    if entry is None:
        raise RefusedError(NoCell(published.name, cell, release.vllm))
    pin = _setting(PIN_MEMORY, setup.pin_memory, release.number)
    basis, shown = _verdicts(setup, release, entry, pin)
    return Answer(
        setup,
        published.name,
        release,
        version,
        match,
        runner,
        entry,
        pin,
        published.generated_at,
        published.kit_commit,
        basis,
        shown,
        picked,
    )
