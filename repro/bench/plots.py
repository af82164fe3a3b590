"""Two figures per benchmark, as PNG and SVG: ITL distributions per arm, and the difference per level."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: runners have no display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from repro.bench.markdown import METRIC_NAMES  # noqa: E402
from repro.bench.run import BenchRun  # noqa: E402

COLOURS = ("#1f77b4", "#d62728")


def _save(fig: Figure, out: Path, stem: str) -> list[Path]:
    paths = [out / f"{stem}.{fmt}" for fmt in ("png", "svg")]
    for path in paths:
        fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(fig)
    return paths


def itl_ecdf(run: BenchRun, out: Path) -> list[Path]:
    levels = [c for c in run.config.concurrency if any(c in ar.levels for ar in run.rounds)]
    fig, axes = plt.subplots(1, max(1, len(levels)), figsize=(4 * max(1, len(levels)), 3.4), squeeze=False)
    for ax, concurrency in zip(axes[0], levels, strict=False):
        for colour, arm in zip(COLOURS, run.config.arms, strict=True):
            itl = np.sort([x for rnd in run.requests(arm.name, concurrency) for r in rnd for x in r.itl_ms])
            if itl.size:
                ax.step(itl, np.arange(1, itl.size + 1) / itl.size, where="post", color=colour, label=arm.name)
        ax.set_title(f"concurrency {concurrency}")
        ax.set_xlabel("inter-token latency (ms)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of tokens ≤ x")
    axes[0][0].legend(loc="lower right")
    fig.suptitle(f"{run.config.cell.id}: ITL per arm (ECDF)", y=1.03)
    return _save(fig, out, "itl-ecdf")


def differences(doc: dict, out: Path) -> list[Path]:
    base, test = doc["config"]["arms"]
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    width = 0.8 / len(METRIC_NAMES)
    for i, (metric, name) in enumerate(METRIC_NAMES.items()):
        xs: list[float] = []
        ys: list[float] = []
        err: list[list[float]] = [[], []]
        for j, level in enumerate(doc["levels"]):
            c = level["comparisons"][metric]
            if c.get("low") is not None:
                xs.append(j + (i - (len(METRIC_NAMES) - 1) / 2) * width)
                ys.append(100 * c["relative"])
                err[0].append(100 * (c["relative"] - c["low"]))
                err[1].append(100 * (c["high"] - c["relative"]))
        ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=3, label=name)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(doc["levels"])), [str(level["concurrency"]) for level in doc["levels"]])
    ax.set_xlabel("concurrency")
    ax.set_ylabel(f"{test} vs {base} (%)")
    ax.set_title(f"{doc['cell']}: difference with {doc['config']['confidence']:.0%} CI (below 0: {test} faster)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize="small")
    return _save(fig, out, "difference")
