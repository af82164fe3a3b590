"""The probe's record: every section's result and the host it ran on, schema-versioned for the report."""

from __future__ import annotations

import datetime as dt

from matrix.host.classify import DetectedHost
from repro.probe.child import SectionResult

PROBE_SCHEMA = "wslpin-kit.probe/1"


def metrics_document(results: dict[str, SectionResult], here: DetectedHost) -> dict:
    """The probe's record; the host it ran on lets the report cite it per cell."""
    bandwidth = results.get("bandwidth")
    return {
        "schema": PROBE_SCHEMA,
        "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": here.to_json(),
        "bandwidth_table": bandwidth.metrics.get("rows", []) if bandwidth else [],
        "sections": {
            name: {
                "status": r.status,
                "seconds": r.seconds,
                "metrics": r.metrics,
                **({"message": r.message} if r.status != "ok" else {}),
            }
            for name, r in results.items()
        },
    }
