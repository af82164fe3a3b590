"""One section in a child process with a timeout: the probe's protocol.

The parent runs ``python -m repro.probe SECTION OUT.json`` and reads the answer the child
wrote there: ``{"status": "ok", "metrics": ...}``, ``"skipped"`` or ``"failed"`` with a message.
A child that writes nothing timed out or died, and the parent says which.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from repro.isolation import run_json_child
from repro.probe.sections import SECTIONS, NotApplicableError

DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True)
class SectionResult:
    section: str
    status: str  # "ok" | "failed" | "skipped" | "timeout"
    metrics: dict = field(default_factory=dict)
    message: str = ""
    seconds: float = 0.0


def run_section(name: str, timeout: float = DEFAULT_TIMEOUT) -> SectionResult:
    """The parent's side: run section ``name`` in a fresh Python and read its answer."""
    done = run_json_child([sys.executable, "-m", "repro.probe", name], dict(os.environ), timeout)
    if done.answer is None:
        status = "timeout" if done.run.timed_out else "failed"
        return SectionResult(name, status, message=done.no_answer, seconds=done.run.seconds)
    answer = done.answer
    return SectionResult(name, answer["status"], answer.get("metrics", {}), answer.get("message", ""), done.run.seconds)


def write_answer(name: str, out: Path) -> int:
    """The child's side: run section ``name`` in this process and write its answer to ``out``."""
    answer: dict[str, object]
    try:
        answer = {"status": "ok", "metrics": SECTIONS[name]()}
    except NotApplicableError as exc:
        answer = {"status": "skipped", "message": str(exc)}
    except BaseException:  # noqa: BLE001 - the section's failure is its result
        answer = {"status": "failed", "message": traceback.format_exc()}
    out.write_text(json.dumps(answer, indent=2))
    return 0
