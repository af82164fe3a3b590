"""``python3 -m matrix`` run from ``docs/``: one line saying to run it from the kit's root.

Python resolves ``-m matrix`` from the current directory first, before any of the kit's code runs, and from
here that would be ``docs/matrix/`` (the published table, no Python in it), a namespace package: "No module
named matrix.__main__; 'matrix' is a package and cannot be directly executed". A module beside that directory
is found before it, so this one answers instead. Standard library only, as the system Python runs it (3.8+).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    again = " ".join(shlex.quote(arg) for arg in ["python3", "-m", "matrix", *sys.argv[1:]])
    print(f"error: run this from the kit's root: cd {shlex.quote(str(root))} && {again}", file=sys.stderr)
    sys.exit(2)
