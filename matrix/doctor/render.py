"""Every word the doctor prints: the answer as a short text block, or as JSON for machines, and why it refuses."""

from __future__ import annotations

import json
import re

from matrix.cells import WSL2_PIN_KERNEL, Host, ModelClass, Runner
from matrix.doctor.answer import (
    Answer,
    Basis,
    HostNote,
    Match,
    NoStack,
    NotARelease,
    OlderThanAll,
    Reads,
    Refusal,
    Setting,
    Shown,
    Source,
    UnreadableKernel,
)
from matrix.doctor.published import REGENERATE, Kind
from matrix.questions import MODEL_CLASS_WORDS, Level, Question, Verdict
from matrix.text.visible import visible
from matrix.text.words import HOST_NAMES, question_name
from matrix.variables import OPT_IN, PIN_MEMORY, V2_MODEL_RUNNER

_GATE = ".".join(map(str, WSL2_PIN_KERNEL))
# Under the kernel line: where vLLM's reading of the uname, which the doctor answers for, is not what a person reads.
HOST_NOTES = {
    HostNote.NONE: (),
    HostNote.VERSION_UNREADABLE: (
        f"vLLM cannot read this version (int() of each of its first three parts), so it takes the path of a kernel "
        f"below {_GATE} and never reads {PIN_MEMORY.name}: answered as vLLM reads it",
    ),
    HostNote.WSL_OUTSIDE_UNAME: (
        "WSL by its own signs (WSL_DISTRO_NAME or its interop), but vLLM reads only the uname, which does not say "
        "microsoft: vLLM decides as on native Linux, and so does this answer",
    ),
    HostNote.WSL1: (
        "no GPU reaches WSL1: convert the distribution with `wsl --set-version <distro> 2`; the answer below is "
        "vLLM's reading, for a WSL2 machine",
    ),
}
# A verdict's level in its row: only a run on the set-up's own host is a measurement.
LEVEL_WORDS = {
    Level.DOCUMENTED: "documented",
    Level.PREDICTED: "predicted",
    Level.COMMUNITY: "community",
    Level.EMULATED: "emulated",
    Level.NATIVE: "measured",
    Level.NONE: "no evidence",
}
# Where an architecture's MoE-ness came from, as the runner line says it ({model}: "an MoE model", "a dense model").
MOE_FROM = {
    Source.FLAG: "{model} (--moe)",
    Source.MODEL: "{model} (its config.json)",
    Source.MATRIX: "{model} (as vLLM reads its default config)",
    Source.DEFAULT: "{model} (--moe if it is MoE)",
}
KIND_WORDS = {Kind.PRE: "a pre-release", Kind.DEV: "a development build", Kind.POST: "a post-release"}
OPT_IN_STEP = f"set {PIN_MEMORY.name}={OPT_IN}"
# What `nox -s "cell(...)"` installs before it runs (tools/installs.py's install_vllm; docs/design.md: "What a
# GPU-less session installs"): the sizes are the environments' on disk, the GPU-less one as docs/performance.md
# measures it.
CHECK_INSTALLS = (
    "it first installs vLLM {vllm} into .nox/: with a GPU here, vLLM and its CUDA torch from the package index, "
    "about 9 GB; without one, vLLM's wheel and a CPU torch, about 3.4 GB, and the tests that need a GPU are skipped"
)
# After "the opt-in, ": what the answers below are, by their basis.
OPTED_IN_WORDS = {
    Basis.OPTED_IN: "and the answers below are for it",
    Basis.PUBLISHED_UNSET: (
        "but {matrix} was made before it said the answers with it set: below are those with it unset, less the step "
        "it takes"
    ),
    Basis.NOT_READ: "but on this kernel vLLM never reads it: the answers below are without it",
    Basis.ENGINE_STOPS: "and the answers below are for it",
    Basis.PUBLISHED: "and the answers below are for it",
}
_ISSUE_NUMBER = re.compile(r"/(?:issues|pull)/(\d+)/?$")


def _shown(value: str) -> str:
    """A variable's value as the answer quotes it: a number as it is, anything else in quotes."""
    return value if value.isdigit() and value.isascii() else repr(value)


