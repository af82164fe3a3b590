"""The one exception for a person's mistake: bad input, a missing file, a command this machine cannot run."""

from __future__ import annotations


class MatrixError(ValueError):
    """Bad input from a person: the message is one line that says what to do."""
