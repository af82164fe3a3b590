"""The README's marked examples, made again by running their commands: `nox -s readme` writes them, `--check` compares.

    python3 tools/readme.py [--check] [--quick] [README]

A marked example is a console block right after a ``<!-- readme: run -->`` line; its first line is
``$ COMMAND``, which is run from the kit's root as a new user runs it: the system's ``python3`` (no
virtual environment on PATH), none of vLLM's variables set. The block becomes the command and what
it printed. ``--check`` writes nothing: it names each block whose output differs and exits 1 (0 when
all match, 2 for a README without a marked block or a command that fails), so CI fails on an example
that no longer says what the command prints. Figures of time (``56 s``, ``1 min 3 s``, ``12 ms``)
are compared as ``N s``: a run's speed is not what an example shows. A block marked ``run slow`` runs for
minutes (a whole nox session): ``--quick`` leaves those out. A mark's ``from "TEXT"`` shows only the part of the
output from the last line that starts with TEXT to the next blank line (a session's closing table). Standard
library only.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- readme: run -->"
# `<!-- readme: run slow, from "cell " -->`: a command of minutes (`--quick` leaves it out), of whose output the
# example shows the part from the last line that starts with the given text to the next blank line.
BLOCK = re.compile(
    r"<!-- readme: run(?P<slow> slow)?(?:, from \"(?P<start>[^\"\n]+)\")? -->"
    r"\n```console\n\$ (?P<command>[^\n]+)\n(?P<output>.*?)```",
    re.DOTALL,
)
TIME = re.compile(r"\b\d+(?:\.\d+)?\s*(?:min|ms|s)\b")
# What a new user's shell does not have: the variables the doctor reads, and the kit's own.
UNSET_PREFIXES = ("VLLM_", "WSLPIN_")


class ReadmeError(RuntimeError):
    """A README without a marked block, or a marked command that failed: one line for a person."""


@dataclass(frozen=True)
class Example:
    command: str
    output: str  # as the README shows it
    span: tuple[int, int]  # where the block is in the README's text
    slow: bool = False
    start: str | None = None  # the example shows the output from the last line starting with this

    @property
    def mark(self) -> str:
        slow = " slow" if self.slow else ""
        start = f', from "{self.start}"' if self.start else ""
        return f"<!-- readme: run{slow}{start} -->"

    def shown(self, printed: str) -> str:
        """What of ``printed`` the example shows: all of it, or the part its ``from`` names."""
        if self.start is None:
            return printed
        lines = printed.splitlines(keepends=True)
        first = max((i for i, line in enumerate(lines) if line.startswith(self.start)), default=None)
        if first is None:
            raise ReadmeError(f"`{self.command}` printed no line starting with {self.start!r}")
        part = []
        for line in lines[first:]:
            if not line.strip():
                break
            part.append(line)
        return "".join(part)


def examples(text: str) -> list[Example]:
    return [Example(m["command"], m["output"], m.span(), bool(m["slow"]), m["start"]) for m in BLOCK.finditer(text)]


def new_user_env(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` as a new user's shell has it: no virtual environment on PATH, no vLLM or kit variables."""
    venv = environ.get("VIRTUAL_ENV")
    path = [p for p in environ.get("PATH", "").split(os.pathsep) if not venv or not p.startswith(venv)]
    env = {k: v for k, v in environ.items() if not k.startswith(UNSET_PREFIXES) and k != "VIRTUAL_ENV"}
    return env | {"PATH": os.pathsep.join(path)}


def run(command: str, root: Path = ROOT) -> str:
    done = subprocess.run(
        shlex.split(command), cwd=root, env=new_user_env(dict(os.environ)), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ReadmeError(f"`{command}` exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def block(example: Example, output: str) -> str:
    return f"{example.mark}\n```console\n$ {example.command}\n{output}```"


def same(shown: str, printed: str) -> bool:
    return TIME.sub("N s", shown) == TIME.sub("N s", printed)


def main(argv: list[str]) -> int:
    check, quick = "--check" in argv, "--quick" in argv
    paths = [a for a in argv if a not in ("--check", "--quick")]
    readme = Path(paths[0]) if paths else ROOT / "README.md"
    text = readme.read_text()
    found = examples(text)
    try:
        if not found:
            raise ReadmeError(f"{readme} has no example marked {MARK}")
        found = [e for e in found if not (quick and e.slow)]
        printed = [e.shown(run(e.command)) for e in found]
    except ReadmeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stale = [e.command for e, out in zip(found, printed, strict=True) if not same(e.output, out)]
    if check:
        for command in stale:
            print(f"stale: the README's example of `{command}` is not what it prints now: run `nox -s readme`")
        return 1 if stale else 0
    for e, out in sorted(zip(found, printed, strict=True), key=lambda pair: pair[0].span, reverse=True):
        text = text[: e.span[0]] + block(e, out) + text[e.span[1] :]
    readme.write_text(text)
    print(f"{len(found)} example(s) run, {len(stale)} rewritten in {readme.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
