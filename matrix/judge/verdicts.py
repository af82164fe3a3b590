"""What a user gets from a cell, per question: works, needs-opt-in, needs-wsl-update, broken, ignored, slow, unknown.

Rules in ``verdicts.toml`` turn what vLLM decided or did under one ``pin_env`` value into an
outcome (works, slow, ignored, fails); ``release_verdicts`` turns the outcomes with the variable
unset and =1, and the same cell on a new WSL2 kernel, into the verdict. Pure functions over the
observed values the report already holds; words are the renderers' (matrix/report/view.py).
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from matrix.cells import Cell, Host
from matrix.judge.expectations import CONFIG_KEYS, GATE_KEYS, REPRO_KEYS, release_version
from matrix.judge.rules import Selector, Table, load_tables
from matrix.questions import Level, Question, Verdict
from matrix.variables import GATE_PIN_VALUES, OPT_IN, UNSET

VERDICTS_FILE = Path(__file__).with_name("verdicts.toml")


class Outcome(enum.StrEnum):
    """What one run does, best first."""

    WORKS = "works"
    SLOW = "slow"
    IGNORED = "ignored"
    FAILS = "fails"


# A cell's headline is its most urgent answer; unknown outranks works, which it must not pass for.
URGENCY = (
    Verdict.BROKEN,
    Verdict.IGNORED,
    Verdict.NEEDS_WSL_UPDATE,
    Verdict.NEEDS_OPT_IN,
    Verdict.SLOW,
    Verdict.UNKNOWN,
    Verdict.WORKS,
)


class Workaround(enum.StrEnum):
    EAGER = "eager"
    V1_RUNNER = "v1-runner"
    V2_RUNNER = "v2-runner"  # a release without the V1 runner: unset the variable that asks for it


# Keys a rule may look at: what vLLM decided, what the engine did, and the engine_start outcome itself.
OBSERVABLE = frozenset(GATE_KEYS) | frozenset(REPRO_KEYS) | frozenset(CONFIG_KEYS) | {Question.ENGINE_START.value}


@dataclass(frozen=True)
class OutcomeRule:
    id: str
    question: Question
    when: tuple[tuple[str, str], ...]  # (key, glob over the observed value)
    outcome: Outcome
    why: str
    basis: str
    selector: Selector = Selector()
    issue: str | None = None
    workaround: Workaround | None = None
    shows: str | None = None
    level: Level | None = None  # what the rule rests on, where weaker than the cell's result (documented)

    def matches(self, cell: Cell, version: Version | None, observed: Mapping[str, str]) -> bool:
        return self.selector.holds_for(cell, version) and all(
            key in observed and fnmatch.fnmatchcase(observed[key], glob) for key, glob in self.when
        )


@dataclass(frozen=True)
class Found:
    """One pin_env value's outcome and the rule that gave it."""

    outcome: Outcome
    rule: OutcomeRule
    shown: str = ""  # the observed value the rule names in ``shows``
    # What it rests on where weaker than the cell's result: its rule's level, or the engine start's it follows.
    level: Level | None = None


@dataclass(frozen=True)
class Answer:
    """One question's verdict for one cell and release, with what it rests on."""

    question: Question
    verdict: Verdict
    level: Level
    unset: Found | None = None  # what vLLM does by default
    opt_in: Found | None = None  # with VLLM_WSL2_ENABLE_PIN_MEMORY=1
    # The variable is part of the advice: after `wsl --update` (needs-wsl-update), or because it
    # gets a better run (slow, ignored, broken).
    and_opt_in: bool = False
    # Slow as installed, and the advice gets a run that works: the variable (``and_opt_in``), on a kernel this
    # old only after `wsl --update` (``after_update``). The run it gets, for the why.
    fixed: Found | None = None
    after_update: bool = False
    # On a kernel this old where nothing works as installed: after `wsl --update`, the newer kernel's way round
    # (its runner or graph mode), which gets a run there (``after_update``; ``fixed``: the newer kernel's run).
    then: Workaround | None = None
    # Not working as installed here: the first newer release in the matrix whose same cell works as installed.
    works_in: str | None = None
    # The answer for one who keeps the variable at each value of GATE_PIN_VALUES, whatever else they do: for =1,
    # what a user who has set it is told; for unset, what vLLM does where it never reads the variable (a WSL2
    # kernel release it cannot parse takes that path). Empty on the kept answers themselves.
    kept: tuple[tuple[str, Answer], ...] = ()

    def kept_at(self, pin_env: str) -> Answer | None:
        return dict(self.kept).get(pin_env)

    @property
    def decisive(self) -> Found | None:
        """The run the verdict describes: the default one, unless the variable is what gets the verdict."""
        if self.fixed is not None or self.verdict is Verdict.NEEDS_WSL_UPDATE:
            return self.unset
        return self.opt_in if self.and_opt_in else self.unset

    @property
    def runs(self) -> tuple[Found | None, Found | None]:
        """The outcomes per GATE_PIN_VALUES value: unset, then =1."""
        return self.unset, self.opt_in

    @property
    def rules(self) -> tuple[OutcomeRule, ...]:
        return tuple(dict.fromkeys(f.rule for f in (self.unset, self.opt_in) if f is not None))

    @property
    def issues(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.issue for r in self.rules if r.issue))

    @property
    def workaround(self) -> Workaround | None:
        if self.then is not None:
            return self.then
        return self.decisive.rule.workaround if self.decisive else None

    @property
    def works_after_advice(self) -> bool:
        """Whether what the advice says to set (nothing, the variable) gets a run that works."""
        fixed_here = self.fixed is not None and not self.after_update
        return self.verdict in (Verdict.WORKS, Verdict.NEEDS_OPT_IN) or fixed_here


