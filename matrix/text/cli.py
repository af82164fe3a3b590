"""What ``python -m matrix`` and ``python -m repro`` share: a mistake is one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from matrix.errors import MatrixError
from matrix.text.visible import visible

KIT_ROOT = Path(__file__).resolve().parents[2]
# A module of the kit itself that fails to import is a bug: it keeps its traceback.
KIT_PACKAGES = ("matrix", "repro")


def missing_dependency(module: str) -> str:
    """What to do when this Python lacks a package a command imports."""
    return (
        f"this Python ({sys.executable}) has no module {module!r}: run the command with "
        f"{KIT_ROOT / '.nox' / 'tests' / 'bin' / 'python'} (made by `nox -s tests`), "
        f"or install the kit into this Python with `pip install -e '.[test]'` in {KIT_ROOT}"
    )


def run_command_line(build_parser: Callable[[], argparse.ArgumentParser], argv: list[str] | None) -> int:
    """Build the parser, parse, run the chosen command.

    A MatrixError, or a package this Python lacks, is one line on stderr and exit 2, never a traceback; a closed
    standard output ends the command quietly.
    Commands import third-party packages lazily, so this also covers the imports ``build_parser`` makes.
    """
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except BrokenPipeError:
        # The reader left (`doctor | head`): what was left to print has nowhere to go, and Python would say so
        # again at exit while flushing; exit as a command killed by SIGPIPE would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except MatrixError as exc:
        # The message may quote an input: on one line, so none of it can be a runner's command.
        print(f"error: {visible(exc)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] in KIT_PACKAGES:
            raise
        print(f"error: {missing_dependency(exc.name)}", file=sys.stderr)
        return 2
