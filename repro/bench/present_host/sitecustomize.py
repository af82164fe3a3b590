"""Present the cell's WSL2 host in every Python process of an emulated benchmark arm.

``vllm serve`` decides about pinned memory in its engine-core process as well
as in the API server, and both start from this environment: Python imports
this file at start-up when its directory is on PYTHONPATH. The kit's own tests
run as a WSL2 machine through it too (``nox -s tests -- --as-host wsl2new``).
"""

import os
import sys
from pathlib import Path

# The name is matrix.variables.PRESENT_HOST's, which this hook cannot import before it has found the kit.
if os.environ.get("WSLPIN_PRESENT_HOST"):
    # The kit this file belongs to, last on the path: a server started outside the kit's
    # environment finds it, and a kit installed in that environment still comes first.
    sys.path.append(str(Path(__file__).resolve().parents[3]))

    from matrix.cells import Host
    from repro.emulation import present_host

    present_host(Host(os.environ["WSLPIN_PRESENT_HOST"]))