@dataclass(frozen=True)
class CellVerdicts:
    answers: tuple[Answer, ...]  # one per Question, in its order

    def __getitem__(self, question: Question) -> Answer:
        return self.answers[list(Question).index(question)]

    @property
    def headline(self) -> Answer:
        """The most urgent answer; of equally urgent ones, one whose advice adds the variable, since following
        it does what the others' advice does too (`wsl --update`, then the variable)."""
        return min(self.answers, key=lambda a: (URGENCY.index(a.verdict), not a.and_opt_in))


@dataclass(frozen=True)
class Observations:
    """What one cell's results say, the input of its verdicts."""

    values: Mapping[tuple[str, str], str]  # (key, pin_env) -> observed value, as its JUnit property states it
    level: Level


_FIELDS = ("question", "when", "outcome", "why", "basis", "issue", "workaround", "shows", "level")


def _rule(table: Table) -> OutcomeRule:
    fields = table.fields
    when = fields.get("when", {})
    if not isinstance(when, dict) or not when or set(when) - OBSERVABLE:
        raise table.error(f"when needs keys from {sorted(OBSERVABLE)}, got {when!r}")
    selector = table.selector()
    try:
        return OutcomeRule(
            id=str(fields["id"]),
            question=Question(fields["question"]),
            when=tuple((str(k), str(v)) for k, v in when.items()),
            outcome=Outcome(fields["outcome"]),
            why=str(fields["why"]),
            basis=str(fields["basis"]),
            selector=selector,
            issue=fields.get("issue"),
            workaround=Workaround(fields["workaround"]) if "workaround" in fields else None,
            shows=fields.get("shows"),
            level=Level.parse(fields["level"]) if "level" in fields else None,
        )
    except KeyError as exc:
        raise table.error(f"missing field {exc.args[0]!r}") from None
    except ValueError as exc:
        raise table.error(str(exc)) from None


def load_verdict_rules(path: Path = VERDICTS_FILE) -> tuple[OutcomeRule, ...]:
    return tuple(_rule(table) for table in load_tables(path, _FIELDS))


def _outcome(
    rules: tuple[OutcomeRule, ...], question: Question, cell: Cell, version: Version | None, observed: Mapping[str, str]
) -> Found | None:
    if not observed:
        return None
    # The first rule that matches (matrix.judge.rules).
    for rule in rules:
        if rule.question is question and rule.matches(cell, version, observed):
            return Found(rule.outcome, rule, observed.get(rule.shows, "") if rule.shows else "", rule.level)
    return None


# What the engine does: known from a run only where the engine ran (its case recorded what it did).
ENGINE_QUESTIONS = (Question.ENGINE_START, Question.OFFLOAD_WITH_GRAPHS)


def _predicted_unless_ran(found: Found | None, observed: Mapping[str, str]) -> Found | None:
    """``found`` as a prediction where the engine did not run: a run on a GPU whose engine case was skipped (or
    never reached) knows vLLM's decisions there, not what its engine does."""
    if found is None or "repro" in observed:
        return found
    return dataclasses.replace(found, level=min(found.level or Level.PREDICTED, Level.PREDICTED))


def _per_pin(
    rules: tuple[OutcomeRule, ...], cell: Cell, version: Version | None, values: Mapping[tuple[str, str], str]
) -> dict[Question, dict[str, Found | None]]:
    found: dict[Question, dict[str, Found | None]] = {q: {} for q in Question}
    for pin_env in GATE_PIN_VALUES:
        observed = {key: value for (key, pin), value in values.items() if pin == pin_env}
        start = _predicted_unless_ran(_outcome(rules, Question.ENGINE_START, cell, version, observed), observed)
        found[Question.ENGINE_START][pin_env] = start
        if start is not None:
            observed[Question.ENGINE_START.value] = start.outcome.value
        for question in (Question.OFFLOAD_WITH_GRAPHS, Question.PINNED_MEMORY):
            this = _outcome(rules, question, cell, version, observed)
            if question in ENGINE_QUESTIONS:
                this = _predicted_unless_ran(this, observed)
            if (
                this is not None
                and start is not None
                and start.level is not None
                and Question.ENGINE_START.value in dict(this.rule.when)
            ):
                this = dataclasses.replace(this, level=min(level for level in (this.level, start.level) if level))
            found[question][pin_env] = this
    return found