def _how_known(a: Answer) -> str:
    """How the answer is known, by the weakest level of its verdicts: the line it leads with. Where the verdicts
    rest on different levels it says so: a GPU's answer to one question is never hidden behind "no GPU has run"."""
    vllm, host = a.release.vllm, HOST_NAMES[a.setup.host]
    gpu = a.entry.gpu or "a GPU"
    levels = sorted({v.level for v in a.shown}, reverse=True)
    if len(levels) > 1:
        said = " and ".join(LEVEL_WORDS[level] for level in levels)
        on = f" on {gpu}" if levels[0] in (Level.COMMUNITY, Level.EMULATED, Level.NATIVE) else ""
        return f"partly {LEVEL_WORDS[levels[0]]}{on}: each verdict below says how it is known ({said})"
    return {
        Level.DOCUMENTED: "documented: a vendor's requirement says so, nothing has run this set-up",
        Level.PREDICTED: f"predicted from vLLM {vllm}'s own code, no GPU has run this set-up",
        Level.COMMUNITY: (
            f"community: a user ran vLLM {vllm} on {host} ({gpu}) and sent the result, not verified by the kit"
        ),
        Level.EMULATED: f"emulated on {gpu}: vLLM {vllm} ran under native Linux shown this uname, not on {host}",
        Level.NATIVE: f"measured on {gpu}: vLLM {vllm} ran this set-up on {host}",
        Level.NONE: f"no evidence: nothing has run this set-up with vLLM {vllm}",
    }[min(levels)]


def _kernel_words(a: Answer) -> str:
    s = a.setup
    read = f"WSL1, which vLLM reads as {HOST_NAMES[s.host]}" if s.host_note is HostNote.WSL1 else HOST_NAMES[s.host]
    if s.kernel.source is Source.FLAG:
        return f"{s.kernel.value}: {read} (--kernel)"
    if s.kernel_read:
        return f"{s.kernel.value}: {read} (uname{' there' if s.origin else ''})"
    assumed = (
        f"WSL2 with a kernel below {_GATE}, as vLLM takes a WSL2 kernel it cannot parse"
        if s.host.is_wsl
        else "native Linux, as nothing says WSL2"
    )
    unread = "is not a kernel release the doctor can read"
    return f"{s.kernel.value!r} (uname) {unread}: assumed {assumed}; ask with --kernel RELEASE"


def _runner_words(a: Answer) -> str:
    variable = a.setup.runner_variable
    if a.runner.source is Source.VARIABLE and variable.value is not None:
        read = "" if variable.value in ("0", "1") else f", which vLLM reads as {a.runner.value.env_value}"
        return f"{V2_MODEL_RUNNER.name}={_shown(variable.value)}{read}"
    vllm, picked, architecture = a.release.vllm, a.by_architecture, a.setup.architecture
    if a.runner.source is Source.ARCHITECTURE and picked is not None:
        on = "is on" if picked.listed else "is not on"
        kind = ModelClass.MOE if picked.moe else ModelClass.DENSE
        return (
            f"{picked.architecture} {on} vLLM {vllm}'s list of architectures that get the V2 runner by default, "
            f"and {MOE_FROM[picked.moe_from].format(model=MODEL_CLASS_WORDS[kind])}: "
            f"vLLM {vllm} picks the {a.runner.value.value.upper()} runner for it"
        )
    model = MODEL_CLASS_WORDS[a.setup.model_class.value]
    other = "" if a.setup.model_class.source in (Source.FLAG, Source.MODEL) else "; --moe for an MoE model"
    if a.release.v2_architectures is not None and architecture is None:
        other += "; --arch NAME: it picks by the model's architecture"
    if architecture is not None and picked is None:
        other += f"; vLLM {vllm} picks no runner by architecture, so {architecture.value} changes nothing"
    return {
        Source.FLAG: f"--runner{other if architecture is not None else ''}",
        Source.MATRIX: f"vLLM {vllm}'s default for {model}{other}",
        Source.ASSUMED: f"assumed: the matrix does not say vLLM {vllm}'s default for {model}; pass --runner",
    }[a.runner.source]


