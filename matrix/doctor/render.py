"""Every word the doctor prints: the answer as a short text block, or as JSON for machines."""

from __future__ import annotations

import json

from matrix.cells import WSL2_PIN_KERNEL, Host
from matrix.doctor.answer import Answer, Source
from matrix.questions import Question, Verdict
from matrix.report.visible import visible
from matrix.variables import PIN_MEMORY, V2_MODEL_RUNNER

QUESTION_WORDS = {
    Question.ENGINE_START: "engine start",
    Question.OFFLOAD_WITH_GRAPHS: "offload with graphs",
    Question.PINNED_MEMORY: "pinned memory",
}
_GATE = ".".join(map(str, WSL2_PIN_KERNEL))
HOST_WORDS = {
    Host.LINUX: "native Linux",
    Host.WSL2OLD: f"WSL2, kernel below {_GATE}",
    Host.WSL2NEW: f"WSL2, kernel {_GATE} or later",
}


def _runner_words(a: Answer) -> str:
    return {
        Source.FLAG: "--runner",
        Source.VARIABLE: f"{V2_MODEL_RUNNER.name}={a.runner.value.env_value}",
        Source.MATRIX: f"vLLM {a.release.vllm}'s default",
        Source.ASSUMED: f"assumed: the matrix does not say vLLM {a.release.vllm}'s default; pass --runner",
    }[a.runner.source]


def _release_words(a: Answer) -> str:
    asked = a.setup.vllm
    if asked is None:
        return f"the newest in {a.matrix}: vLLM is not installed here; ask about another with --vllm X.Y.Z"
    if a.nearest_older:
        return f"the nearest older release: {a.matrix} has no {asked.value}"
    return "--vllm" if asked.source is Source.FLAG else "installed"


def render_text(a: Answer) -> str:
    s = a.setup
    kernel_from = "--kernel" if s.kernel.source is Source.FLAG else "uname"
    stack_from = "--stack" if s.stack.source is Source.FLAG else s.stack_reason
    mode_from = "--mode" if s.mode.source is Source.FLAG else "vLLM's default; eager only with --enforce-eager"
    pin = f"={s.pin_memory}" if s.pin_memory is not None else " is unset"
    lines = [
        f"kernel     {s.kernel.value}: {HOST_WORDS[s.host]} ({kernel_from})",
        f"GPU stack  {s.stack.value} ({stack_from})",
        f"vLLM       {f'{s.installed_vllm} installed' if s.installed_vllm else 'not installed'}",
        f"runner     {a.runner.value} ({_runner_words(a)})",
        f"mode       {s.mode.value} ({mode_from})",
        f"{PIN_MEMORY.name}{pin} here",
        "",
        f"cell       {a.cell}, vLLM {a.release.vllm} ({_release_words(a)})",
        "",
    ]
    width = max(len(word) for word in QUESTION_WORDS.values())
    verdict_width = max(len(verdict.value) for verdict in Verdict)
    for v in a.entry.verdicts:
        lines.append(f"{QUESTION_WORDS[v.question].ljust(width)}  {v.verdict.value.ljust(verdict_width)}  {v.level}")
        already = v.verdict is Verdict.NEEDS_OPT_IN and a.opted_in
        lines.append(f"  {v.advice}" + (f" ({PIN_MEMORY.name}=1 is already set here.)" if already else ""))
        lines.append(f"  ({v.why})")
    lines += ["", f"evidence (weakest level: {a.entry.level}):"]
    lines += [f"  {sentence}" for sentence in a.entry.evidence] or ["  none recorded"]
    lines += ["", f"check it here: {a.entry.command}"]
    # The matrix may be anyone's file (--matrix) and the variable anyone's value: neither may start a line.
    return "\n".join(visible(line) for line in lines)


def render_json(a: Answer) -> str:
    s, verdicts = a.setup, a.entry.verdicts
    document = {
        "cell": a.cell.id,
        "vllm": a.release.vllm,
        "verdicts": {v.question.value: v.verdict.value for v in verdicts},
        "advice": {v.question.value: v.advice for v in verdicts},
        "evidence": {
            "level": a.entry.level.value,
            "levels": {v.question.value: v.level.value for v in verdicts},
            "sentences": list(a.entry.evidence),
        },
        "command": a.entry.command,
        "nearest_older": a.nearest_older,
        "asked": {
            "kernel": s.kernel.value,
            "host": s.host.value,
            "stack": s.stack.value,
            "vllm": s.vllm.value if s.vllm else None,
            "installed_vllm": s.installed_vllm,
            "runner": a.runner.value.value,
            "mode": s.mode.value.value,
            PIN_MEMORY.name: s.pin_memory,
        },
    }
    return json.dumps(document, indent=2)
