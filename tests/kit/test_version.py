"""The kit's one version (matrix.__version__) is the one the newest CHANGELOG heading names.

That `--version` prints it is checked where each command runs as people run it: the checkout's on the system
Pythons (test_system_pythons.py), the installed wheel's `wslpin-doctor` in test_doctor_installed.py.
"""

from __future__ import annotations

import re

from conftest import ROOT

from matrix import __version__


def test_the_newest_changelog_entry_is_the_kits_version():
    headings = re.findall(r"^## (.*)$", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.MULTILINE)
    newest = re.fullmatch(r"(\d+\.\d+\.\d+) — \d{4}-\d{2}-\d{2}", headings[0])
    assert newest is not None, f"CHANGELOG.md's newest heading {headings[0]!r} is no `X.Y.Z — YYYY-MM-DD`"
    assert newest[1] == __version__, "move matrix/__init__.py's __version__ with CHANGELOG.md's newest heading"
