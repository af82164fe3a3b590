"""The probe's record: every section's result and the host it ran on, schema-versioned for the report."""

from __future__ import annotations

import datetime as dt

from matrix.host.classify import DetectedHost
from repro.probe.child import SectionResult

PROBE_SCHEMA = "wslpin-kit.probe/1"


def host_of(here: DetectedHost) -> dict[str, str]:
    """The probe record's description of the host it ran on."""
    return {
        "stack": here.stack.value if here.stack else "none",
        "host": here.host.value,
        "gpu": here.gpu,
        "kernel": ".".join(map(str, here.kernel or ())),
    }


def metrics_document(results: dict[str, SectionResult], host: dict[str, str]) -> dict:
    """The probe's record; ``host`` (stack, host, gpu, driver, kernel) lets the report cite it per cell."""
    bandwidth = results.get("bandwidth")
    return {
        "schema": PROBE_SCHEMA,
        "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": host,
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