def _verdict(
    question: Question, level: Level, unset: Found | None, opt_in: Found | None, newer_kernel: Answer | None
) -> Answer:
    # An answer is known no better than the weakest rule it rests on (a vendor's documentation, nothing run).
    level = min([level, *(f.level for f in (unset, opt_in) if f is not None and f.level is not None)])
    if unset is None:
        return Answer(question, Verdict.UNKNOWN, Level.NONE, unset, opt_in)
    if unset.outcome is Outcome.WORKS:
        return Answer(question, Verdict.WORKS, level, unset, opt_in)
    # needs-opt-in and needs-wsl-update say it works only so: where it runs without them, if slowly, it is slow,
    # and the advice says what makes it work.
    slow = unset.outcome is Outcome.SLOW
    if opt_in is not None and opt_in.outcome is Outcome.WORKS:
        if slow:
            return Answer(question, Verdict.SLOW, level, unset, opt_in, and_opt_in=True, fixed=opt_in)
        return Answer(question, Verdict.NEEDS_OPT_IN, level, unset, opt_in)
    if newer_kernel is not None and newer_kernel.works_after_advice:
        and_opt_in = newer_kernel.verdict is Verdict.NEEDS_OPT_IN or newer_kernel.and_opt_in
        if slow:
            fixed = newer_kernel.fixed or (newer_kernel.opt_in if and_opt_in else newer_kernel.unset)
            return Answer(question, Verdict.SLOW, level, unset, opt_in, and_opt_in, fixed, after_update=True)
        return Answer(question, Verdict.NEEDS_WSL_UPDATE, level, unset, opt_in, and_opt_in)
    # Nothing makes it work: say what the better of the two runs does, and whether the variable gets it there.
    order = list(Outcome)
    helps = opt_in is not None and order.index(opt_in.outcome) < order.index(unset.outcome)
    best = opt_in if helps and opt_in is not None else unset
    verdict = {Outcome.SLOW: Verdict.SLOW, Outcome.IGNORED: Verdict.IGNORED, Outcome.FAILS: Verdict.BROKEN}
    ran = newer_kernel.decisive if newer_kernel is not None else None
    if best.rule.workaround is None and newer_kernel is not None and ran is not None:
        # Nothing avoids it on this kernel, but after `wsl --update` the newer kernel's way round does, or the newer
        # kernel's run is a better one (slow where nothing starts here).
        then = newer_kernel.workaround
        if then is not None or order.index(ran.outcome) < order.index(best.outcome):
            return Answer(
                question, verdict[best.outcome], level, unset, opt_in, newer_kernel.and_opt_in, ran, True, then=then
            )
    return Answer(question, verdict[best.outcome], level, unset, opt_in, helps)


def release_verdicts(
    rules: tuple[OutcomeRule, ...], vllm: str, cells: Mapping[Cell, Observations]
) -> dict[Cell, CellVerdicts]:
    """Every cell's verdicts under one release; an old WSL2 kernel's answers lean on the new kernel's cell."""
    version = release_version(vllm)
    verdicts: dict[Cell, CellVerdicts] = {}
    # The new-kernel cells first: an old kernel's cell needs their answers.
    for cell in sorted(cells, key=lambda c: c.host is Host.WSL2OLD):
        seen = cells[cell]
        found = _per_pin(rules, cell, version, seen.values)
        newer = (
            verdicts.get(Cell(cell.stack, Host.WSL2NEW, cell.runner, cell.mode)) if cell.host is Host.WSL2OLD else None
        )
        answers = []
        for q in Question:
            main = _verdict(q, seen.level, found[q][UNSET], found[q][OPT_IN], newer[q] if newer else None)
            kept = tuple(
                (pin, _verdict(q, seen.level, found[q][pin], found[q][pin], newer[q].kept_at(pin) if newer else None))
                for pin in GATE_PIN_VALUES
            )
            answers.append(dataclasses.replace(main, kept=kept))
        verdicts[cell] = CellVerdicts(tuple(answers))
    return verdicts


def with_upgrades(judged: Mapping[tuple[str, str], CellVerdicts]) -> dict[tuple[str, str], CellVerdicts]:
    """(vLLM, cell id) -> verdicts, each answer that does not work as installed with the first newer release in
    ``judged`` where the same cell's answer does (``Answer.works_in``): an upgrade is advice too."""
    numbered = {vllm: number for vllm, _ in judged if (number := release_version(vllm)) is not None}
    releases = sorted(numbered, key=numbered.__getitem__)
    upgraded = {}
    for (vllm, cell), verdicts in judged.items():
        newer = releases[releases.index(vllm) + 1 :] if vllm in releases else []
        answers = []
        for a in verdicts.answers:
            if a.verdict not in (Verdict.WORKS, Verdict.UNKNOWN):
                working = (
                    v for v in newer if (v, cell) in judged and judged[v, cell][a.question].verdict is Verdict.WORKS
                )
                a = dataclasses.replace(a, works_in=next(working, None))
            answers.append(a)
        upgraded[vllm, cell] = CellVerdicts(tuple(answers))
    return upgraded
