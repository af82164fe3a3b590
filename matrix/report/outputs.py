"""The report's outputs, written whole or not at all, by one writer at a time.

Each output is written under a fresh name in ``--out``, opened so that no link is followed, and
only once every one of them is complete are they renamed over the last report's: a report killed
midway, or one the disk runs out under, leaves the last report as it was, and a name renamed over
is replaced, never written through a link. The directory is locked (``flock`` on the directory
itself, released when the process ends, however it ends) for the whole write: a second report into
the same directory at the same time is refused in one line. Partial files a killed report left are
removed by the next one, under the lock.

An output may lie one directory down (``cases/0.33.0.json``, ``releases/0.33.0.html``: one per release): that
directory is the report's, made where missing and never followed through a link, and a file in it that names a
release (matrix.report.compat_cases.stem) the report no longer holds is removed once the new ones are in place.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from matrix.errors import MatrixError
from matrix.report import render_html, render_json, render_md
from matrix.report.model import Report

PARTIAL = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{16}\.partial$")
# What a report writes one directory down: a release's file (compat_cases.stem), so a stale one is known as such.
PER_RELEASE = re.compile(r"^(?:[0-9]+(?:\.[0-9a-z]+){0,5}|r[0-9a-f]{20})\.(?:json|html)$")


def report_outputs(report: Report) -> dict[str, Iterable[str]]:
    """The report's outputs by path, each as the chunks it is written in (the pages and compat.json are rendered
    while written: a large report is never held whole): five files, a page and a case file per release."""
    return {
        "COMPATIBILITY.md": [render_md.render(report)],
        "index.html": render_html.chunks(report),
        **render_html.pages(report),
        "strips.svg": [render_html.render_strips(report)],
        "bandwidth.svg": [render_html.render_bandwidth(report)],
        **render_json.outputs(report),
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


def _open_below(folder: int, below: str, opened: dict[str, int]) -> int:
    """The directory ``below`` an output lies in: ``folder`` itself (""), or the one below it of that name, made
    where missing and opened without following a link (kept in ``opened``)."""
    if not below:
        return folder
    if below not in opened:
        try:
            os.mkdir(below, dir_fd=folder)
        except FileExistsError:
            pass
        opened[below] = os.open(below, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    return opened[below]


def write_outputs(out: Path, outputs: Mapping[str, Iterable[str]]) -> None:
    """Each ``name: chunks`` of ``outputs`` as ``out/name``, all of them or none."""
    folder = _open_directory(out)
    opened: dict[str, int] = {}
    staged: list[tuple[int, str, str]] = []
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MatrixError(
                f"--out {out}: another report is being written there now: wait for it to end, or give another --out"
            ) from None
        names = {name.rpartition("/")[2] for name in outputs}
        for below in {name.rpartition("/")[0] for name in outputs}:
            where = _open_below(folder, below, opened)
            for left in os.listdir(where):
                found = PARTIAL.match(left)
                if found and found["name"] in names:
                    os.unlink(left, dir_fd=where)
        for name, chunks in outputs.items():
            where = _open_below(folder, name.rpartition("/")[0], opened)
            partial = f".{name.rpartition('/')[2]}.{secrets.token_hex(8)}.partial"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            handle = os.open(partial, flags, 0o666, dir_fd=where)
            staged.append((where, partial, name.rpartition("/")[2]))
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                f.writelines(chunks)
        for where, partial, name in staged:
            os.replace(partial, name, src_dir_fd=where, dst_dir_fd=where)
        staged.clear()
        for below, where in opened.items():
            kept = {name.rpartition("/")[2] for name in outputs if name.rpartition("/")[0] == below}
            for left in os.listdir(where):
                if PER_RELEASE.match(left) and left not in kept:
                    if stat.S_ISREG(os.stat(left, dir_fd=where, follow_symlinks=False).st_mode):
                        os.unlink(left, dir_fd=where)
    except OSError as exc:
        raise MatrixError(
            f"cannot write the report into {out} ({exc.strerror}): the report there is as it was; "
            "free the space or fix the directory, then run it again"
        ) from None
    finally:
        for where, partial, _ in staged:
            try:
                os.unlink(partial, dir_fd=where)
            except FileNotFoundError:
                pass
        for where in opened.values():
            os.close(where)
        os.close(folder)
