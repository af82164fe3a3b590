"""The page's "Does it work on my set-up?" chooser, clicked in Debian's headless Chromium through Playwright."""

from __future__ import annotations

import itertools
from pathlib import Path
from xml.etree import ElementTree

import pytest
from builders import NOW, gate_case, write_suite
from markupsafe import escape

from matrix.cells import CELLS, Cell
from matrix.report import render_html
from matrix.report.model import Report, build_report
from matrix.report.outputs import report_outputs, write_outputs
from matrix.report.view import build_view
from matrix.text.words import HOST_NAMES

OLDER, NEWER = "0.29.0", "0.30.0"
CHOSEN = "cuda-wsl2new-v2-graph"


def suite(tmp_path: Path, vllm: str, cell: str, **observed: tuple[str, str]) -> Path:
    """A cell's gate results: each key observed with the variable unset, then =1."""
    cases = [
        gate_case(f"{key}-{pin}", key, pin, value)
        for key, pair in observed.items()
        for pin, value in zip(("unset", "1"), pair, strict=True)
    ]
    return write_suite(tmp_path / f"{vllm}-{cell}.xml", cell, cases, vllm=vllm)


def two_releases(tmp_path: Path) -> Report:
    """The chosen cell broken in the older release (vLLM does not import), needing the opt-in in the newer;
    native Linux works in the newer."""
    files = [
        suite(tmp_path, OLDER, CHOSEN, imports=("False", "False"), pin=("False", "True")),
        suite(
            tmp_path,
            NEWER,
            CHOSEN,
            imports=("True", "True"),
            pin=("False", "True"),
            v2_buffer=("NonUvaBuffer", "UvaBuffer"),
            offload_path=("pageable-copy", "uva"),
        ),
        suite(tmp_path, NEWER, "cuda-linux-v2-graph", imports=("True", "True"), pin=("True", "True")),
    ]
    return build_report([str(f) for f in files], kit_commit="t", now=NOW)


def answers(report: Report) -> dict[tuple[str, str], tuple[str, str]]:
    """(release, cell id): (the one-sentence answer, the verdict), from the view model."""
    return {
        (release.vllm, cell.id): (cell.answer, cell.verdict.word)
        for release in build_view(report).releases()
        for row in release.rows
        for cell in row.cells
    }


def test_the_choosers_selects_come_from_the_matrix_axes_and_the_reports_releases(tmp_path):
    chooser = build_view(two_releases(tmp_path)).chooser
    ids = {"-".join(parts) for parts in itertools.product(*[[v for v, _ in choice.options] for choice in chooser.axes])}
    assert ids == {c.id for c in CELLS}
    assert [value for value, _ in chooser.release.options] == [NEWER, OLDER]  # newest first
    host = next(choice for choice in chooser.axes if choice.name == "host")
    assert [words for _, words in host.options] == list(HOST_NAMES.values())
    report = two_releases(tmp_path)
    page = render_html.render(report)
    assert page.index('<form id="setup"') < page.index('<table class="grid"')
    # The chooser reads each sentence from its cell: the page holds each once.
    assert page.count(str(escape(answers(report)[(NEWER, CHOSEN)][0]))) == 1


def page_of(tmp_path: Path) -> tuple[Path, dict[tuple[str, str], tuple[str, str]]]:
    """The two releases' report written as the report command writes it (index.html, the pages and images it
    loads and links), and what it answers per (release, cell id)."""
    report = two_releases(tmp_path)
    write_outputs(tmp_path, report_outputs(report))
    return tmp_path / "index.html", answers(report)


@pytest.fixture
def chromium_page():
    """A Playwright page in Debian's Chromium (no browser download), and the console messages it logs."""
    from matrix.ci import browser

    try:
        executable = browser.chromium()
    except browser.BrowserMissingError as exc:
        pytest.skip(f"{exc} (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=executable, args=[flag for flag in browser.FLAGS if flag != "--headless"]
        )
        try:
            page = chromium.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(30_000)
            console: list[str] = []
            page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
            page.on("pageerror", lambda error: console.append(f"uncaught: {error}"))
            yield page, console
        finally:
            chromium.close()


