"""The vLLM WSL2 pinned-memory compatibility kit."""

import sys

# The doctor runs on the system Python from 3.8 (matrix/__main__.py says why); an older one, reading a module of
# the kit's, would stop at the first newer syntax with a traceback. Every entry (`python -m matrix`, the installed
# `wslpin-doctor`, an import) runs this module first, so it says which Python is needed in one line, written to
# parse on any Python (2.7 included): no f-string, no annotation.
if sys.version_info < (3, 8):  # noqa: UP036 - the check is for the Pythons the target version excludes
    import platform

    said = "error: the kit needs Python 3.8 or later (the doctor; 3.11 for its other commands), and this Python (%s)"
    # No f-string here: Python before 3.6 cannot parse one.
    sys.stderr.write(said % sys.executable + " is " + platform.python_version() + ": run it with python3.8 or later\n")  # noqa: UP031
    sys.exit(2)

# The kit's one version: the wheel's (pyproject.toml reads it here), `--version`'s, and the newest heading of
# CHANGELOG.md (tests/kit/test_version.py). Here and not from the installed metadata, which a checkout run as
# `python3 -m matrix` has none of.
__version__ = "0.3.1"
