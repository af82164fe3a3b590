"""Text from the inputs never starts a line of the CLI's output, where a GitHub runner would execute it
as a workflow command, and bidi or zero-width characters show as escapes in every output.

The inputs are JUnit files as a runner could write them: a release, a cell property, a test name
and an observed value that hold line breaks, workflow commands and invisible characters."""

import json
import re
import unicodedata
from html import unescape
from pathlib import Path

import pytest
from compat_file import compat_document
from conftest import run_module

CELL = "cuda-linux-v1-graph"
# As XML character references: a raw line break in an attribute would be read as a space.
# The runner also reads its legacy form, ##[command], anywhere in a line (not only at its start).
HOSTILE = (
    "x&#10;::error::pwned&#13;::add-mask::x&#10;  ::stop-commands::tok&#x202E;gpj.exe&#x200B; ##[error]legacy"
    " ###[add-mask]y&#xAD;&#xE0041;&#x3164;&#xFE0F;"
)
COMMANDS = ("::error::pwned", "::add-mask::x", "::stop-commands::tok")
UNSEEN = {
    "\u202e": "\\u202e",
    "\u200b": "\\u200b",
    "\xad": "\\xad",  # soft hyphen
    "\U000e0041": "\\U000e0041",  # a tag character
    "\u3164": "\\u3164",  # Hangul filler
    "\ufe0f": "\\ufe0f",  # variation selector
}


def hostile_results(folder: Path) -> Path:
    """One cell's result file: its release, GPU, a gate value and a failing test's name are hostile."""
    folder.mkdir()
    props = {
        "cell_id": CELL,
        "vllm_version": f"0.33.0{HOSTILE}",
        "execution": "gate-only",
        "started_at": "2026-11-29T12:00:00+00:00",
        "gpu": f"GPU{HOSTILE}",
    }
    envelope = "".join(f'<property name="{k}" value="{v}"/>' for k, v in props.items())
    observed = (
        '<properties><property name="gate_key" value="pin"/><property name="pin_env" value="unset"/>'
        f'<property name="observed" value="{HOSTILE}"/></properties>'
    )
    cases = (
        f'<testcase classname="t" name="test_{HOSTILE}"><failure message="m{HOSTILE}"/></testcase>'
        f'<testcase classname="tests.cell.test_gate" name="test_gate_pin">{observed}</testcase>'
    )
    (folder / f"{CELL}.xml").write_text(
        f'<testsuites><testsuite name="{CELL}"><properties>{envelope}</properties>{cases}</testsuite></testsuites>'
    )
    return folder


def assert_nothing_runs_or_hides(text: str) -> None:
    commands = [line for line in text.splitlines() if line.lstrip().startswith("::") or "##[" in line]
    assert commands == []
    assert [ch for ch in UNSEEN if ch in text] == []


def test_the_report_prints_no_workflow_command_and_shows_hidden_characters(tmp_path):
    out = tmp_path / "out"
    done = run_module("matrix", "report", str(hostile_results(tmp_path / "in")), "--out", str(out))
    assert done.returncode == 1, done.stderr  # the failing test is a regression
    for printed in (done.stdout, done.stderr):
        assert_nothing_runs_or_hides(printed)
        assert all(command in printed for command in COMMANDS), printed  # shown, as text
        assert all(escape in printed for escape in UNSEEN.values())
    # Markdown writes the escape's backslash as an entity, so that it is not taken for markup.
    for page, backslash in (("COMPATIBILITY.md", "&#92;"), ("index.html", "\\"), ("strips.svg", "\\")):
        text = (out / page).read_text()
        assert [ch for ch in UNSEEN if ch in text] == [], page
        assert all(escape.replace("\\", backslash) in text for escape in UNSEEN.values()), page
    assert_nothing_runs_or_hides((out / "COMPATIBILITY.md").read_text())


def test_the_summary_prints_no_workflow_command(tmp_path):
    done = run_module("matrix", "summary", "--cell", CELL, "--results", str(hostile_results(tmp_path / "in")))
    assert done.returncode == 0, done.stderr
    assert_nothing_runs_or_hides(done.stdout + done.stderr)
    assert "FAILED" in done.stdout and all(command in done.stdout for command in COMMANDS)