@pytest.mark.browser
def test_the_chooser_answers_with_the_chosen_cells_sentence_in_chromium(tmp_path, chromium_page):
    from playwright.sync_api import expect

    page, console = chromium_page
    index, said = page_of(tmp_path)
    assert said[(OLDER, CHOSEN)][1] != said[(NEWER, CHOSEN)][1]  # the releases differ for this set-up
    page.goto(index.as_uri())

    answer = page.locator("#setup-answer")
    page.locator("#setup-stack").select_option("cuda")
    page.locator("#setup-host").select_option(label=HOST_NAMES[Cell.parse(CHOSEN).host])
    page.locator("#setup-runner").select_option("v2")
    page.locator("#setup-mode").select_option("graph")
    page.locator("#setup-release").select_option(OLDER)
    expect(answer).to_have_text(said[(OLDER, CHOSEN)][0])
    assert answer.text_content() == said[(OLDER, CHOSEN)][0]
    expect(page.locator("p.answer")).to_have_attribute("data-verdict", said[(OLDER, CHOSEN)][1])
    # The grid follows: the older release is shown, and the chosen cell highlighted in it.
    expect(page.locator("#release")).to_have_value(OLDER)
    expect(page.locator(f'section.release[data-release="{NEWER}"]')).to_be_hidden()
    chosen = page.locator("td.cell[aria-current=true]")
    expect(chosen).to_have_count(1)
    assert chosen.get_attribute("data-cell") == CHOSEN
    assert chosen.evaluate("td => td.closest('section').getAttribute('data-release')") == OLDER

    # One select changed: the sentence changes at once.
    page.locator("#setup-release").select_option(NEWER)
    expect(answer).to_have_text(said[(NEWER, CHOSEN)][0])
    assert said[(NEWER, CHOSEN)][0] != said[(OLDER, CHOSEN)][0]
    expect(page.locator("#release")).to_have_value(NEWER)
    page.locator("#setup-host").select_option("linux")
    expect(answer).to_have_text(said[(NEWER, "cuda-linux-v2-graph")][0])

    # The link goes to the cell in the grid, and is the set-up's own link.
    page.locator("#setup-link").click()
    expect(page.locator("td.cell[aria-current=true]")).to_be_in_viewport()
    assert page.evaluate("location.hash") == f"#setup=cuda-linux-v2-graph&release={NEWER}"

    # The rest of the cell is on its release's page, opened from the file as the glance links it.
    cell = page.locator("td.cell[aria-current=true]")
    cell.locator("summary").click()
    cell.locator("a.more").click()
    expect(page).to_have_url(f"{(tmp_path / 'releases' / NEWER).as_uri()}.html#cuda-linux-v2-graph")
    target = page.locator("td.cell:target")
    expect(target).to_have_attribute("data-cell", "cuda-linux-v2-graph")
    target.locator("summary").click()
    expect(target.locator("code").last).to_have_text('nox -s "cell(cuda, linux, v2, graph)" -- --vllm 0.30.0')
    expect(page.locator("td.cell")).to_have_count(24)
    assert console == []


@pytest.mark.browser
def test_a_link_presets_the_chooser_and_the_status_filter_still_works(tmp_path, chromium_page):
    from playwright.sync_api import expect

    page, console = chromium_page
    index, said = page_of(tmp_path)
    page.goto(f"{index.as_uri()}#setup={CHOSEN}&release={OLDER}&status=pass")
    expect(page.locator("#setup-answer")).to_have_text(said[(OLDER, CHOSEN)][0])
    expect(page.locator("#setup-host")).to_have_value("wsl2new")
    expect(page.locator("#release")).to_have_value(OLDER)
    expect(page.locator('.filter input[value="pass"]')).to_be_checked()
    expect(page.locator('.filter input[value="missing"]')).not_to_be_checked()
    # The grid's own release select moves the chooser with it.
    page.locator("#release").select_option(NEWER)
    expect(page.locator("#setup-release")).to_have_value(NEWER)
    expect(page.locator("#setup-answer")).to_have_text(said[(NEWER, CHOSEN)][0])
    assert console == []


@pytest.mark.browser
def test_a_link_with_a_malformed_hash_leaves_the_page_working(tmp_path, chromium_page):
    """Anyone can send a link: a value that is not percent-encoding (#status=%), or a release the page lacks,
    counts as absent, and the filter, the release select and the chooser still work."""
    from playwright.sync_api import expect

    page, console = chromium_page
    index, said = page_of(tmp_path)
    page.goto(f"{index.as_uri()}#status=%&release=%E0%A4%A&setup=%zz")
    expect(page.locator("#release")).to_have_value(NEWER)  # the newest, as with no link
    expect(page.locator('.filter input[value="pass"]')).to_be_checked()
    page.locator("#setup-host").select_option("wsl2new")
    page.locator("#setup-runner").select_option("v2")
    page.locator("#setup-release").select_option(OLDER)
    expect(page.locator("#setup-answer")).to_have_text(said[(OLDER, CHOSEN)][0])
    page.locator('.filter input[value="pass"]').uncheck()
    expect(page.locator('td.cell[data-status="pass"]').first).to_have_class("cell dim")
    page.goto(f"{index.as_uri()}#release=0.0.1")
    page.reload()  # the same document with another hash is not loaded again by itself
    expect(page.locator(f'section.release[data-release="{NEWER}"]')).to_be_visible()
    assert console == []


def _rgb(css: str) -> tuple[int, int, int]:
    """``rgb(r, g, b)`` as Chromium computes a colour."""
    r, g, b = (int(x) for x in css[css.index("(") + 1 : css.index(")")].split(",")[:3])
    return r, g, b


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#{:02X}{:02X}{:02X}".format(*rgb)


