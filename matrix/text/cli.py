"""What ``python -m matrix`` and ``python -m repro`` share: a mistake is one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import os
import platform
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


# The Python every command needs but the doctor, `env`, `plan` and `pipeline` (matrix/__main__.py says why those run
# on 3.8): the others import modules written for 3.11 (StrEnum, datetime.UTC, dataclass slots) and its packages.
KIT_PYTHON = (3, 11)


def require_kit_python(command: str) -> None:
    """One line naming the Python ``command`` needs, where this one is older: not the traceback of a 3.11 module."""
    if sys.version_info >= KIT_PYTHON:
        return
    needed = ".".join(map(str, KIT_PYTHON))
    raise MatrixError(
        f"`{command}` needs Python {needed} or later, and this Python ({sys.executable}) is "
        f"{platform.python_version()}: run it with {KIT_ROOT / '.nox' / 'tests' / 'bin' / 'python'} (made by "
        f"`nox -s tests`), or a Python {needed}+ with the kit installed (`pip install -e '.[test]'` in {KIT_ROOT}); "
        "the doctor, env, plan and pipeline run on Python 3.8 and later"
    )


def run_command_line(
    build_parser: Callable[[], argparse.ArgumentParser],
    argv: list[str] | None,
    check: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Build the parser, parse, ``check`` the arguments, run the chosen command.

    A MatrixError, or a package this Python lacks, is one line on stderr and exit 2, never a traceback; a closed
    standard output ends the command quietly.
    Commands import third-party packages lazily, so this also covers the imports ``build_parser`` makes.
    """
    try:
        args = build_parser().parse_args(argv)
        if check is not None:
            check(args)
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
