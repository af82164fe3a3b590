"""Where a run's result files go: ``results/<vLLM release>/<group>/``.

Each session writes into a directory of its own, so no session replaces another's
results: a gate run never overwrites a full cell run, one vLLM release never another,
and a run inside a container image (which may crash) never a run on the host. The
report reads the whole tree and merges what it finds per cell.
"""

from __future__ import annotations

import re
from pathlib import Path

from matrix.releases import UNKNOWN_RELEASE


def _slug(text: str) -> str:
    """``text`` as one safe path component: a version or an image reference never climbs out of results/."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip(".-") or UNKNOWN_RELEASE


def run_dir(root: Path, release: str, group: str, image: str = "") -> Path:
    """The directory for one run's files under ``root``.

    ``group`` names the tests the session ran (``cell``, ``gate``, ``repro``, ``probe``);
    a run inside ``image`` gets a directory of its own beside the host's.
    """
    name = f"{group}@{_slug(image)}" if image else group
    return root / _slug(release) / name


# Where every GPU's result is kept, in the repository (matrix.store.evidence); relative to the kit's root.
EVIDENCE_STORE = Path("docs/evidence/runs")
# Within a store: its probe records (repro/probe/), by source; they name no vLLM release and no cell.
PROBES = "probes"
# And its engine-level benchmark records (matrix.store.engine_bench), by source, each named ``*<suffix>``.
ENGINE_BENCHES = "engine-bench"
ENGINE_BENCH_SUFFIX = ".engine-bench.json"
