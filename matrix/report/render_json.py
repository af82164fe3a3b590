"""compat.json: the report for machines, versioned; its JSON Schema is compat.schema.json beside this file.

compat.json is the summary; each release's test cases are a file of their own beside it (matrix.report.compat_cases
says why and how they are linked), so the summary stays about 90 KB a release however many cases a release has.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from pathlib import Path

from matrix.cells import ModelClass
from matrix.judge.verdicts import Answer
from matrix.report.compat_cases import CASES_SCHEMA, JOINED_SCHEMA, cases_path
from matrix.report.model import Contradiction, Evidence, Report
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
    """A cell as compat.json gives it: everything but its test cases (``_cell_cases``)."""
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
    }


def _cell_cases(c: CellReport) -> dict:
    """A cell's test cases, as its release's case file gives them."""
    attempts: dict[int, tuple[tuple, list]] = {}
    return {
        "superseded": [
            {"execution": kind_words(e), "cases": [_case(case, attempts) for case in cases]}
            for e, cases in c.superseded.items()
        ],
        "cases": [_case(case, attempts) for case in c.cases],
    }


def _evidence(evidence: Evidence) -> dict:
    counts = dict(evidence.counts) if evidence.counts is not None else None
    execution = kind_words(evidence.execution) if evidence.execution is not None else None
    return asdict(evidence) | {"counts": counts, "execution": execution}


def _case(case: CaseRecord, attempts: dict[int, tuple[tuple, list]] | None = None) -> dict:
    """A case as its release's case file gives it. ``attempts``: each attempts value already spelled, by identity:
    a suite's passing cases share one (reading._read_suite), so it is spelled once, not once a case."""
    spelled = attempts.get(id(case.attempts)) if attempts is not None else None
    if spelled is None or spelled[0] is not case.attempts:
        # Spelled out, not asdict(): asdict deep-copies every value, and there is an attempt per case and rerun.
        spelled = (
            case.attempts,
            [{"outcome": a.outcome, "message": a.message, "source": a.source} for a in case.attempts],
        )
        if attempts is not None:
            attempts[id(case.attempts)] = spelled  # the value itself is kept, so its identity is never reused
    return {
        "classname": case.classname,
        "name": case.name,
        "status": case.status.value,
        "expected": case.expected,
        "observed": case.facts.observed,
        "rule": case.rule,
        "issue": case.issue,
        "message": case.message,
        "attempts": spelled[1],
        "properties": case.properties,
    }


# Asked once: fields() costs more than reading them, once per contradiction of thousands.
_CONTRADICTION_FIELDS = tuple(f.name for f in fields(Contradiction))


def _contradiction(contradiction: Contradiction) -> dict:
    """A contradiction as a dict; asdict() would deep-copy each value, once per record of thousands."""
    return {name: getattr(contradiction, name) for name in _CONTRADICTION_FIELDS}


def to_document(report: Report, cells: bool = True) -> dict:
    """The report as one value, each cell with its test cases: compat.json with its case files joined in (what
    compat_cases.joined reads back); ``cells=False`` leaves out what ``chunks`` streams (the cells, the
    contradictions)."""
    inputs = report.inputs
    return {
        "schema": JOINED_SCHEMA,
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
                "cells": [_cell(report, c) | _cell_cases(c) for c in version_cells],
            }
            for v, version_cells in report.versions.items()
        ]
        if cells
        else [],
        "diff": asdict(report.diff) if report.diff else None,
        "probes": [asdict(p) for p in report.probes],
        "engine_benches": [_engine_bench(b) for b in report.engine_benches],
        "changes": [asdict(c) for c in report.changes],
        "contradictions": [_contradiction(c) for c in report.contradictions] if cells else [],
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


class CaseFile:
    """One release's case file as the chunks it is written in, each hashed on its way out: compat.json, written
    after it, names the file's digest without either file ever being held whole."""

    def __init__(self, report: Report, vllm: str) -> None:
        self.report = report
        self.vllm = vllm
        self._sha256 = hashlib.sha256()
        self._written = False

    def __iter__(self) -> Iterator[str]:
        for chunk in self._chunks():
            self._sha256.update(chunk.encode("utf-8"))
            yield chunk
        self._written = True

    def _chunks(self) -> Iterator[str]:
        yield f'{{"schema":{_dumps(CASES_SCHEMA)},"vllm":{_dumps(self.vllm)},"cells":['
        for i, cell in enumerate(self.report.versions[self.vllm]):
            yield ("," if i else "") + "\n" + _dumps({"id": cell.cell.id} | _cell_cases(cell))
        # Each a case's rule against what vLLM decided: as many as the cases, so here, not in compat.json.
        yield '],"contradictions":['
        found = self.report.contradicted.get(self.vllm, [])
        # A thousand to a chunk: one dumps call each would cost more than the encoding (a run can contradict a
        # rule with each of its cases), and a chunk stays small.
        for start in range(0, len(found), 1000):
            batch = [_contradiction(contradiction) for contradiction in found[start : start + 1000]]
            yield ("," if start else "") + "\n" + _dumps(batch)[1:-1]
        yield "]}\n"

    def link(self) -> dict:
        """How compat.json names this file: its path relative to compat.json and the SHA-256 of its bytes."""
        if not self._written:
            raise RuntimeError(f"compat.json is written after its case files ({cases_path(self.vllm)} is not yet)")
        return {"path": cases_path(self.vllm), "sha256": self._sha256.hexdigest()}


def outputs(report: Report) -> dict[str, Iterable[str]]:
    """compat.json and its case files by their paths relative to the report's directory, as the chunks each is
    written in, in the order they must be written: the case files first, since compat.json names their digests."""
    files = {vllm: CaseFile(report, vllm) for vllm in report.versions}
    found: dict[str, Iterable[str]] = {cases_path(vllm): file for vllm, file in files.items()}
    return found | {"compat.json": chunks(report, files)}


def chunks(report: Report, files: dict[str, CaseFile]) -> Iterator[str]:
    """compat.json a record at a time, one line per cell, once ``files`` are written: a large report never exists
    twice in memory."""
    document = to_document(report, cells=False)
    document["schema"] = COMPAT_SCHEMA
    del document["versions"], document["contradictions"]
    yield _dumps(document)[:-1] + ',"versions":['
    for i, (vllm, cells) in enumerate(report.versions.items()):
        runners = _dumps(_default_runners(report, vllm))[1:-1]
        link = _dumps(files[vllm].link())
        counted = len(report.contradicted.get(vllm, ()))
        yield ("," if i else "") + f'\n{{"vllm":{_dumps(vllm)},{runners},"cases":{link},"contradictions":{counted},'
        yield '"cells":['
        for j, cell in enumerate(cells):
            yield ("," if j else "") + "\n" + _dumps(_cell(report, cell))
        yield "]}"
    yield "]}\n"


def write(report: Report, path: Path) -> None:
    """compat.json at ``path`` with its case files beside it, alone (the report command writes them with the
    others, whole: ``matrix.report.outputs``)."""
    for name, pieces in outputs(report).items():
        target = path if name == "compat.json" else path.parent / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8") as f:
            f.writelines(pieces)
