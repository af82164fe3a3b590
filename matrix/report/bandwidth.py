"""What pinned memory buys, as the probes measured it: each probe's bandwidth table in words, and its picture.

The probe (repro/probe/) copies 4 KiB to 1 GiB between host and device from pinned and from pageable memory;
this module turns each record's table into the rows the page and COMPATIBILITY.md print and the geometry of
bandwidth.svg (transfer size on a log axis, GB/s on a linear one, one curve per memory kind and direction).
Every word and number format of that section is here; the templates only place them.
"""

from __future__ import annotations

import math
from pathlib import Path
from dataclasses import dataclass

from matrix.report.model import Bandwidth, Probe, Report
from matrix.words import HOST_NAMES, STACK_NAMES

TITLE = "What pinned memory buys: host-device copies, pinned against pageable"
INTRO = (
    "Measured by the kit's bare-torch probe (torch alone, no vLLM) on the GPU named, each figure the median of 20 "
    "copies (5 above 64 MiB) timed by the device's events. The probe runs only on its machine's own host: a native "
    "Linux figure says what that machine pays, and WSL2's own cost of a pageable copy comes only from a probe run "
    "on a WSL2 machine."
)
EMPTY = "No probe record with a bandwidth table was read: no GPU has measured this yet."
COLUMNS = (
    "transfer",
    "pinned → GPU",
    "pageable → GPU",
    "pinned / pageable",
    "GPU → pinned",
    "GPU → pageable",
    "pinned / pageable",
)

# The chart's frame, in SVG user units.
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 150, 34, 44
# (label, colour, dashed, the row's field): Okabe-Ito colours, which stay apart for colour-blind readers;
# direction by the dash, memory kind by the colour.
CURVES = (
    ("pinned → GPU", "#0072B2", False, "pinned_h2d_gbs"),
    ("pageable → GPU", "#D55E00", False, "pageable_h2d_gbs"),
    ("GPU → pinned", "#0072B2", True, "pinned_d2h_gbs"),
    ("GPU → pageable", "#D55E00", True, "pageable_d2h_gbs"),
)


@dataclass(frozen=True)
class Curve:
    label: str
    colour: str
    dashed: bool
    points: str  # SVG polyline points, "x,y x,y ..."
    label_y: float  # where its name is written, right of its last point


@dataclass(frozen=True)
class Tick:
    at: float  # x or y, in user units
    label: str


@dataclass(frozen=True)
class Chart:
    """One probe's table and picture."""

    title: str
    source: str  # which record, which machine, when
    rows: tuple[tuple[str, ...], ...]  # COLUMNS, per transfer size
    headline: str  # the largest transfer, in one sentence
    offload_step: tuple[str, ...]  # the probe's interleaved offload-step verdicts
    curves: tuple[Curve, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    top: float
    bottom: float
    left: float
    right: float


@dataclass(frozen=True)
class PinnedView:
    title: str
    intro: str
    empty: str
    columns: tuple[str, ...]
    charts: tuple[Chart, ...]
    width: int
    height: int  # of one chart; bandwidth.svg stacks them


def size_words(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _gbs(value: float) -> str:
    return f"{value:.2f} GB/s" if value < 10 else f"{value:.1f} GB/s"


def _ratio(pinned: float, pageable: float) -> str:
    return f"{pinned / pageable:.1f}×" if pageable > 0 else "–"


def _row(row: Bandwidth) -> tuple[str, ...]:
    return (
        size_words(row.bytes),
        _gbs(row.pinned_h2d_gbs),
        _gbs(row.pageable_h2d_gbs),
        _ratio(row.pinned_h2d_gbs, row.pageable_h2d_gbs),
        _gbs(row.pinned_d2h_gbs),
        _gbs(row.pageable_d2h_gbs),
        _ratio(row.pinned_d2h_gbs, row.pageable_d2h_gbs),
    )


def _nice_ceiling(value: float) -> float:
    """The smallest round number at or above ``value`` whose quarters are round too: the y axis's four steps."""
    if value <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(value))
    return next(step * base for step in (1, 1.2, 1.6, 2, 3, 4, 6, 8, 10) if step * base >= value)


def chart(probe: Probe) -> Chart:
    rows = probe.bandwidth
    smallest, largest = rows[0].bytes, rows[-1].bytes
    ceiling = _nice_ceiling(max(getattr(r, field) for r in rows for *_, field in CURVES))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = math.log2(largest / smallest) or 1.0

    def x(n: int) -> float:
        return round(LEFT + plot_w * math.log2(n / smallest) / span, 1)

    def y(gbs: float) -> float:
        return round(TOP + plot_h * (1 - gbs / ceiling), 1)

    curves = []
    for label, colour, dashed, field in CURVES:
        points = " ".join(f"{x(r.bytes)},{y(getattr(r, field))}" for r in rows)
        curves.append(Curve(label, colour, dashed, points, y(getattr(rows[-1], field))))
    # Names at the right end, nudged apart where two curves end close together.
    placed: list[Curve] = []
    for curve in sorted(curves, key=lambda c: c.label_y):
        at = max(curve.label_y, placed[-1].label_y + 13) if placed else curve.label_y
        placed.append(Curve(curve.label, curve.colour, curve.dashed, curve.points, round(at, 1)))
    x_ticks = tuple(Tick(x(r.bytes), size_words(r.bytes)) for r in rows if math.log2(r.bytes) % 4 == 0)
    y_ticks = tuple(Tick(y(ceiling * i / 4), f"{ceiling * i / 4:g}") for i in range(5))
    last = rows[-1]
    host = next((words for h, words in HOST_NAMES.items() if h.value == probe.host), probe.host)
    stack = next((words for st, words in STACK_NAMES.items() if st.value == probe.stack), probe.stack)
    headline = (
        f"At {size_words(last.bytes)}, pinned memory reaches the GPU at {_gbs(last.pinned_h2d_gbs)} against "
        f"{_gbs(last.pageable_h2d_gbs)} from pageable memory ({_ratio(last.pinned_h2d_gbs, last.pageable_h2d_gbs)})"
        f" on {probe.gpu}, {host}."
    )
    return Chart(
        title=f"{probe.gpu}, {host} ({stack})",
        source=f"probe record {Path(probe.path).name}, measured {probe.collected_at[:10] or 'on an unknown date'}",
        rows=tuple(_row(r) for r in rows),
        headline=headline,
        offload_step=probe.offload_step,
        curves=tuple(placed),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        top=TOP,
        bottom=TOP + plot_h,
        left=LEFT,
        right=LEFT + plot_w,
    )


def pinned_view(report: Report) -> PinnedView:
    """Every probe with a bandwidth table, newest first."""
    measured = sorted((p for p in report.probes if p.bandwidth), key=lambda p: p.collected_at, reverse=True)
    return PinnedView(TITLE, INTRO, EMPTY, COLUMNS, tuple(map(chart, measured)), WIDTH, HEIGHT)
