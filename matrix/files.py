"""Result files written where a link may wait: a link at the target is replaced, never written through.

A results tree can hold what another process left there (a container's scratch once lived
in it), and a plain write follows a symbolic link to wherever it points. Each file is
written under a fresh name in its directory, opened so that no link is followed, and
renamed over the target: the rename replaces a link instead of following it. A directory
that is itself a link is refused.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from matrix.errors import MatrixError


def write_file(directory: Path, name: str, data: bytes) -> Path:
    """``directory/name`` holding ``data``, whatever was at that name before (a link included)."""
    if directory.is_symlink():
        raise MatrixError(f"{directory} is a symbolic link: results are written only into a real directory; remove it")
    partial = f".{name}.{secrets.token_hex(8)}.partial"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise MatrixError(f"cannot write results in {directory}: {exc.strerror}") from None
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(partial, flags, 0o666, dir_fd=folder), "wb") as out:
            out.write(data)
        os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as exc:
        try:
            os.unlink(partial, dir_fd=folder)
        except FileNotFoundError:
            pass
        raise MatrixError(f"cannot write {directory / name}: {exc.strerror}") from None
    finally:
        os.close(folder)
    return directory / name
