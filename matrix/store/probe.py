"""The probe's record (``repro/probe.py``'s metrics document): the bare-torch run on a GPU host, read back.

The report shows it beside a cell's results and the evidence store keeps it; both read it here, schema checked
(matrix/io/schemas/probe.schema.json), with the standard library and jsonschema alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from matrix.io.json_input import PROBE, read_json_input


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """One transfer size of a probe's bandwidth section: GB/s each way, from pinned and from pageable memory."""

    bytes: int
    pinned_h2d_gbs: float
    pinned_d2h_gbs: float
    pageable_h2d_gbs: float
    pageable_d2h_gbs: float


@dataclass(frozen=True, slots=True)
class Probe:
    """A bare-torch probe run recorded on some GPU host (repro/probe.py's metrics document)."""

    path: str
    stack: str
    host: str
    gpu: str
    collected_at: str
    passed: bool
    bandwidth: tuple[Bandwidth, ...] = ()  # smallest transfer first; empty where the section did not run
    # The interleaved offload-step A/B (pinned vs pageable copy, UVA vs pinned copy), one sentence per comparison.
    offload_step: tuple[str, ...] = ()


def read_probe(path: Path) -> Probe:
    """The one reader of a probe record: its schema checked, a bad one refused in one line."""
    data = read_json_input(path, PROBE)
    host = data["host"]
    passed = all(s["status"] in ("ok", "skipped") for s in data["sections"].values())
    # A record before DetectedHost.to_json wrote "none" for a machine without a GPU stack, one since writes null.
    stack = host["stack"] or "none"
    bandwidth = tuple(
        sorted(
            (Bandwidth(**{name: row[name] for name in Bandwidth.__slots__}) for row in data.get("bandwidth_table", [])),
            key=lambda row: row.bytes,
        )
    )
    ab = data["sections"].get("offload_step_ab", {})
    verdicts = tuple(c["verdict"] for c in ab.get("metrics", {}).get("comparisons", []) if ab.get("status") == "ok")
    collected = data.get("collected_at", "")
    return Probe(str(path), stack, host["host"], host.get("gpu", "?"), collected, passed, bandwidth, verdicts)


def load_probes(directory: str | None) -> list[Probe]:
    """The probe records of ``directory`` and the folders under it (the evidence store keeps them by source)."""
    if not directory or not Path(directory).is_dir():
        return []
    return [read_probe(path) for path in sorted(Path(directory).rglob("*.json"))]
