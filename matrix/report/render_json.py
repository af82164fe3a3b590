"""compat.json: the report for machines, versioned; its JSON Schema is compat.schema.json beside this file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path

from matrix.cells import ModelClass
from matrix.judge.verdicts import Answer
from matrix.report.model import Evidence, Report
from matrix.report.status import CaseRecord, CellReport
from matrix.report.view import advice, answer_sentence, evidence_sentence, kind_words, plain, why
from matrix.store.engine_bench import EngineBench
from matrix.text.words import COMPAT_SCHEMA
from matrix.variables import GATE_PIN_VALUES

SCHEMA_FILE = Path(__file__).with_name("compat.schema.json")


def _answer(answer: Answer) -> dict:
    return {
        **_kept(answer),
        "issues": list(answer.issues),
        "rules": [rule.id for rule in answer.rules],
        "outcomes": {
            pin: found.outcome.value if found else None for pin, found in zip(GATE_PIN_VALUES, answer.runs, strict=True)
        },
        "kept": {pin: _kept(kept) for pin, kept in answer.kept},
    }


def _kept(answer: Answer) -> dict:
    """What an answer says: for a kept one, what the doctor tells a user who has set the variable so."""
    return {
        "verdict": answer.verdict.value,
        "level": answer.level.value,
        "advice": plain(advice(answer)),
        "why": why(answer),
    }


def _cell(report: Report, c: CellReport) -> dict:
    evidence = report.evidence(c)
    verdicts = report.verdicts_of(c)
    return {
        "id": c.cell.id,
        "stack": c.cell.stack.value,
        "host": c.cell.host.value,
        "runner": c.cell.runner.value,
        "mode": c.cell.mode.value,
        "verdicts": {a.question.value: _answer(a) for a in verdicts.answers},
        "headline": verdicts.headline.question.value,
        "answer": answer_sentence(c.cell, c.vllm, verdicts),
        "status": c.status.value,
        "underlying_status": c.underlying.value if c.underlying else None,
        "reason": c.reason,
        "summary": c.summary,
        "issues": c.issues,
        "command": c.command,
        "evidence": [evidence_sentence(e) for e in evidence],
        "evidence_records": [_evidence(e) for e in evidence],
        "bench": asdict(bench) if (bench := report.bench(c)) else None,
        "age_days": c.age_days,
        "counts": c.counts,
        "provenance": c.envelope.to_properties() if c.envelope else {},
        "superseded": [
            {"execution": kind_words(e), "cases": [_case(case) for case in cases]} for e, cases in c.superseded.items()
        ],
        "cases": [_case(case) for case in c.cases],
    }


def _evidence(evidence: Evidence) -> dict:
    counts = dict(evidence.counts) if evidence.counts is not None else None
    execution = kind_words(evidence.execution) if evidence.execution is not None else None
    return asdict(evidence) | {"counts": counts, "execution": execution}


def _case(case: CaseRecord) -> dict:
    return {
        "classname": case.classname,
        "name": case.name,
        "status": case.status.value,
        "expected": case.expected,
        "observed": case.facts.observed,
        "rule": case.rule,
        "issue": case.issue,
        "message": case.message,
        # Spelled out, not asdict(): asdict deep-copies every value, and there is an attempt per case and rerun.
        "attempts": [{"outcome": a.outcome, "message": a.message, "source": a.source} for a in case.attempts],
        "properties": case.properties,
    }


def _flat(record: object) -> dict:
    """A dataclass of plain values as a dict; asdict() would deep-copy each value, once per record of thousands."""
    return {f.name: getattr(record, f.name) for f in fields(record)}  # type: ignore[arg-type]


def to_document(report: Report, cells: bool = True) -> dict:
    """compat.json as one value; ``cells=False`` leaves out what ``write`` streams (the cells, the contradictions)."""
    inputs = report.inputs
    return {
        "schema": COMPAT_SCHEMA,
        "generated_at": report.generated_at.isoformat(timespec="seconds"),
        "kit_commit": report.kit_commit,
        "max_age_days": report.max_age_days,
        "inputs": {
            "files": inputs.files,
            "testcases_read": inputs.testcases_read,
            "unattributed": [asdict(p) for p in inputs.unattributed],
            "unreadable": [asdict(p) for p in inputs.unreadable],
            "warnings": [asdict(p) for p in inputs.warnings],
            "suspect": [asdict(s) for s in inputs.suspect],
            "crashed_without_release": [
                {"cell": c.cell.id, "status": c.status.value, "reason": c.reason} for c in report.unplaced
            ],
            "not_planned": [asdict(kind) for kind in inputs.claims.not_planned] if inputs.claims else [],
        },
        "versions": [
            {
                "vllm": v,
                **_default_runners(report, v),
                "cells": [_cell(report, c) for c in version_cells] if cells else [],
            }
            for v, version_cells in report.versions.items()
        ],
        "diff": asdict(report.diff) if report.diff else None,
        "probes": [asdict(p) for p in report.probes],
        "engine_benches": [_engine_bench(b) for b in report.engine_benches],
        "changes": [asdict(c) for c in report.changes],
        "contradictions": [_flat(c) for c in report.contradictions] if cells else [],
    }


def _engine_bench(bench: EngineBench) -> dict:
    """An engine-level benchmark as the API gives it: what ran, on what, and each comparison; the per-process
    samples stay in its record."""
    return {
        "started_at": bench.started_at,
        "gpu": bench.gpu,
        "vllm": bench.vllm_version,
        "torch": bench.torch_version,
        "stand_in": bench.stand_in,
        "model": asdict(bench.model),
        "rounds_run": bench.rounds_run,
        "stopped": bench.stopped,
        "cells": [
            {
                "cell": cell.cell,
                "configuration": cell.configuration.value,
                "execution": cell.execution.value,
                "note": cell.note,
                "comparisons": [asdict(c) for c in cell.comparisons],
            }
            for cell in bench.benches
        ],
        "skipped": [asdict(cell) for cell in bench.skipped],
    }


def _default_runners(report: Report, vllm: str) -> dict:
    """A release's default runner per model class, and on its own the dense model's (what most users run)."""
    runners = report.default_runners(vllm)
    return {
        "default_runner": runners[ModelClass.DENSE.value],
        "default_runners": runners,
        "v2_architectures": report.v2_architectures(vllm),
    }


def _dumps(value: object) -> str:
    # No spaces after separators: 6% of the published file, which travels whole with the kit (64 MiB a device call).
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def chunks(report: Report) -> Iterator[str]:
    """``to_document`` a record at a time, one line per cell: a large report never exists twice in memory."""
    document = to_document(report, cells=False)
    del document["versions"], document["contradictions"]
    yield _dumps(document)[:-1] + ',"versions":['
    for i, (vllm, cells) in enumerate(report.versions.items()):
        runners = _dumps(_default_runners(report, vllm))[1:-1]
        yield ("," if i else "") + f'\n{{"vllm":{_dumps(vllm)},{runners},"cells":['
        for j, cell in enumerate(cells):
            yield ("," if j else "") + "\n" + _dumps(_cell(report, cell))
        yield "]}"
    yield '],"contradictions":['
    for i, contradiction in enumerate(report.contradictions):
        yield ("," if i else "") + "\n" + _dumps(_flat(contradiction))
    yield "]}\n"


def write(report: Report, path: Path) -> None:
    """compat.json at ``path`` alone (the report command writes it with the others, whole: ``outputs``)."""
    with path.open("w", encoding="utf-8") as f:
        f.writelines(chunks(report))
