"""``python -m repro.probe SECTION OUT.json``: the child's side of the protocol (``repro/probe/child.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

from repro.probe.child import write_answer

if __name__ == "__main__":
    sys.exit(write_answer(sys.argv[1], Path(sys.argv[2])))
