"""What an A/B latency comparison can honestly claim, from the samples alone.

The unit of the comparison is a request, not a token: tokens of one request
share its batch and its stalls, so treating them as independent would make
intervals look far tighter than they are. Each request is reduced to one value
(its median inter-token latency, say), and the arms are compared on the median
of those values. The bootstrap resamples requests *within each round*: rounds
alternate the arms (ABAB...), and keeping them as strata keeps a drift of the
machine over the session out of the difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

CONFIDENCE = 0.95
POWER = 0.80
RESOLVE = 0.05  # the difference the sample-size estimate is for
RESAMPLES = 4000
# Below this many samples in an arm a bootstrap interval is a handful of
# recombinations, not an interval: the point estimate is given without one.
MIN_PER_ARM = 5


@dataclass(frozen=True)
class Spread:
    """Location and tail of one arm's samples."""

    n: int
    median: float
    p90: float
    p99: float
    mean: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        v = np.asarray(values, dtype=float)
        if v.size == 0:
            return cls(0, float("nan"), float("nan"), float("nan"), float("nan"))
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        return cls(int(v.size), float(p50), float(p90), float(p99), float(v.mean()))


@dataclass(frozen=True)
class Difference:
    """``test`` relative to ``base``: median(test) / median(base) - 1, with its bootstrap interval."""

    relative: float
    low: float
    high: float
    confidence: float
    n_base: int
    n_test: int
    # Requests per arm for a RESOLVE-sized difference at the same spread, CONFIDENCE and POWER.
    needed_per_arm: int | None

    @property
    def resolved(self) -> bool:
        return self.low > 0 or self.high < 0


def _median_by_resample(strata: Sequence[np.ndarray], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The median of each bootstrap resample, drawing with replacement inside every stratum."""
    drawn = [s[rng.integers(0, s.size, size=(resamples, s.size))] for s in strata if s.size]
    return np.median(np.concatenate(drawn, axis=1), axis=1)


def compare(
    base: Sequence[Sequence[float]],
    test: Sequence[Sequence[float]],
    seed: int = 0,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> Difference | None:
    """Compare two arms given per-request values grouped by round (one list per round, same rounds in both).

    None when an arm has no sample at all: there is nothing to compare.
    """
    base_strata = [np.asarray(r, dtype=float) for r in base]
    test_strata = [np.asarray(r, dtype=float) for r in test]
    n_base, n_test = sum(s.size for s in base_strata), sum(s.size for s in test_strata)
    if not n_base or not n_test:
        return None
    point = float(np.median(np.concatenate(test_strata)) / np.median(np.concatenate(base_strata)) - 1)
    if min(n_base, n_test) < MIN_PER_ARM:
        return Difference(point, float("nan"), float("nan"), confidence, n_base, n_test, None)
    rng = np.random.default_rng(seed)
    ratios = _median_by_resample(test_strata, rng, resamples) / _median_by_resample(base_strata, rng, resamples) - 1
    alpha = 1 - confidence
    low, high = (float(x) for x in np.quantile(ratios, [alpha / 2, 1 - alpha / 2]))
    return Difference(point, low, high, confidence, n_base, n_test, _needed(low, high, min(n_base, n_test), confidence))


def _needed(low: float, high: float, n: int, confidence: float) -> int | None:
    """Requests per arm that would resolve a RESOLVE difference, scaling the observed interval as 1/sqrt(n).

    The interval's half-width must shrink to RESOLVE * z_a / (z_a + z_b) for a
    true RESOLVE difference to be told from none with probability POWER.
    """
    half = (high - low) / 2
    if not np.isfinite(half):
        return None
    z_a = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    z_b = NormalDist().inv_cdf(POWER)
    target = RESOLVE * z_a / (z_a + z_b)
    return max(2, int(np.ceil(n * (half / target) ** 2)))


def verdict(diff: Difference | None, base: str, test: str, metric: str, lower_is_better: bool = True) -> str:
    """One line a reviewer can quote: who is faster, by how much, and how sure."""
    if diff is None:
        return f"{metric}: no samples in one arm; nothing to compare"
    if np.isnan(diff.low):
        return (
            f"{metric}: {test} vs {base}: {diff.relative:+.1%}, too few samples for an interval "
            f"({diff.n_base}+{diff.n_test}; at least {MIN_PER_ARM} per arm)"
        )
    if not diff.resolved:
        return (
            f"{metric}: no difference resolved at this sample size "
            f"({test} vs {base}: {diff.relative:+.1%} [{diff.low:+.1%}, {diff.high:+.1%}], "
            f"{diff.n_base}+{diff.n_test} requests)"
        )
    better = (diff.relative < 0) == lower_is_better
    winner, loser = (test, base) if better else (base, test)

    def size(x: float) -> float:
        # How much better the winner is, relative to the loser.
        return abs(x) if better else abs(1 / (1 + x) - 1)

    low, high = sorted((size(diff.low), size(diff.high)))
    word = "faster" if lower_is_better else "higher"
    return (
        f"{metric}: {winner} {word} than {loser} by {size(diff.relative):.1%} "
        f"[{low:.1%}, {high:.1%}] ({diff.confidence:.0%} CI)"
    )