def _here(a: Answer) -> str:
    """The machine answered for, as the answer points at it: this one, or the one a file describes."""
    return "there" if a.setup.origin else "here"


def _unreadable(setting: Setting, to_set: str, here: str) -> str:
    name = setting.variable.name
    return (
        f"{name}={_shown(setting.value or '')} is set {here}, which vLLM cannot read: it reads the variable as "
        f"bool(int(value)) and stops with a ValueError at start-up; {to_set}"
    )


def _pin_words(a: Answer) -> str:
    """What PIN_MEMORY's value here means to the release answering."""
    pin, name, here = a.pin, PIN_MEMORY.name, _here(a)
    if pin.reads is Reads.UNSET or pin.value is None:
        return f"{name} is unset {here}"
    if pin.reads is Reads.UNREADABLE:
        return _unreadable(pin, f"set {name}={OPT_IN} to opt in, or unset it", here)
    if pin.reads is Reads.NOT_READ:
        since = pin.variable.since
        return (
            f"{name}={_shown(pin.value)} is set {here}, but vLLM {a.release.vllm} does not read it (it came in {since})"
        )
    if pin.reads is Reads.ON:
        read = "" if pin.value == OPT_IN else ", which vLLM reads as 1"
        answers = OPTED_IN_WORDS[a.basis].format(matrix=a.matrix)
        return f"{name}={_shown(pin.value)} is set {here}{read}: the opt-in, {answers}"
    read = "" if pin.value == "0" else ", which vLLM reads as 0"
    return f"{name}={_shown(pin.value)} is set {here}{read}: no opt-in, as when unset"


def _release_words(a: Answer) -> str:
    """Where the release answering comes from: the cell line's parenthesis."""
    asked = a.setup.vllm
    if asked is None:
        return f"the newest in {a.matrix}: vLLM is not installed {_here(a)}; ask about another with --vllm X.Y.Z"
    source = "--vllm" if asked.source is Source.FLAG else "installed"
    return {
        Match.SAME: f"for {asked.value}, {source}" if a.not_final else source,
        Match.NEAREST_OLDER: f"the nearest older release: {a.matrix} has no {asked.value}",
        Match.NEWER_PATCH: f"the newest release, the same minor: {a.matrix} has no {asked.value}",
        Match.NEWER: f"the newest release: {a.matrix} has no {asked.value}",
        Match.NEWEST: source,
    }[a.match]


def _matrix_words(a: Answer) -> str:
    """Which matrix answers, and how old it is: a newer one may say otherwise (``--matrix URL``)."""
    made = f", made {a.matrix_made[:10]}" if a.matrix_made else ", undated"
    kit = f" by the kit at {a.matrix_kit[:12]}" if a.matrix_kit else ""
    return f"{a.matrix}{made}{kit}"


def _release_notes(a: Answer) -> list[str]:
    """What the answer is not: the release asked about, when another answers for it."""
    version, vllm = a.version, a.release.vllm
    notes: list[str] = []
    if version is None:
        return notes
    if version.kind is not Kind.FINAL:
        notes.append(
            f"{version.text} is {KIND_WORDS[version.kind]} of {version.release}, not {version.release} itself: "
            f"this is vLLM {vllm}'s answer, the nearest published release"
        )
    if a.match is Match.NEWER:
        notes.append(
            f"vLLM {version.release} is newer than the newest release in {a.matrix}, {vllm}, by more than a patch: "
            f"this is {vllm}'s answer, and nothing published covers the releases from {vllm} to {version.release}"
        )
    return notes


def _advice(a: Answer, advice: str, verdict: Verdict) -> str:
    """The published advice, less the opt-in it asks for where that is made here already."""
    if not a.opted_in or a.pin.value is None:
        return advice
    made = f"{PIN_MEMORY.name}={_shown(a.pin.value)} is set"
    if verdict is Verdict.NEEDS_OPT_IN or advice == OPT_IN_STEP:
        return f"{made}: nothing more to set"
    if advice.endswith(f", then {OPT_IN_STEP}"):
        return f"{advice[: -len(f', then {OPT_IN_STEP}')]}; {made} already"
    if advice.startswith(f"{OPT_IN_STEP} and "):
        return f"{made}; also {advice[len(f'{OPT_IN_STEP} and ') :]}"
    return advice


