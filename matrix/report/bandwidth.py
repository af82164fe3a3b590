"""What pinned memory buys, as the probes measured it: each probe's bandwidth table in words, and its picture.

The probe (repro/probe/) copies 4 KiB to 1 GiB between host and device from pinned and from pageable memory;
this module turns each record's table into the rows the page and COMPATIBILITY.md print and the geometry of
bandwidth.svg (transfer size on a log axis, GB/s on a linear one, one curve per memory kind and direction).
Every word and number format of that section is here; the templates only place them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from matrix.report.model import Report
from matrix.store.engine_bench import ArmFigure, CellBench, Comparison, EngineBench
from matrix.store.probe import Bandwidth, Probe
from matrix.text.words import HOST_NAMES, STACK_NAMES
from matrix.variables import OPT_IN, PIN_MEMORY, UNSET

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

ENGINE_TITLE = f"What pinned memory buys in vLLM's engine: inter-token latency, {PIN_MEMORY.name} unset and =1"
ENGINE_INTRO = (
    "Measured by the offline GPU run's bench group: the same token-id prompts decoded greedily by vLLM's engine "
    "in-process, one engine process per arm, the arms interleaved over rounds; the difference is median(=1) / "
    "median(unset) − 1 with its 95% bootstrap interval, resampled within rounds. On an emulated cell the figure "
    "is vLLM's code path on native Linux, not what WSL2 costs: that comes only from real WSL2 machines."
)
ENGINE_EMPTY = "No engine-level measurement yet: the offline GPU run's bench group has not run on a GPU."
ENGINE_COLUMNS = (
    "cell",
    "configuration",
    "execution",
    "batch",
    "ITL unset: median",
    "ITL =1: median",
    "=1 against unset",
    "throughput unset → =1",
    "verdict",
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
class EngineTable:
    """One engine-level benchmark record: vLLM's inter-token latency with the variable unset and =1."""

    title: str
    source: str  # the GPU, the model, when, and whether the engines were vLLM's
    stand_in: bool
    rows: tuple[tuple[str, ...], ...]  # ENGINE_COLUMNS
    notes: tuple[str, ...]  # what each (cell, configuration)'s figure is and is not, and what did not run


@dataclass(frozen=True)
class PinnedView:
    title: str
    intro: str
    empty: str
    columns: tuple[str, ...]
    charts: tuple[Chart, ...]
    width: int
    height: int  # of one chart; bandwidth.svg stacks them
    engine_title: str
    engine_intro: str
    engine_empty: str
    engine_columns: tuple[str, ...]
    engines: tuple[EngineTable, ...]


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


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} ms"


def _arm(figure: ArmFigure | None) -> str:
    if figure is None or figure.median_ms is None:
        return "did not measure"
    return f"{_ms(figure.median_ms)} (p90 {_ms(figure.p90_ms)}, n={figure.n})"


def _difference(c: Comparison) -> str:
    if c.relative is None:
        return "–"
    interval = f" [{c.low:+.1%}, {c.high:+.1%}]" if c.low is not None and c.high is not None else ""
    return f"{c.relative:+.1%}{interval}"


def _throughput(bench: CellBench, arm: str, batch: int) -> str:
    rates = sorted(
        rate
        for side in bench.arms
        if side.arm == arm
        for process in side.processes
        for samples in process.samples
        if samples.batch == batch
        for rate in samples.tokens_per_s
    )
    return f"{rates[len(rates) // 2]:,.0f} tok/s" if rates else "–"


def engine_table(record: EngineBench) -> EngineTable:
    model = record.model
    size = f"{model.parameters / 1e6:.1f}M parameters, {model.bytes / 2**20:.1f} MiB in {model.dtype}"
    engines = "a stand-in engine, not vLLM: its figures measure the bench" if record.stand_in else "vLLM's engine"
    source = (
        f"{engines}; {model.architecture} of {model.layers} layers ({size}); "
        f"{record.rounds_run} of {record.settings.rounds} rounds, run {record.started_at[:10]}"
        + (f" ({record.stopped})" if record.stopped else "")
    )
    rows = []
    for bench in record.benches:
        for c in bench.comparisons:
            figures = {figure.arm: figure for figure in c.arms}
            rows.append(
                (
                    bench.cell,
                    bench.configuration.value,
                    bench.execution.value,
                    str(c.batch),
                    _arm(figures.get(UNSET)),
                    _arm(figures.get(OPT_IN)),
                    _difference(c),
                    f"{_throughput(bench, UNSET, c.batch)} → {_throughput(bench, OPT_IN, c.batch)}",
                    c.verdict,
                )
            )
    notes = tuple(dict.fromkeys(f"{b.cell} ({b.configuration.value}): {b.note}" for b in record.benches if b.note))
    notes += tuple(f"{cell.cell}: not run: {cell.reason}" for cell in record.skipped)
    title = f"vLLM {record.vllm_version}'s engine on {record.gpu or 'no GPU'}"
    return EngineTable(title + (" (stand-in)" if record.stand_in else ""), source, record.stand_in, tuple(rows), notes)


def pinned_view(report: Report) -> PinnedView:
    """Every probe with a bandwidth table and every engine-level benchmark, newest first."""
    measured = sorted((p for p in report.probes if p.bandwidth), key=lambda p: p.collected_at, reverse=True)
    benches = sorted(report.engine_benches, key=lambda b: b.started_at, reverse=True)
    return PinnedView(
        TITLE,
        INTRO,
        EMPTY,
        COLUMNS,
        tuple(map(chart, measured)),
        WIDTH,
        HEIGHT,
        ENGINE_TITLE,
        ENGINE_INTRO,
        ENGINE_EMPTY,
        ENGINE_COLUMNS,
        tuple(map(engine_table, benches)),
    )
