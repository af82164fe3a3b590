"""Looking at the page in a real browser: Debian's headless Chromium, driven from the command line.

Chromium prints the page's console to stderr (``--enable-logging=stderr``) and
the DOM after its scripts ran (``--dump-dom``), which is all the checks need.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# No background traffic: this machine has no network, and the page must need none.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--hide-scrollbars",
)
_CONSOLE = re.compile(r":(INFO|WARNING|ERROR):CONSOLE[:(]\d*\)?\] \"(?P<text>.*)\", source: (?P<source>\S*)")


class BrowserMissingError(RuntimeError):
    pass


@dataclass(frozen=True)
class PageLoad:
    dom: str
    console: list[str]  # every console message, errors and uncaught exceptions included


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise BrowserMissingError("no Chromium on PATH: install Debian's package (apt-get install chromium)")


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="wslpin-chromium-") as profile:
        return subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def load(url: str, timeout: float = 120) -> PageLoad:
    done = _run(["--enable-logging=stderr", "--v=0", "--dump-dom", url], timeout)
    console = [m.group("text") for m in _CONSOLE.finditer(done.stderr)]
    return PageLoad(done.stdout, console)


def screenshot(url: str, out: Path, width: int = 1400, height: int = 1000, timeout: float = 120) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _run([f"--window-size={width},{height}", f"--screenshot={out.resolve()}", url], timeout)
    if not out.exists():
        raise RuntimeError(f"Chromium wrote no screenshot (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    return out
