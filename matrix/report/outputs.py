"""The report's outputs, written whole or not at all, by one writer at a time.

Each output is written under a fresh name in ``--out``, opened so that no link is followed, and
only once every one of them is complete are they renamed over the last report's: a report killed
midway, or one the disk runs out under, leaves the last report as it was, and a name renamed over
is replaced, never written through a link. The directory is locked (``flock`` on the directory
itself, released when the process ends, however it ends) for the whole write: a second report into
the same directory at the same time is refused in one line. Partial files a killed report left are
removed by the next one, under the lock.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

from matrix.errors import MatrixError
from matrix.report import render_html, render_json, render_md
from matrix.report.model import Report

PARTIAL = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{16}\.partial$")


def report_outputs(report: Report) -> dict[str, Iterable[str]]:
    """The report's five outputs by name, each as the chunks it is written in (the page and compat.json are
    rendered while written: a large report is never held whole)."""
    return {
        "COMPATIBILITY.md": [render_md.render(report)],
        "index.html": render_html.chunks(report),
        "strips.svg": [render_html.render_strips(report)],
        "bandwidth.svg": [render_html.render_bandwidth(report)],
        "compat.json": render_json.chunks(report),
    }


def _open_directory(out: Path) -> int:
    if out.is_symlink():
        raise MatrixError(f"--out {out} is a symbolic link: give a real directory for the outputs")
    try:
        out.mkdir(parents=True, exist_ok=True)
        return os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileExistsError, NotADirectoryError) as exc:
        raise MatrixError(
            f"--out {out}: a file is in the way ({exc.strerror}): give a directory for the four outputs"
        ) from None
    except OSError as exc:
        raise MatrixError(f"--out {out}: {exc.strerror}: give a directory this user can write") from None


def write_outputs(out: Path, outputs: Mapping[str, Iterable[str]]) -> None:
    """Each ``name: chunks`` of ``outputs`` as ``out/name``, all of them or none."""
    folder = _open_directory(out)
    staged: list[tuple[str, str]] = []
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MatrixError(
                f"--out {out}: another report is being written there now: wait for it to end, or give another --out"
            ) from None
        for left in os.listdir(folder):
            found = PARTIAL.match(left)
            if found and found["name"] in outputs:
                os.unlink(left, dir_fd=folder)
        for name, chunks in outputs.items():
            partial = f".{name}.{secrets.token_hex(8)}.partial"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            handle = os.open(partial, flags, 0o666, dir_fd=folder)
            staged.append((partial, name))
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                f.writelines(chunks)
        for partial, name in staged:
            os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
        staged.clear()
    except OSError as exc:
        raise MatrixError(
            f"cannot write the report into {out} ({exc.strerror}): the report there is as it was; "
            "free the space or fix the directory, then run it again"
        ) from None
    finally:
        for partial, _ in staged:
            try:
                os.unlink(partial, dir_fd=folder)
            except FileNotFoundError:
                pass
        os.close(folder)
