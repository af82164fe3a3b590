"""What a section's metrics must show on a working platform, per GPU stack (research: "Measured mechanism facts")."""

from __future__ import annotations

from matrix.cells import Stack
from repro.probe.sections import SECTIONS, SIZES

# Every fact was measured on CUDA (an H200). On ROCm only what torch itself promises on any GPU
# is judged: pinned memory is pinned, copies from it are timed, a non-blocking copy from it is
# captured and replayed. How the runtime refuses or invalidates a capture, whether it gives a
# device pointer for pageable memory, and what the A/B resolves were never measured there.
JUDGED = {
    Stack.CUDA: frozenset(SECTIONS),
    Stack.ROCM: frozenset({"pin_alloc", "bandwidth", "capture_pinned_non_blocking"}),
}


def judged(section: str, stack: Stack) -> bool:
    """Whether the kit knows what ``section`` must show on ``stack``; otherwise its metrics are only recorded."""
    return section in JUDGED[stack]


def _fact(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)


def check_facts(section: str, m: dict) -> None:
    """What the mechanism does on a working CUDA platform; ``judged`` says which of it holds on another stack."""
    if section == "bandwidth":
        _fact(len(m["rows"]) == len(SIZES), f"bandwidth table has {len(m['rows'])} sizes, expected {len(SIZES)}")
        _fact(all(r["pinned_h2d_gbs"] > 0 for r in m["rows"]), "a pinned host-to-device copy measured no bandwidth")
    elif section == "capture_pinned_non_blocking":
        _fact(m["captured"], f"a non-blocking copy from pinned memory must be capturable: {m.get('error')}")
        _fact(m["replay_reads_current_host"], "a replayed graph must copy the host's current contents")
    elif section == "capture_pinned_blocking":
        _fact(
            not m["captured"] and m["kind"] == "capture-invalidated",
            f"a blocking pinned copy should invalidate the capture; got {m}",
        )
    elif section.startswith("capture_pageable"):
        _fact(
            not m["captured"] and m["kind"] == "pageable-copy-in-capture",
            f"torch must refuse to capture a copy from pageable memory; got {m}",
        )
    elif section == "uva_view":
        _fact(m["replay_sees_host_updates"], "the zero-copy view did not follow host updates")
    elif section == "uva_pageable_refused":
        _fact(m["refused"], "a device pointer for pageable memory must be refused")
    elif section == "offload_step":
        _fact(
            "graph_ms" in m["resident"] and "graph_ms" in m["pinned_copy"],
            f"resident and pinned-copy steps must capture: {m}",
        )
        _fact(
            m["pageable_copy"].get("graph_error_kind") == "pageable-copy-in-capture",
            f"the pageable-copy step must be refused by graph capture: {m['pageable_copy']}",
        )
    elif section == "offload_step_ab":
        pinned_vs_pageable = m["comparisons"][0]
        _fact(
            pinned_vs_pageable.get("resolved") and pinned_vs_pageable["relative"] < 0,
            f"a pinned copy must be resolved as faster than a pageable one: {pinned_vs_pageable.get('verdict')}",
        )
        _fact(m["seconds"] < 60, f"the A/B must resolve within a minute of GPU time; it took {m['seconds']} s")
