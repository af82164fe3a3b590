"""Names that both the report and the doctor print, so a page and a terminal never call one thing two names.

Standard library only: the doctor runs on a bare Python 3.8.
"""

from __future__ import annotations

from matrix.cells import Host, Mode, Stack
from matrix.questions import Question

# What a compat.json says it is: the report writes it, the doctor and the annotations read it. Since 2 its test
# cases are files of their own beside it (matrix.report.compat_cases); 1 held them inline, and the doctor still
# reads it, which names the same fields.
COMPAT_SCHEMA = "wslpin-kit.compat/2"
COMPAT_WHOLE_SCHEMA = "wslpin-kit.compat/1"
HOST_NAMES = {
    Host.LINUX: "native Linux",
    Host.WSL2OLD: "WSL2 kernel < 4.19.121",
    Host.WSL2NEW: "WSL2 kernel ≥ 4.19.121",
}
STACK_NAMES = {Stack.CUDA: "CUDA", Stack.ROCM: "ROCm"}
MODE_NAMES = {Mode.GRAPH: "CUDA graph", Mode.EAGER: "eager"}
QUESTION_NAMES = {
    Question.ENGINE_START: "engine start",
    Question.OFFLOAD_WITH_GRAPHS: "CPU offload",
    Question.PINNED_MEMORY: "pinned memory",
}


def question_name(question: Question, mode: Mode | None = None) -> str:
    """A question's name; for one mode (the doctor answers for one), the offload question's names the mode."""
    name = QUESTION_NAMES[question]
    in_mode = mode is not None and question is Question.OFFLOAD_WITH_GRAPHS
    return f"{name} in {MODE_NAMES[mode]} mode" if in_mode and mode is not None else name
