"""A log of what read this machine, kept only while the kit's own tests run.

The host variants of ``nox -s tests`` (``--as-host``, ``--stand-in-gpu``) run only the tests marked
``reads_host``; a test that reads the machine without the mark would never meet another host. So while
``WSLPIN_HOST_READS`` names a file (tests/kit/host_reads.py sets it for a test session, and every child
process inherits it), each read of the machine appends one line to it: the kit test that caused the read
(``WSLPIN_HOST_READS_TEST``, set by that plugin: a nested pytest run's own PYTEST_CURRENT_TEST would name
its inner test) and what was read. Unset, nothing is done, and a read's result never depends on the log.
"""

from __future__ import annotations

import os

from matrix.variables import HOST_READS, HOST_READS_TEST

LOG = HOST_READS.name
TEST = HOST_READS_TEST.name


def record(what: str) -> None:
    """Note that ``what`` (of this machine) was just read, where a test session keeps the log."""
    path = os.environ.get(LOG)
    if not path:
        return
    try:
        # One short append per line: children that read at the same time never interleave within a line.
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{os.environ.get(TEST, '')}\t{what}\n")
    except OSError:
        pass  # a log that cannot be written loses the note, never the read
