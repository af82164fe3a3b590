"""Text from the inputs as a reader should see it, in every output of the report, the summary and the CLI.

A runner executes a line of a job's log that starts with ``::`` (``::error``, ``::add-mask::``,
``::stop-commands::``), and bidi controls or zero-width characters make a name read as another.
So no input text may break a line, and none may hide or reorder what follows: such characters
are shown as their escapes. Standard library only: the CLI's error line uses it on a bare Python.
"""

from __future__ import annotations

import re

# Besides C0 controls: DEL and C1 controls, the line and paragraph separators, zero-width and bidi characters.
_UNSEEN = "\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
_HIDDEN = re.compile(f"[\x00-\x1f{_UNSEEN}]")
_HIDDEN_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_UNSEEN}]")  # tab and line feed kept


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def visible(text: object) -> str:
    """``text`` on one line, every control, bidi and zero-width character shown as its escape (``\\n``, ``\\u202e``)."""
    return _HIDDEN.sub(_escape, str(text))


def visible_lines(text: object) -> str:
    """As ``visible``, but tabs and line feeds kept: for a page, where a line cannot be a runner's command."""
    return _HIDDEN_BUT_LINES.sub(_escape, str(text))