def _stopping(a: Answer) -> Setting:
    """The variable vLLM cannot read here, which stops it at start-up (Basis.ENGINE_STOPS)."""
    return a.pin if a.pin.reads is Reads.UNREADABLE else a.setup.runner_variable


def _shown_advice(a: Answer, v: Shown) -> str:
    if v.said is None:
        name = _stopping(a).variable.name
        to_set = f"set {name}={OPT_IN}" if name == PIN_MEMORY.name else f"set {name}=0 or 1"
        return f"{to_set}, or unset it: vLLM cannot start with {name}={_shown(_stopping(a).value or '')}"
    return _advice(a, v.said.advice, v.verdict)


def _shown_why(a: Answer, v: Shown) -> str:
    if v.said is None:
        return (
            f"vLLM reads {_stopping(a).variable.name} as bool(int(value)) and stops with a ValueError at start-up: "
            "no engine starts"
        )
    return v.said.why


def _check(a: Answer) -> tuple[str, str]:
    """The command that checks the set-up here, for the user's own release, and that release."""
    version = a.version
    if version is None or (a.match is Match.SAME and version.kind is Kind.FINAL):
        return a.entry.command, a.release.vllm
    # A local build's part (+cu129) is no release an index holds: the release it builds on is.
    own = version.text.split("+")[0]
    published = f"--vllm {a.release.vllm}"
    if not a.entry.command.endswith(published):
        return a.entry.command, a.release.vllm
    return a.entry.command[: -len(published)] + f"--vllm {own}", own


def _issue_lines(a: Answer) -> list[str]:
    """Each issue the published entry names, with its number and what it concerns."""
    mode = a.setup.mode.value
    lines = []
    for issue in a.issues:
        concerns = [question_name(v.question, mode) for v in a.entry.verdicts if issue in v.issues]
        if issue in a.entry.issues:
            concerns.insert(0, "a known failure of this set-up" if a.entry.status == "known-fail" else "this set-up")
        number = _ISSUE_NUMBER.search(issue)
        lines.append(f"  {'#' + number[1] + ' ' if number else ''}{issue} ({', '.join(concerns)})")
    return lines


def render_text(a: Answer) -> str:
    s = a.setup
    stack_from = "--stack" if s.stack.source is Source.FLAG else s.stack_reason
    if s.origin and s.stack.source is not Source.FLAG:
        stack_from = "the GPUs and the torch build the file lists"
    mode_from = "--mode" if s.mode.source is Source.FLAG else "vLLM's default; eager only with --enforce-eager"
    lines = [
        *([f"set-up     {s.origin}"] if s.origin else []),
        f"kernel     {_kernel_words(a)}",
        *(f"           {line}" for line in HOST_NOTES[s.host_note]),
        f"GPU stack  {s.stack.value} ({stack_from})",
        f"vLLM       {f'{s.installed_vllm} installed' if s.installed_vllm else 'not installed'}"
        f"{' there' if s.origin else ''}",
        f"runner     {a.runner.value} ({_runner_words(a)})",
        f"mode       {s.mode.value} ({mode_from})",
        _pin_words(a),
    ]
    if s.runner_variable.reads is Reads.UNREADABLE:
        to_set = f"set {V2_MODEL_RUNNER.name}={Runner.V2.env_value} (V2) or {Runner.V1.env_value} (V1), or unset it"
        lines.append(_unreadable(s.runner_variable, to_set, _here(a)))
    lines += ["", f"matrix     {_matrix_words(a)}"]
    lines += [f"cell       {a.cell}, vLLM {a.release.vllm} ({_release_words(a)})"]
    lines += [f"           {note}" for note in _release_notes(a)]
    lines += ["", f"{_how_known(a)}:"]
    words = {question: question_name(question, s.mode.value) for question in Question}
    width = max(len(word) for word in words.values())
    verdict_width = max(len(verdict.value) for verdict in Verdict)
    for v in a.shown:
        level = LEVEL_WORDS[v.level]
        lines.append(f"{words[v.question].ljust(width)}  {v.verdict.value.ljust(verdict_width)}  {level}")
        lines.append(f"  {_shown_advice(a, v)}")
        lines.append(f"  ({_shown_why(a, v)})")
    issues = _issue_lines(a)
    if issues:
        lines += ["", "known issues (the published entry names them):", *issues]
    lines += ["", f"evidence (weakest level: {a.entry.level}):"]
    lines += [f"  {sentence}" for sentence in a.entry.evidence] or ["  none recorded"]
    command, runs = _check(a)
    lines += ["", f"check it here: {command}", f"  ({CHECK_INSTALLS.format(vllm=runs)})"]
    if runs != a.release.vllm:
        lines.append(
            f"  (vLLM {runs} is not in {a.matrix}: the answer above is {a.release.vllm}'s, the check runs {runs})"
        )
    # The matrix may be anyone's file (--matrix) and the variable anyone's value: neither may start a line.
    return "\n".join(visible(line) for line in lines)


