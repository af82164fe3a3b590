"""A plan's cells run in an image, and their results written on the host, crashed or not.

The container runs what a cell session runs (``matrix env``, then pytest on tests/cell with
the host's plan); the JUnit split runs here on the host, with the same plan, because only the
host knows the image's digest and the kit's commit (an image has no git), and because a
container that never started needs its results written all the same, by the same code
(``matrix.junit.write_cells``). The files go to ``results/<vLLM>/<group>@<image>/`` (matrix.store.layout),
the image's own vLLM release, or ``unknown`` when it never reported it.

The image is untrusted. Its one writable mount is a scratch directory of the host's, outside
the results tree and removed afterwards; what it leaves there is read without following a
link, within a size, and the JUnit by the kit's one safe parser. A file that fails any of
that crashes the cell with the reason. The host writes the results itself (matrix.io.files).
"""

from __future__ import annotations

import datetime as dt
import errno
import io
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.etree.ElementTree import Element

from matrix.errors import MatrixError
from matrix.host import classify, facts
from matrix.host.facts import kit_commit, runner_name
from matrix.host.record import EnvironmentRecord
from matrix.plan import Plan
from matrix.store.layout import run_dir
from repro.container.docker_io import Ran, exit_reason, run_spec
from repro.container.errors import ContainerError
from repro.container.spec import CELL_TESTS, KIT_ROOT, PLAN_FILE, container_spec
from repro.container.vendor import stage_dependencies

DEFAULT_TIMEOUT = 3600.0
# The most the host reads of a file the container left: far above any cell's, far below filling memory.
LEFT_LIMIT = 64 * 2**20
# The log kept beside the results is its end (where a crash shows); all of it was streamed to stdout.
LOG_LIMIT = 16 * 2**20


@dataclass(frozen=True)
class Outcome:
    written: list[Path]
    crashed: str  # "" when the container left its results


def _crashed_record() -> EnvironmentRecord:
    """The record of a container that left none: the host it crashed on, without the host's packages.

    The packages were the image's, which never said which: the host's vLLM (a reused nox
    environment has one) must not pass for them and file the crash under a release it never ran.
    """
    record = {**facts.collect_environment(), "packages": {"torch": None, "vllm": None}}
    return EnvironmentRecord({**record, "env_hash": classify.environment_hash(record)})


def _read_left(path: Path, limit: int = LEFT_LIMIT) -> bytes | None:
    """A file the container left, read without following a link; None when it left none.

    The container is gone by the time this runs, so the file checked is the file read.
    ContainerError says why a file is refused.
    """
    try:
        # Non-blocking: a FIFO opens at once, and is refused below as not a file.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ContainerError(f"the container left {path.name} as a symbolic link, not a file") from None
        raise ContainerError(f"the container's {path.name} cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ContainerError(f"the container left {path.name} as something other than a file")
        if info.st_size > limit:
            raise ContainerError(f"the container's {path.name} is over {limit // 2**20} MiB")
        return file.read(limit)


# What a record the host refuses asks for: the kit mounted in the container writes the record, so another came
# from the image itself.
IMAGE_AGAIN = "use an image whose python3 runs the mounted kit's `python -m matrix env` as it is"


def _left_record(scratch: Path) -> EnvironmentRecord | None:
    """The container's environment record, checked where the host reads it; None when it left none."""
    data = _read_left(scratch / "env.json")
    if data is None:
        return None
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise ContainerError(f"the container's env.json is not JSON ({type(exc).__name__})") from None
    try:
        return EnvironmentRecord.from_json(record, "the container's env.json", IMAGE_AGAIN)
    except MatrixError as exc:
        raise ContainerError(str(exc)) from None


def _left_cases(scratch: Path) -> list[Element] | None:
    """The container's test cases, read by the kit's one safe JUnit parser; None when it left no JUnit."""
    from matrix.junit import UnreadableError, parse

    data = _read_left(scratch / "junit.xml")
    if data is None:
        return None
    try:
        return list(parse(io.BytesIO(data)).iter("testcase"))
    except UnreadableError as exc:
        raise ContainerError(f"the container's junit.xml is not a JUnit file: {exc}") from None


def _probe(path: Path) -> bytes | None:
    """The probe's metrics if the container left them as a file: a link, or worse, is dropped like a missing file."""
    try:
        return _read_left(path)
    except ContainerError:
        return None


def _log_end(log: Path) -> bytes | None:
    """The end of the container's log (written here on the host, never in the container's reach)."""
    try:
        with log.open("rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - LOG_LIMIT))
            return file.read(LOG_LIMIT)
    except FileNotFoundError:
        return None


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
    from matrix.io.files import write_file
    from matrix.junit import write_cells

    environ = dict(os.environ if environ is None else environ)
    cells = [cell_plan.cell for cell_plan in plan.cells]
    name = cells[0].id if len(cells) == 1 else "container"
    results = results.resolve()
    log, probe = f"{name}.container.log", f"{name}.probe.json"
    build = KIT_ROOT / "build"
    build.mkdir(parents=True, exist_ok=True)
    # Beside the staged dependencies, which the engine mounts already; the log stays out of the container's reach.
    work = Path(tempfile.mkdtemp(prefix="container-", dir=build))
    scratch = work / "scratch"
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    ran: Ran | None = None
    crashed = ""
    try:
        scratch.mkdir()
        plan.write(scratch / PLAN_FILE)
        try:
            user = f"{os.getuid()}:{os.getgid()}"
            spec = container_spec(plan, image, name, scratch, stage_dependencies(build), environ, user, pytest_args)
            ran = run_spec(spec, work / log, timeout, environ)
        except ContainerError as exc:
            crashed = str(exc)
        record: EnvironmentRecord | None = None
        cases: list[Element] | None = None
        try:
            record = _left_record(scratch)
            # A container the kit killed (its timeout, its scratch's bounds) never ended its run: what it left is
            # no result, however whole it looks (pytest writes its JUnit before its own exit, not at it).
            finished = ran is not None and ran.exit_code is not None
            cases = _left_cases(scratch) if finished and not crashed else None
        except ContainerError as exc:
            crashed = crashed or str(exc)
        record = record or _crashed_record()
        out = run_dir(results, record.vllm_release, group, image)
        if ran is not None and cases is None and not crashed:
            crashed = exit_reason(ran, timeout, out / log)
        digest = ran.image_digest if ran is not None else ""
        run = RunInfo(record, kit_commit(), runner_name(), started, image=image, image_digest=digest)
        reason = f"crashed in {image}: {crashed}" if crashed else f"pytest in {image} wrote no result for this cell"
        written = write_cells(list(plan.cells), cases or [], run, out, reason)
        for kept, data in ((log, _log_end(work / log)), (probe, _probe(scratch / probe))):
            # A file this run did not write must not stay beside its results as if it had.
            (out / kept).unlink(missing_ok=True)
            if data is not None:
                write_file(out, kept, data)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Outcome(written, crashed)
