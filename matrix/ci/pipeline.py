"""The cells as CI jobs: a GitHub Actions matrix and a Buildkite pipeline, from the noxfile's own list.

One job per runner kind (stack x host), running that host's cells one after the
other: a self-hosted GPU runner takes one job at a time anyway, and GitHub keeps
at most one pending job per concurrency group (it cancels the rest), so a
group per physical host must never hold more than two jobs. A Windows host
serves both WSL2 kernels (one at a time), so its old- and new-kernel jobs
share one group.
"""

from __future__ import annotations

import json

from matrix.cells import CELLS, Cell, Host
from matrix.errors import MatrixError

RUNNER_LABEL = "self-hosted"
# The repository variable listing the runner kinds that have a runner online (job names, comma-separated:
# `cuda-linux,cuda-wsl2new`). A kind with none would be queued until GitHub cancels the job (24 hours), and the
# report would wait that long; unset, every kind is planned; `none` plans none (the gate job's predictions only).
ONLINE_VARIABLE = "WSLPIN_RUNNER_KINDS"
NONE_ONLINE = "none"


def cells_from_nox(listing: list[dict]) -> list[Cell]:
    """The cells ``nox -l --json`` lists: the noxfile is the one source of truth."""
    cells = []
    for session in listing:
        spec = session.get("call_spec") or {}
        if session.get("name") == "cell" and spec:
            cells.append(Cell.parse("-".join(spec[axis] for axis in ("stack", "host", "runner", "mode"))))
    if not cells:
        raise MatrixError("the nox listing has no cell(...) sessions: pass the output of `nox -l --json`")
    return cells


def _physical(host: Host) -> str:
    return "wsl2" if host.is_wsl else "linux"


def host_jobs(cells: list[Cell]) -> list[dict]:
    """One entry per runner kind with the cells it runs, in matrix order."""
    jobs: dict[tuple, dict] = {}
    for cell in cells:
        key = (cell.stack, cell.host)
        job = jobs.setdefault(
            key,
            {
                "name": f"{cell.stack}-{cell.host}",
                # What the job uploads its results as: the report knows each runner's files by it.
                "artifact": f"junit-{cell.stack}-{cell.host}",
                "stack": cell.stack.value,
                "host": cell.host.value,
                "runs_on": [RUNNER_LABEL, cell.stack.value, cell.host.label],
                "concurrency": f"wslpin-gpu-{cell.stack}-{_physical(cell.host)}",
                "cells": [],
                "sessions": [],
            },
        )
        job["cells"].append(cell.id)
        job["sessions"].append(cell.session)
    for job in jobs.values():
        job["pattern"] = ",".join(job["cells"])
    return list(jobs.values())


def planned_jobs(cells: list[Cell], online: str = "") -> tuple[list[dict], list[dict]]:
    """The jobs of the runner kinds ``online`` lists (``ONLINE_VARIABLE``; empty: every kind), and the others
    as not planned, each with its cells and why; one line for a kind the matrix does not have."""
    jobs = host_jobs(cells)
    if not online.strip():
        return jobs, []
    kinds = {kind.strip() for kind in online.split(",") if kind.strip()} - {NONE_ONLINE}
    known = [job["name"] for job in host_jobs(list(CELLS))]
    unknown = sorted(kinds - set(known))
    if unknown:
        raise MatrixError(
            f"{ONLINE_VARIABLE} names {', '.join(unknown)}, no runner kind of the matrix: list some of "
            f"{', '.join(known)} (comma-separated), `{NONE_ONLINE}`, or leave it unset to plan every kind"
        )
    planned = [job for job in jobs if job["name"] in kinds]
    not_planned = [
        {
            "name": job["name"],
            "artifact": job["artifact"],
            "cells": job["cells"],
            "reason": f"no {job['name']} runner is listed online ({ONLINE_VARIABLE})",
        }
        for job in jobs
        if job["name"] not in kinds
    ]
    return planned, not_planned


def github_matrix(cells: list[Cell], online: str = "") -> str:
    """The JSON the workflow's plan job hands to ``fromJson`` for ``strategy.matrix``: the planned jobs only,
    since every other key of a matrix would be one more axis."""
    return json.dumps({"include": planned_jobs(cells, online)[0]}, separators=(",", ":"))


def runner_claims(cells: list[Cell], online: str = "") -> str:
    """What the report's ``--runners`` reads: the planned jobs, and the kinds not planned with why."""
    planned, not_planned = planned_jobs(cells, online)
    return json.dumps({"include": planned, "not_planned": not_planned}, separators=(",", ":"))


def buildkite_pipeline(cells: list[Cell], vllm: str) -> str:
    """The same jobs as Buildkite steps (agents chosen by the same labels), then a report step.

    JSON is YAML, and ``buildkite-agent pipeline upload`` reads either.
    """
    steps = []
    jobs = host_jobs(cells)
    for job in jobs:
        sessions = " ".join(f"'{s}'" for s in job["sessions"])
        steps.append(
            {
                "label": f":test_tube: {job['name']}",
                "key": f"cells-{job['name']}",
                "agents": {"queue": "gpu", "stack": job["stack"], "host": job["runs_on"][2]},
                "concurrency": 1,
                "concurrency_group": job["concurrency"],
                "timeout_in_minutes": 120,
                "commands": [
                    # A misrouted agent fails here, and its results say so (the report shows the cells misrouted).
                    f"python -m matrix plan --cells {job['pattern']} --require native "
                    f"--misrouted-out results/misrouted --vllm {vllm}",
                    f"nox --report nox-{job['name']}.json -s {sessions} -- --vllm {vllm}",
                ],
                "artifact_paths": ["results/**/*.xml", "results/**/*.json", f"nox-{job['name']}.json"],
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
                    f"buildkite-agent artifact download 'results/**/*' artifacts/{job['artifact']}/ "
                    f"--step cells-{job['name']} || true"
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
