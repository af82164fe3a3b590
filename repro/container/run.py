"""A plan's cells run in an image, and their results written on the host, crashed or not.

The container runs what a cell session runs (``matrix env``, then pytest on tests/cell with
the host's plan); the JUnit split runs here on the host, with the same plan, because only the
host knows the image's digest and the kit's commit (an image has no git), and because a
container that never started needs its results written all the same, by the same code
(``write_cell_results``). The files go to ``results/<vLLM>/<group>@<image>/`` (matrix.layout),
the image's own vLLM release, or ``unknown`` when it never reported it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matrix.host import classify, facts
from matrix.host.facts import kit_commit, runner_name
from matrix.layout import run_dir
from matrix.plan import Plan
from repro.container.docker_io import Ran, exit_reason, run_spec
from repro.container.errors import ContainerError
from repro.container.spec import CELL_TESTS, KIT_ROOT, PLAN_FILE, container_spec, scratch_dir
from repro.container.vendor import stage_dependencies

DEFAULT_TIMEOUT = 3600.0


@dataclass(frozen=True)
class Outcome:
    written: list[Path]
    crashed: str  # "" when the container left its results


def _crashed_record() -> dict[str, Any]:
    """The record of a container that left none: the host it crashed on, without the host's packages.

    The packages were the image's, which never said which: the host's vLLM (a reused nox
    environment has one) must not pass for them and file the crash under a release it never ran.
    """
    record = {**facts.collect_environment(), "packages": {"torch": None, "vllm": None}}
    return {**record, "env_hash": classify.environment_hash(record)}


def run_in_image(
    plan: Plan,
    image: str,
    results: Path,
    group: str = "cell",
    timeout: float = DEFAULT_TIMEOUT,
    pytest_args: tuple[str, ...] = CELL_TESTS,
    environ: Mapping[str, str] | None = None,
) -> Outcome:
    """Run ``plan``'s cells inside ``image`` and write ``<cell-id>.xml`` for each, crashed or not.

    The plan is made on the host (tests describe a GPU host this machine cannot be); the
    container's pytest and the split both read it, so the container never plans again.
    """
    # Here, not at the top: `python -m repro` builds this command's parser, and must start where
    # junitparser is missing (an offline GPU machine runs only the probe and the reproduction).
    from matrix.envelope import RunInfo
    from matrix.junit import write_cell_results

    environ = dict(os.environ if environ is None else environ)
    cells = [cell_plan.cell for cell_plan in plan.cells]
    name = cells[0].id if len(cells) == 1 else "container"
    results = results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    scratch = scratch_dir(results, name)
    log, probe_out = f"{name}.container.log", f"{name}.probe.json"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    plan.write(scratch / PLAN_FILE)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    ran: Ran | None = None
    crashed = ""
    try:
        spec = container_spec(
            plan,
            image,
            name,
            results,
            stage_dependencies(KIT_ROOT / "build"),
            environ,
            f"{os.getuid()}:{os.getgid()}",
            pytest_args,
        )
        ran = run_spec(spec, scratch / log, timeout, environ)
    except ContainerError as exc:
        crashed = str(exc)
    try:
        env_file = scratch / "env.json"
        record = json.loads(env_file.read_text()) if env_file.exists() else _crashed_record()
        out = run_dir(results, record, group, image)
        if ran is not None and not (scratch / "junit.xml").exists():
            crashed = exit_reason(ran, timeout, out / log)
        digest = ran.image_digest if ran is not None else ""
        run = RunInfo(record, kit_commit(), runner_name(), started, image=image, image_digest=digest)
        if crashed:
            written = write_cell_results(list(plan.cells), None, run, out, raw_missing=f"crashed in {image}: {crashed}")
        else:
            written = write_cell_results(list(plan.cells), scratch / "junit.xml", run, out)
        for kept in (log, probe_out):
            # A file this run did not write must not stay beside its results as if it had.
            (out / kept).unlink(missing_ok=True)
            if (scratch / kept).exists():
                (scratch / kept).replace(out / kept)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Outcome(written, crashed)