def test_an_error_quoting_an_input_is_one_line(tmp_path):
    results = tmp_path / "r\n::error::pwned\u202e"
    results.mkdir()
    done = run_module("matrix", "summary", "--cell", CELL, "--results", str(results))
    assert done.returncode == 2
    assert_nothing_runs_or_hides(done.stderr)
    assert done.stderr.startswith("error: no result for") and done.stderr.count("\n") == 1


@pytest.mark.reads_host
def test_the_doctor_prints_no_workflow_command_from_a_matrix_or_a_variable(tmp_path):
    """A --matrix is anyone's file, and the opt-in variable's value anyone's text: the doctor shows both inertly."""
    raw = (
        HOSTILE.replace("&#10;", "\n")
        .replace("&#13;", "\r")
        .replace("&#x202E;", "\u202e")
        .replace("&#x200B;", "\u200b")
    )
    document = compat_document()
    for cell in document["versions"][0]["cells"]:
        for verdict in cell["verdicts"].values():
            verdict["advice"], verdict["why"] = f"advice{raw}", f"why{raw}"
        cell["evidence"] = [f"evidence{raw}"]
    matrix = tmp_path / "compat.json"
    matrix.write_text(json.dumps(document))
    done = run_module(
        "matrix",
        "doctor",
        "--matrix",
        str(matrix),
        "--stack",
        "cuda",
        "--kernel",
        "6.6.87.2-microsoft-standard-WSL2",
        "--vllm",
        "0.33.0",
        "--runner",
        "v2",
        env={"VLLM_WSL2_ENABLE_PIN_MEMORY": f"1{raw}"},
    )
    assert done.returncode == 0, done.stderr
    assert_nothing_runs_or_hides(done.stdout + done.stderr)
    assert all(command in done.stdout for command in COMMANDS), done.stdout


def test_every_character_that_shows_nothing_is_escaped_and_printable_text_is_kept():
    # Against this Python's Unicode database: controls, format characters (Cf), line and paragraph separators,
    # and the fillers and selectors that are letters or marks to Unicode but show nothing.
    from matrix.text.visible import visible

    fillers = [0x34F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]
    unseen = [c for c in range(0x110000) if unicodedata.category(chr(c)) in ("Cc", "Cf", "Cs", "Zl", "Zp")] + fillers
    assert [hex(c) for c in unseen if visible(chr(c)) == chr(c)] == []
    kept = "vLLM 0.33.0 · ✔ works — «NVIDIA H200» café 日本語 # #[x] ## [y] C#"
    assert visible(kept) == kept
    assert visible("##[error]x ###[y]") == "\\x23#[error]x #\\x23#[y]"


# Addresses GitHub would make links of in a summary, each alone and inside other text.
ADDRESSES = (
    "https://evil.example/x",
    "HTTP://evil.example",
    "ftp://evil.example",
    "www.evil.example/y",
    "WWW.evil.example",
    "user@evil.example",
    "mailto:user@evil.example",
    "xmpp:user@evil.example",
)


@pytest.mark.parametrize("address", ADDRESSES)
def test_an_address_in_an_input_is_no_link_in_the_summary(address):
    import cmarkgfm
    from cmarkgfm.cmark import Options

    from matrix.report.render_md import md

    for text in (address, f"see {address} now", f"({address})"):
        table = f"| cell | reason |\n|---|---|\n| x | {md(text)} |\n"
        # Unsafe: the summary's own HTML (<code>, <span>) kept, as GitHub keeps it, to see every element.
        html = cmarkgfm.github_flavored_markdown_to_html(table, options=Options.CMARK_OPT_UNSAFE)
        assert "<a " not in html, html
        shown = re.sub(r"<[^>]+>", "", html.split("<td>x</td>")[1].split("</tr>")[0]).strip()
        assert unescape(shown) == text, html  # shown as it was written
