"""The bare-torch probe: the pinned-memory mechanism itself, no vLLM.

It tells vLLM problems from platform problems: can this host pin, how fast are
pinned and pageable copies, may a CUDA graph capture them, does a zero-copy
view of pinned memory work. ``sections`` measures, ``child`` runs each section
in a fresh process, ``checks`` says what a working platform shows, ``record``
writes the metrics document.
"""

from __future__ import annotations

from repro.probe.checks import check_facts, judged
from repro.probe.child import DEFAULT_TIMEOUT, SectionResult, run_section
from repro.probe.record import metrics_document
from repro.probe.sections import SECTIONS

__all__ = [
    "DEFAULT_TIMEOUT",
    "SECTIONS",
    "SectionResult",
    "check_facts",
    "judged",
    "metrics_document",
    "run_section",
]
