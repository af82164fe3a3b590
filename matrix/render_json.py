"""compat.json: the report for machines, versioned; its JSON Schema is compat.schema.json beside this file."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from matrix.report import REPORT_SCHEMA, Report
from matrix.status import CellReport

SCHEMA_FILE = Path(__file__).with_name("compat.schema.json")


def _cell(c: CellReport) -> dict:
    return {
        "id": c.cell.id,
        "stack": c.cell.stack.value,
        "host": c.cell.host.value,
        "runner": c.cell.runner.value,
        "mode": c.cell.mode.value,
        "status": c.status.value,
        "underlying_status": c.underlying.value if c.underlying else None,
        "reason": c.reason,
        "summary": c.summary,
        "issues": c.issues,
        "command": c.command,
        "age_days": c.age_days,
        "counts": c.counts,
        "provenance": c.envelope,
        "cases": [
            {
                "classname": case.classname,
                "name": case.name,
                "status": case.status.value,
                "expected": case.expected,
                "observed": case.properties.get("observed"),
                "rule": case.rule,
                "issue": case.issue,
                "message": case.message,
                "attempts": [asdict(a) for a in case.attempts],
                "properties": case.properties,
            }
            for case in c.cases
        ],
    }


def to_document(report: Report) -> dict:
    inputs = report.inputs
    return {
        "schema": REPORT_SCHEMA,
        "generated_at": report.generated_at.isoformat(timespec="seconds"),
        "kit_commit": report.kit_commit,
        "max_age_days": report.max_age_days,
        "inputs": {
            "files": inputs.files,
            "testcases_read": inputs.testcases_read,
            "unattributed": [asdict(p) for p in inputs.unattributed],
            "unreadable": [asdict(p) for p in inputs.unreadable],
            "warnings": [asdict(p) for p in inputs.warnings],
        },
        "versions": [{"vllm": v, "cells": [_cell(c) for c in cells]} for v, cells in report.versions.items()],
        "diff": asdict(report.diff) if report.diff else None,
    }


def write(report: Report, path: Path) -> None:
    with path.open("w") as f:
        json.dump(to_document(report), f, indent=1, ensure_ascii=False)
        f.write("\n")