def render_json(a: Answer) -> str:
    s, verdicts = a.setup, a.shown
    document = {
        "cell": a.cell.id,
        "vllm": a.release.vllm,
        "verdicts": {v.question.value: v.verdict.value for v in verdicts},
        "advice": {v.question.value: _shown_advice(a, v) for v in verdicts},
        "answered_as": a.basis.value,
        "evidence": {
            "level": min(v.level for v in verdicts).value,
            "levels": {v.question.value: v.level.value for v in verdicts},
            "gpu": a.entry.gpu or None,
            "sentences": list(a.entry.evidence),
        },
        "issues": list(a.issues),
        "command": _check(a)[0],
        "matrix": {"name": a.matrix, "generated_at": a.matrix_made or None, "kit_commit": a.matrix_kit or None},
        "nearest_older": a.nearest_older,
        "release_match": a.match.value,
        "asked": {
            "set_up_from": s.origin or None,
            "kernel": s.kernel.value,
            "host": s.host.value,
            "host_note": s.host_note.value,
            "stack": s.stack.value,
            "vllm": s.vllm.value if s.vllm else None,
            "installed_vllm": s.installed_vllm,
            "runner": a.runner.value.value,
            "model_class": a.setup.model_class.value.value,
            "architecture": s.architecture.value if s.architecture else None,
            "mode": s.mode.value.value,
            PIN_MEMORY.name: s.pin_memory,
            V2_MODEL_RUNNER.name: s.runner_variable.value,
        },
    }
    return json.dumps(document, indent=2)


def refusal(r: Refusal) -> str:
    """Why the doctor cannot answer, and what to do: the one line of its error."""
    if isinstance(r, UnreadableKernel):
        return (
            f"--kernel {r.release!r} is not a kernel release: give a `uname -r` such as "
            f"{Host.WSL2NEW.emulated_release} (WSL2) or {Host.LINUX.emulated_release} (native Linux)"
        )
    if isinstance(r, NoStack):
        return (
            f"kernel {r.kernel or '?'} ({r.host.value}), but no GPU stack found {r.where} ({r.reason}): "
            "pass --stack cuda or --stack rocm"
        )
    if isinstance(r, NotARelease):
        if r.asked.source is Source.FLAG:
            return f"vLLM {r.asked.value!r} is not a release number: give one like 0.33.0 with --vllm"
        return (
            f"the installed vLLM's version {r.asked.value!r} is not one the doctor can read: "
            "ask about a release with --vllm X.Y.Z"
        )
    if isinstance(r, OlderThanAll):
        return (
            f"vLLM {r.asked} is older than every release in {r.matrix} (the oldest is {r.oldest}): "
            f"upgrade vLLM, or ask about one with --vllm {r.oldest} or later"
        )
    return f"{r.matrix} has no cell {r.cell} for vLLM {r.vllm}: {REGENERATE}"
