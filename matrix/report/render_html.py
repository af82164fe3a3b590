"""index.html: the report as one self-contained page (no CDN, no fetch), readable at a glance; strips.svg.

Each grid cell shows its verdict as fill, glyph and word; hovering shows its
provenance, clicking opens the rest: the advice, each question's answer, the
status against the rules, the command that reproduces it and its failing tests.
The strips show each question's answers across releases, on the page and as an
image of their own. The page is templates/page.html.j2 over the view model, rendered
with autoescape, so every string from the inputs is text; its CSS and script are
template files inlined into it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from matrix.report.bandwidth import pinned_view
from matrix.report.model import Report
from matrix.report.view import Phrase, Style, build_view, spell
from matrix.text.visible import visible_lines
from matrix.variables import PIN_MEMORY


def _shown(value: object) -> object:
    """What the template prints: a value from the inputs unless this module marked it up, so nothing hidden."""
    return value if isinstance(value, Markup) else visible_lines(value)


def _text(value: str) -> Markup:
    return escape(visible_lines(value))


_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=True,
    finalize=_shown,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_MARKS = {
    Style.TEXT: _text,
    Style.CODE: lambda text: f"<code>{_text(text)}</code>",
    Style.STRONG: lambda text: f"<b>{_text(text)}</b>",
}


def _phrase(phrase: Phrase) -> Markup:
    return Markup(spell(phrase, _MARKS))


_TEMPLATES.filters["phrase"] = _phrase


def chunks(report: Report) -> Iterator[str]:
    """The page, piece by piece: a large report is written without ever holding it whole."""
    return _TEMPLATES.get_template("page.html.j2").generate(view=build_view(report), pin_variable=PIN_MEMORY.name)


def render(report: Report) -> str:
    return "".join(chunks(report))


def render_bandwidth(report: Report) -> str:
    """bandwidth.svg: each probe's copy bandwidth against transfer size, the picture the page also shows."""
    return _TEMPLATES.get_template("bandwidth.svg.j2").render(pinned=pinned_view(report), standalone=True)


def render_strips(report: Report) -> str:
    """strips.svg: each question's answer per cell across releases, the picture the page also shows."""
    return _TEMPLATES.get_template("strips.svg.j2").render(strips=build_view(report).strips, standalone=True)