def _from_hex(colour: str) -> tuple[int, int, int]:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return r, g, b


def _lab(rgb: tuple[int, int, int]) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB colour."""

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c / 255) for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _distance(one: tuple[int, int, int], other: tuple[int, int, int]) -> float:
    return sum((p - q) ** 2 for p, q in zip(_lab(one), _lab(other), strict=True)) ** 0.5


# Every element's painted colours as Chromium computes them: its fill, and its left border where it has one.
PAINTED = """() => Array.from(document.querySelectorAll('body *')).flatMap(el => {
  const style = getComputedStyle(el), found = [];
  if (style.backgroundColor !== 'rgba(0, 0, 0, 0)') found.push(['fill', style.backgroundColor]);
  if (parseFloat(style.borderLeftWidth) >= 4) found.push(['border', style.borderLeftColor]);
  return found.map(([how, colour]) => [how, colour, el.tagName.toLowerCase(), el.className.baseVal ?? el.className,
    el.getAttribute('data-verdict') || (el.closest('[data-verdict]') || el).getAttribute('data-verdict') || '']);
})"""


@pytest.mark.browser
def test_verdicts_and_statuses_wear_two_palettes_that_cannot_be_taken_for_each_other(tmp_path, chromium_page):
    """A cell is filled with its verdict's colour, which the verdict legend shows; status colours appear only on
    status lines (the filter, a cell's status inside it); no verdict colour is near any status colour."""
    from matrix.report.view import LOOKS, STATUS_VERDICT_DISTANCE, VERDICT_LOOKS

    page, console = chromium_page
    index, said = page_of(tmp_path)
    page.goto(index.as_uri())
    painted = page.evaluate(PAINTED)
    verdict_colours = {look.word: look.colour for look in VERDICT_LOOKS.values()}
    status_colours = {look.colour for look in LOOKS.values()}

    cells = [(colour, verdict) for how, colour, tag, cls, verdict in painted if tag == "td" and "cell" in cls.split()]
    assert len(cells) == 2 * 24
    assert {(_hex(_rgb(colour)), verdict) for colour, verdict in cells} == {
        (verdict_colours[verdict], verdict) for _, verdict in cells
    }
    legend = {_hex(_rgb(c)) for how, c, tag, cls, _ in painted if tag == "li" and how == "border"}
    assert legend == set(verdict_colours.values())  # the verdict legend shows every fill, and only those
    in_status_colours = [(tag, cls) for how, c, tag, cls, _ in painted if _hex(_rgb(c)) in status_colours]
    assert in_status_colours and all("status" in cls.split() for _, cls in in_status_colours), in_status_colours
    nearest = min(_distance(_from_hex(v), _from_hex(s)) for v in verdict_colours.values() for s in status_colours)
    assert nearest >= STATUS_VERDICT_DISTANCE, nearest

    # At a glance each cell is one glyph and one word, its verdict's; the rest opens on click.
    chosen = page.locator(f'section.release[data-release="{NEWER}"] td.cell[data-cell="{CHOSEN}"]')
    verdict = said[(NEWER, CHOSEN)][1]
    glyph = next(look.glyph for look in VERDICT_LOOKS.values() if look.word == verdict)
    assert chosen.inner_text().strip() == f"{glyph} {verdict}"
    chosen.locator("summary").click()
    assert "status: " in chosen.inner_text() and said[(NEWER, CHOSEN)][0] in chosen.inner_text()
    assert console == []


def test_the_strips_show_each_questions_answer_per_cell_and_release_oldest_first(tmp_path):
    """strips.svg (also inlined in the page): per question, 24 rows of cells, a column per release, each mark
    filled with its verdict's colour and titled with the cell, the release and the answer."""
    from matrix.report.view import QUESTION_NAMES, VERDICT_LOOKS, Question

    report = two_releases(tmp_path)
    svg = ElementTree.fromstring(render_html.render_strips(report))
    ns = {"s": "http://www.w3.org/2000/svg"}
    strips = svg.findall("s:g[@class='strip']", ns)
    assert [s.find("s:text", ns).text for s in strips] == [QUESTION_NAMES[q] for q in Question]
    verdicts = {look.word: look.colour for look in VERDICT_LOOKS.values()}
    said = answers(report)
    for strip in strips:
        labels = [t.text for t in strip.findall("s:text", ns)[1:]]
        assert labels == [OLDER, NEWER]  # oldest first
        marks = strip.findall(".//s:rect[@class='mark']", ns)
        assert len(marks) == 24 * 2  # every cell has an answer in every release, "unknown" where it has no result
        for mark in marks:
            assert mark.get("fill") == verdicts[mark.get("data-verdict")]
    engine = strips[0]
    titles = [g.find("s:title", ns).text for g in engine.findall("s:g", ns)]
    assert f"{CHOSEN}, vLLM {OLDER}: engine start {said[(OLDER, CHOSEN)][1]}" in " ".join(titles)
