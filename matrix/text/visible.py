"""Text from the inputs as a reader should see it, in every output of the report, the summary and the CLI.

A runner executes a line of a job's log that starts with ``::`` (``::error``, ``::add-mask::``,
``::stop-commands::``), and its legacy form ``##[error]`` wherever it is in a line; and bidi controls,
zero-width, format and filler characters make a name read as another. So no input text may break a line,
none may hide or reorder what follows, and none may hold ``##[``: such characters are shown as their
escapes (the first ``#`` of ``##[`` as ``\\x23``). Standard library only: the CLI's error line uses it on a
bare Python.
"""

from __future__ import annotations

import re

# Besides C0 controls: DEL and C1 controls, and every character that shows nothing or changes how its
# neighbours show: Unicode's format characters (category Cf: soft hyphen, zero-width, bidi, the invisible
# operators, tag characters, ...), the line and paragraph separators, the combining grapheme joiner, the
# Hangul and Khmer fillers, the variation selectors, and lone surrogates (a file name's undecodable bytes),
# which no UTF-8 output can even hold. tests/kit/test_hostile_text.py checks this list
# against the Unicode database of the Python running it.
_UNSEEN = (
    "\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\u3164\ud800-\udfff\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2"
    "\U000110bd\U000110cd\U00013430-\U0001345f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef"
)
_LEGACY_COMMAND = "#(?=#\\[)"  # the runner's older command form, ``##[name]``, read anywhere in a line
_HIDDEN = re.compile(f"[\x00-\x1f{_UNSEEN}]|{_LEGACY_COMMAND}")
_HIDDEN_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_UNSEEN}]|{_LEGACY_COMMAND}")  # tab and line feed kept


def _escape(match: re.Match[str]) -> str:
    found = match.group()
    return "\\x23" if found == "#" else found.encode("unicode_escape").decode("ascii")


def visible(text: object) -> str:
    """``text`` on one line, every control, bidi and zero-width character shown as its escape (``\\n``, ``\\u202e``)."""
    return _HIDDEN.sub(_escape, str(text))


def visible_lines(text: object) -> str:
    """As ``visible``, but tabs and line feeds kept: for a page, where a line cannot be a runner's command."""
    return _HIDDEN_BUT_LINES.sub(_escape, str(text))
