"""Files the kit writes where a link may wait, and files it reads that anyone may have put there.

A results tree can hold what another process left there (a container's scratch once lived
in it), and a plain write follows a symbolic link to wherever it points. Each file is
written under a fresh name in its directory, opened so that no link is followed, and
renamed over the target: the rename replaces a link instead of following it. A directory
that is itself a link is refused.

An input (a runner's JUnit, a record, a benchmark) is read only if it is a regular file no larger than a bound:
a FIFO named ``*.xml`` would block the reader for ever, and ``/dev/zero`` behind a link would fill the memory.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from matrix.errors import MatrixError

MIB = 1 << 20
# What the kind of a file that is not a regular one is called in a refusal.
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class InputFileError(MatrixError):
    """An input that is not a regular file within its bound: the message says why, in a few words."""


# The most an input file may hold: far above any real one (the published compat.json of 13 releases is 9 MiB).
INPUT_LIMIT = 64 * MIB


def read_input(path: str | Path, limit: int = INPUT_LIMIT, *, links: bool = True) -> bytes:
    """``path``'s bytes if it is a regular file of at most ``limit`` bytes; else InputFileError.

    Opened without waiting (a FIFO opens at once, and is refused), and read no further than the bound, whatever
    the file's size says (a file can grow while it is read). ``links=False``: a symbolic link is refused too.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if links else os.O_NOFOLLOW)
    try:
        handle = os.open(path, flags)
    except OSError as exc:
        if not links and exc.errno == errno.ELOOP:
            raise InputFileError("a symbolic link, where the file itself is expected") from None
        raise InputFileError(f"cannot be read ({exc.strerror})") from None
    try:
        mode = os.fstat(handle).st_mode
        if not stat.S_ISREG(mode):
            raise InputFileError(f"not a regular file ({_KINDS.get(stat.S_IFMT(mode), 'a special file')})")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(handle, min(limit + 1 - size, MIB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InputFileError(f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(handle)
    if size > limit:
        raise InputFileError(f"larger than the {limit / MIB:g} MiB an input may be")
    return b"".join(chunks)


def write_file(directory: Path, name: str, data: bytes) -> Path:
    """``directory/name`` holding ``data``, whatever was at that name before (a link included)."""
    if directory.is_symlink():
        raise MatrixError(f"{directory} is a symbolic link: results are written only into a real directory; remove it")
    partial = f".{name}.{os.urandom(8).hex()}.partial"  # secrets.token_hex's bytes, without importing hashlib
    try:
        directory.mkdir(parents=True, exist_ok=True)
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise MatrixError(f"cannot write results in {directory}: {exc.strerror}") from None
    made = False
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        handle = os.open(partial, flags, 0o666, dir_fd=folder)
        made = True
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
        made = False
    except OSError as exc:
        # Only a partial this call made is removed: on a read-only file system even unlinking a name that
        # does not exist fails, and that must not hide the one-line error.
        if made:
            os.unlink(partial, dir_fd=folder)
        raise MatrixError(f"cannot write {directory / name}: {exc.strerror}") from None
    finally:
        os.close(folder)
    return directory / name
