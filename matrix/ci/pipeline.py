"""The cells as CI jobs: a GitHub Actions matrix and a Buildkite pipeline.

One job per runner kind (stack x host), running that host's cells one after the
other: a self-hosted GPU runner takes one job at a time anyway, and GitHub keeps
at most one pending job per concurrency group (it cancels the rest), so a
group per physical host must never hold more than two jobs. A Windows host
serves both WSL2 kernels (one at a time), so its old- and new-kernel jobs
share one group.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from matrix.cells import CELLS, Cell, Host, Stack
from matrix.errors import MatrixError
from matrix.variables import RUNNER_KINDS

RUNNER_LABEL = "self-hosted"
# The repository variable listing the runner kinds that have a runner online (job names, comma-separated:
# `cuda-linux,cuda-wsl2new`). A kind with none would be queued until GitHub cancels the job (24 hours), and the
# report would wait that long; unset, every kind is planned; `none` plans none (the gate job's predictions only).
ONLINE_VARIABLE = RUNNER_KINDS.name
NONE_ONLINE = "none"


def _physical(host: Host) -> str:
    return "wsl2" if host.is_wsl else "linux"


@dataclass(frozen=True)
class RunnerJob:
    """One CI job: a runner kind (stack x host) and the cells it runs, one after the other."""

    stack: Stack
    host: Host
    cells: tuple[Cell, ...]

    @property
    def name(self) -> str:
        return f"{self.stack}-{self.host}"

    @property
    def artifact(self) -> str:
        """What the job uploads its results as: the report knows each runner's files by it."""
        return f"junit-{self.name}"

    @property
    def labels(self) -> tuple[str, ...]:
        """The labels a runner of this kind carries (docs/runners.md)."""
        return (RUNNER_LABEL, self.stack.value, self.host.label)

    @property
    def concurrency(self) -> str:
        return f"wslpin-gpu-{self.stack}-{_physical(self.host)}"

    @property
    def pattern(self) -> str:
        return ",".join(cell.id for cell in self.cells)

    def as_dict(self) -> dict[str, Any]:
        """The job as the workflow's matrix and the report's ``--runners`` read it."""
        return {
            "name": self.name,
            "artifact": self.artifact,
            "stack": self.stack.value,
            "host": self.host.value,
            "runs_on": list(self.labels),
            "concurrency": self.concurrency,
            "cells": [cell.id for cell in self.cells],
            "sessions": [cell.session for cell in self.cells],
            "pattern": self.pattern,
        }

    def not_planned(self, reason: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "artifact": self.artifact,
            "cells": [cell.id for cell in self.cells],
            "reason": reason,
        }


def host_jobs(cells: list[Cell]) -> list[RunnerJob]:
    """One job per runner kind with the cells it runs, in matrix order."""
    kinds: dict[tuple[Stack, Host], list[Cell]] = {}
    for cell in cells:
        kinds.setdefault((cell.stack, cell.host), []).append(cell)
    return [RunnerJob(stack, host, tuple(of_kind)) for (stack, host), of_kind in kinds.items()]


def planned_jobs(cells: list[Cell], online: str = "") -> tuple[list[RunnerJob], list[dict[str, Any]]]:
    """The jobs of the runner kinds ``online`` lists (``ONLINE_VARIABLE``; empty: every kind), and the others
    as not planned, each with its cells and why; one line for a kind the matrix does not have."""
    jobs = host_jobs(cells)
    if not online.strip():
        return jobs, []
    kinds = {kind.strip() for kind in online.split(",") if kind.strip()} - {NONE_ONLINE}
    known = [job.name for job in host_jobs(list(CELLS))]
    unknown = sorted(kinds - set(known))
    if unknown:
        raise MatrixError(
            f"{ONLINE_VARIABLE} names {', '.join(unknown)}, no runner kind of the matrix: list some of "
            f"{', '.join(known)} (comma-separated), `{NONE_ONLINE}`, or leave it unset to plan every kind"
        )
    planned = [job for job in jobs if job.name in kinds]
    not_planned = [
        job.not_planned(f"no {job.name} runner is listed online ({ONLINE_VARIABLE})")
        for job in jobs
        if job.name not in kinds
    ]
    return planned, not_planned


def github_matrix(cells: list[Cell], online: str = "") -> str:
    """The JSON the workflow's plan job hands to ``fromJson`` for ``strategy.matrix``: the planned jobs only,
    since every other key of a matrix would be one more axis."""
    return json.dumps({"include": [job.as_dict() for job in planned_jobs(cells, online)[0]]}, separators=(",", ":"))


def runner_claims(cells: list[Cell], online: str = "") -> str:
    """What the report's ``--runners`` reads: the planned jobs, and the kinds not planned with why."""
    planned, not_planned = planned_jobs(cells, online)
    include = [job.as_dict() for job in planned]
    return json.dumps({"include": include, "not_planned": not_planned}, separators=(",", ":"))


def buildkite_pipeline(cells: list[Cell], vllm: str) -> str:
    """The same jobs as Buildkite steps (agents chosen by the same labels), then a report step.

    JSON is YAML, and ``buildkite-agent pipeline upload`` reads either.
    """
    steps = []
    jobs = host_jobs(cells)
    for job in jobs:
        sessions = " ".join(f"'{cell.session}'" for cell in job.cells)
        steps.append(
            {
                "label": f":test_tube: {job.name}",
                "key": f"cells-{job.name}",
                "agents": {"queue": "gpu", "stack": job.stack.value, "host": job.host.label},
                "concurrency": 1,
                "concurrency_group": job.concurrency,
                "timeout_in_minutes": 120,
                "commands": [
                    # A misrouted agent fails here, and its results say so (the report shows the cells misrouted).
                    f"python -m matrix plan --cells {job.pattern} --require native "
                    f"--misrouted-out results/misrouted --vllm {vllm}",
                    f"nox --report nox-{job.name}.json -s {sessions} -- --vllm {vllm}",
                ],
                "artifact_paths": ["results/**/*.xml", "results/**/*.json", f"nox-{job.name}.json"],
            }
        )
    steps.append({"wait": None, "continue_on_failure": True})  # the report runs even when cells failed
    steps.append(
        {
            "label": ":bar_chart: report",
            "key": "report",
            "timeout_in_minutes": 20,
            "commands": [
                # Each step's files in a directory named as the plan names its artifact, so that the report
                # knows which agent wrote which file (--runners); a step that uploaded nothing leaves its
                # directory empty, and its cells missing.
                *(
                    f"buildkite-agent artifact download 'results/**/*' artifacts/{job.artifact}/ "
                    f"--step cells-{job.name} || true"
                    for job in jobs
                ),
                "buildkite-agent artifact download 'nox-*.json' . || true",
                # The report's pinned lock alone (`nox -s lock`): the kit runs from the checkout.
                "python -m pip install --no-deps -r requirements/report.txt",
                f"python -m matrix plan --format github --cells {','.join(c.id for c in cells)} > runners.json",
                # Every agent's nox report says which cells' sessions died before writing results;
                # 8 days: a nightly run plus a week of grace, anything older is an agent's leftovers.
                "python -m matrix report artifacts/ --runners runners.json --nox-report 'nox-*.json' "
                "--max-age-days 8 --out report/",
                "buildkite-agent annotate --style info < report/COMPATIBILITY.md",
            ],
            "artifact_paths": ["report/*"],
        }
    )
    return json.dumps({"steps": steps}, indent=2)
