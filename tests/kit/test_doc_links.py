"""Every relative link in the kit's own Markdown names a file of the repository, so a moved page cannot rot a link.

The published matrix (docs/matrix/) and the evidence (docs/evidence/) are generated or kept as they came: their
links are the report's and a run's, checked where those are made. Links to the web are not followed here.
"""

from __future__ import annotations

import re
import subprocess

from conftest import ROOT

# [text](target) and ![alt](target); a target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
GENERATED = ("docs/matrix/", "docs/evidence/")
# What a reader is sent to: none of it may name a scratch directory or a place outside the repository.
GUIDES = re.compile(r"^(README\.md|CONTRIBUTING\.md|docs/[^/]+\.md)$")
SCRATCH = re.compile(r"/tmp/[A-Za-z]")
# A relative path, in a link or in prose: the run of ../ that starts it says how far up it climbs.
CLIMB = re.compile(r"(?<![\w.])((?:\.\./)+)")


def points_outside(name: str, line: str) -> bool:
    """Whether ``line`` of the guide ``name`` names a scratch directory, or a path that climbs above the
    repository from the guide's own folder (a clone has nothing there)."""
    depth = name.count("/")
    return bool(SCRATCH.search(line)) or any(len(up) // 3 > depth for up in CLIMB.findall(line))


def tracked_markdown() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return sorted(name for name in listed.split("\0") if name and not name.startswith(GENERATED))


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", markdown, re.MULTILINE):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def broken_links(name: str) -> list[str]:
    source = ROOT / name
    text = source.read_text(encoding="utf-8")
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source.resolve()
        if ROOT.resolve() not in (resolved, *resolved.parents):
            broken.append(f"{name}: {target} points outside the repository")
        elif not resolved.exists():
            broken.append(f"{name}: {target} names no file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
            broken.append(f"{name}: {target} names no heading of {resolved.name}")
    return broken


def test_every_relative_link_in_the_kits_markdown_names_a_file_and_heading_that_exist():
    names = tracked_markdown()
    assert "README.md" in names and "CONTRIBUTING.md" in names and "docs/using.md" in names
    broken = [line for name in names for line in broken_links(name)]
    assert not broken, "\n".join(broken)


def test_no_guide_names_a_scratch_directory_or_a_place_outside_the_repository():
    guides = [name for name in tracked_markdown() if GUIDES.match(name)]
    found = [
        f"{name}:{number}: {line.strip()}"
        for name in guides
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
        if points_outside(name, line)
    ]
    assert not found, "\n".join(found)


def test_the_checks_find_what_they_look_for():
    page = ROOT / "docs" / "using.md"
    assert "reading-a-result" in anchors(page.read_text(encoding="utf-8"))
    assert "the-main-job-nox--s-wsl_cuda_graph" in anchors(page.read_text(encoding="utf-8"))
    assert LINK.findall("see [a](b.md#c) and ![d](e.png) but not [f] (g)") == ["b.md#c", "e.png"]
    assert points_outside("README.md", "see ../kit-notes/DESIGN.md") and points_outside("docs/a.md", "../../x/y")
    assert not points_outside("docs/a.md", "[back](../README.md)") and points_outside("README.md", "in /tmp/try/src")
    assert not points_outside("README.md", "/tmp/")
