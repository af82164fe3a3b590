"""The short terminal table a cell session ends with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from junitparser import Error as JError
from junitparser import Failure, JUnitXml, Skipped

from matrix.cells import Cell, Runner
from matrix.junit import case_properties, suite_properties
from matrix.report.status import shown


@dataclass
class CellSummary:
    cell: str
    execution: str
    vllm: str
    passed: int = 0
    failed: int = 0
    known: int = 0  # expected failures (xfail) naming their issue
    skipped: int = 0
    observed: dict[tuple[str, str], str] = field(default_factory=dict)  # (key, pin_env) -> value
    failures: list[str] = field(default_factory=list)


def summarize(path: Path) -> CellSummary:
    xml = JUnitXml.fromfile(str(path))
    suite = next(iter(xml))
    props = suite_properties(suite)
    summary = CellSummary(suite.name, props.get("execution", "?"), props.get("vllm_version", "?"))
    for case in suite:
        results = case.result
        if any(isinstance(r, (Failure, JError)) for r in results):
            summary.failed += 1
            summary.failures.append(case.name)
        elif any(isinstance(r, Skipped) and r.type == "pytest.xfail" for r in results):
            summary.known += 1
        elif any(isinstance(r, Skipped) for r in results):
            summary.skipped += 1
        else:
            summary.passed += 1
        cp = case_properties(case)
        if "gate_key" in cp and "observed" in cp:
            summary.observed[(cp["gate_key"], cp.get("pin_env", ""))] = cp["observed"]
    return summary


def _pair(summary: CellSummary, key: str) -> str:
    values = [summary.observed.get((key, pin), "-") for pin in ("unset", "1")]
    values = [shown(v) for v in values]
    return values[0] if values[0] == values[1] else f"{values[0]} / {values[1]}"


COLUMNS = ("cell", "execution", "pass", "fail", "known", "skip", "pin", "uva", "v2 buffer", "offload", "repro")


def render(summaries: list[CellSummary]) -> str:
    rows = [COLUMNS]
    for s in summaries:
        rows.append(
            (
                s.cell,
                s.execution,
                str(s.passed),
                str(s.failed),
                str(s.known),
                str(s.skipped),
                _pair(s, "pin"),
                _pair(s, "uva"),
                _pair(s, "v2_buffer") if Cell.parse(s.cell).runner is Runner.V2 else "n/a",
                _pair(s, "offload_path"),
                _pair(s, "repro"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    versions = sorted({s.vllm for s in summaries})
    lines.append("")
    lines.append(
        f"vLLM {', '.join(versions)}; values are VLLM_WSL2_ENABLE_PIN_MEMORY unset / =1 "
        "(one value when both agree); known = expected failure with its issue."
    )
    for s in summaries:
        for name in s.failures:
            lines.append(f"FAILED {s.cell}: {name}")
    return "\n".join(lines)
