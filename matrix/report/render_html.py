"""index.html: the report at a glance (no CDN, no fetch); a page per release beside it; strips.svg.

Each grid cell shows its verdict as fill, glyph and word; hovering shows its
provenance, clicking opens the advice, each question's answer and the status
against the rules. The rest of a release (each answer's why, the provenance, the
evidence, the command that reproduces it, its failing tests, the test × cell
detail) is on that release's own page, releases/<release>.html, which the glance
links: the glance stays about 20 KB a release, and every page works opened from a
file, where a script may not fetch. The strips show each question's answers across
releases, as an image of their own that the glance shows. The pages are
templates/*.html.j2 over the view model, rendered with autoescape, so every string
from the inputs is text; their CSS and script are template files inlined into them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from matrix.report.bandwidth import pinned_view
from matrix.report.compat_cases import cases_path, stem
from matrix.report.model import Report
from matrix.report.view import LISTED_CONTRADICTIONS, LOOKS, STRIPS_TITLE, Phrase, StatusLook, Style, build_view, spell
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


RELEASES_DIRECTORY = "releases"


def release_page(vllm: str, here: bool = False) -> str:
    """A release's page, relative to the glance (or ``here``: to another release's page beside it)."""
    name = f"{stem(vllm)}.html"
    return name if here else f"{RELEASES_DIRECTORY}/{name}"


_TEMPLATES.filters["phrase"] = _phrase
# A detail table's cell per status, spelled once: a release's table has a cell per test and cell of the matrix.
_DETAIL_CELLS = {id(look): f'<td title="{_text(look.word)}">{_text(look.glyph)}</td>' for look in LOOKS.values()}


def _detail_cells(looks: tuple[StatusLook | None, ...]) -> Markup:
    """A detail row's cells, one per cell of the matrix: its status's glyph, or nothing where it has no such test."""
    return Markup("".join(_DETAIL_CELLS[id(look)] if look else "<td></td>" for look in looks))


_TEMPLATES.filters["detail_cells"] = _detail_cells
_TEMPLATES.globals["release_page"] = release_page


def chunks(report: Report) -> Iterator[str]:
    """The glance, piece by piece: a large report is written without ever holding it whole."""
    return _TEMPLATES.get_template("page.html.j2").generate(
        view=build_view(report), pin_variable=PIN_MEMORY.name, strips_title=STRIPS_TITLE
    )


def render(report: Report) -> str:
    return "".join(chunks(report))


def release_chunks(report: Report, vllm: str) -> Iterator[str]:
    """A release's own page, piece by piece, built once its turn to be written comes."""
    view = build_view(report)
    template = _TEMPLATES.get_template("release.html.j2")
    yield from template.generate(
        view=view, release=view.release(vllm), cases=cases_path(vllm), listed_contradictions=LISTED_CONTRADICTIONS
    )


def render_release(report: Report, vllm: str) -> str:
    return "".join(release_chunks(report, vllm))


def pages(report: Report) -> dict[str, Iterator[str]]:
    """Every release's page by its path relative to the glance, each as the chunks it is written in."""
    return {release_page(vllm): release_chunks(report, vllm) for vllm in report.versions}


def render_bandwidth(report: Report) -> str:
    """bandwidth.svg: each probe's copy bandwidth against transfer size, the picture the page also shows."""
    return _TEMPLATES.get_template("bandwidth.svg.j2").render(pinned=pinned_view(report), standalone=True)


def render_strips(report: Report) -> str:
    """strips.svg: each question's answer per cell across releases, the picture the page also shows."""
    return _TEMPLATES.get_template("strips.svg.j2").render(strips=build_view(report).strips, standalone=True)
