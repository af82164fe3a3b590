"""One line on how far long work is, and about how long is left, for the history and the benchmark."""

from __future__ import annotations

from collections.abc import Sequence


def clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def progress(
    done: int,
    total: int,
    elapsed: float,
    to_run: int,
    took: Sequence[float],
    *,
    unit: str = "releases",
    verb: str = "compute",
) -> str:
    """After ``done`` of ``total`` steps: how long so far, and what is left by the steps run so far.

    Steps that cost nothing (a release reused from the cache) are not in ``to_run`` or ``took``, so what is left
    is the ones still to run at the mean of those run (none yet: unknown).
    """
    said = f"{done} of {total} {unit} in {clock(elapsed)}"
    if done == total:
        return said
    if not to_run:
        return f"{said}; the rest are cached"
    if not took:
        return f"{said}; {to_run} still to {verb}"
    each = sum(took) / len(took)
    return f"{said}; about {clock(to_run * each)} left ({to_run} to {verb} at ~{each:.0f} s each)"
