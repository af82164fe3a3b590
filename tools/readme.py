"""The documents' marked examples, made again by running their commands: `nox -s readme` writes, `--check` compares.

    python3 tools/readme.py [--check] [--quick] [FILE...]

Without a FILE it reads every document a reader is sent to: README.md, CONTRIBUTING.md and docs/*.md (not the
generated docs/matrix/ nor docs/evidence/). A marked example is a console block right after a
``<!-- readme: run -->`` line; its first line is ``$ COMMAND``, which is run from the kit's root as a new user
runs it: the system's ``python3`` (no virtual environment on PATH), none of vLLM's variables set. The block
becomes the command and what it printed. ``--check`` writes nothing: it names each block whose output differs,
with its file, and exits 1 (0 when all match, 2 when no document has a marked block, a FILE named has none, or a
command fails), so CI fails on an example that no longer says what the command prints. Figures of time
(``56 s``, ``1 min 3 s``, ``12 ms``) are compared as ``N s``: a run's speed is not what an example shows. A
block marked ``run slow`` runs for minutes (a whole nox session): ``--quick`` leaves those out. A mark's
``from "TEXT"`` shows only the part of the output from the last line that starts with TEXT to the next blank
line (a session's closing table). Standard library only.
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
    """No marked block where one was asked for, or a marked command that failed: one line for a person."""


@dataclass(frozen=True)
class Example:
    command: str
    output: str  # as the document shows it
    span: tuple[int, int]  # where the block is in the document's text
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


def documents(root: Path = ROOT) -> list[Path]:
    """Every document a reader is sent to, where marked examples may be: README.md, CONTRIBUTING.md, docs/*.md."""
    named = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
    return [path for path in named if path.is_file()]


def shown_name(path: Path, root: Path = ROOT) -> str:
    """The document as a person finds it: relative to the kit's root, or its own name elsewhere."""
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return path.name


def main(argv: list[str]) -> int:
    check, quick = "--check" in argv, "--quick" in argv
    named = [Path(a) for a in argv if a not in ("--check", "--quick")]
    paths = named or documents()
    texts = {path: path.read_text() for path in paths}
    found = {path: examples(text) for path, text in texts.items()}
    try:
        for path in named:
            if not found[path]:
                raise ReadmeError(f"{shown_name(path)} has no example marked {MARK}")
        if not any(found.values()):
            raise ReadmeError(f"none of {', '.join(shown_name(p) for p in paths)} has an example marked {MARK}")
        found = {path: [e for e in ex if not (quick and e.slow)] for path, ex in found.items()}
        printed = {path: [e.shown(run(e.command)) for e in ex] for path, ex in found.items()}
    except ReadmeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stale = {
        path: [e for e, out in zip(ex, printed[path], strict=True) if not same(e.output, out)]
        for path, ex in found.items()
    }
    if check:
        for path, examples_ in stale.items():
            for e in examples_:
                print(
                    f"stale: {shown_name(path)}'s example of `{e.command}` is not what it prints now: "
                    "run `nox -s readme`"
                )
        return 1 if any(stale.values()) else 0
    for path, ex in found.items():
        if not ex:
            continue
        text = texts[path]
        for e, out in sorted(zip(ex, printed[path], strict=True), key=lambda pair: pair[0].span, reverse=True):
            text = text[: e.span[0]] + block(e, out) + text[e.span[1] :]
        if text != texts[path]:
            path.write_text(text)
        print(f"{len(ex)} example(s) run, {len(stale[path])} rewritten in {shown_name(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
