"""The benchmark's statistics on synthetic samples whose true effect is known.

Seeds are fixed, so each figure below is the same on every run: the bounds
are what a correct 95% interval must meet with a margin for the finite number
of repetitions (binomial, three standard errors), not tuned to one outcome.
"""

import math

import numpy as np
import pytest

from repro.bench import stats

REPS = 400
BASE_MS = 8.8


def arm(rng, effect: float, rounds: int = 2, per_round: int = 30, sigma: float = 0.15, drift: float = 0.0):
    """Per-request latencies, log-normal around BASE_MS * effect, one list per round."""
    return [
        np.exp(rng.normal(math.log(BASE_MS * effect * (1 + drift * r)), sigma, per_round)).tolist()
        for r in range(rounds)
    ]


def three_se(p: float) -> float:
    return 3 * math.sqrt(p * (1 - p) / REPS)


def test_the_interval_covers_a_known_twelve_percent_effect_at_the_stated_rate():
    rng = np.random.default_rng(1)
    covered = 0
    for i in range(REPS):
        diff = stats.compare(arm(rng, 1.0), arm(rng, 0.88), seed=i, resamples=1000)
        covered += diff.low <= -0.12 <= diff.high
    assert covered / REPS >= 0.95 - three_se(0.95)


def test_a_null_effect_is_not_called_significant_more_often_than_the_stated_rate():
    rng = np.random.default_rng(2)
    called = sum(stats.compare(arm(rng, 1.0), arm(rng, 1.0), seed=i, resamples=1000).resolved for i in range(REPS))
    assert called / REPS <= 0.05 + three_se(0.05)


def test_drift_across_rounds_shared_by_both_arms_does_not_create_an_effect():
    # The machine slows 10% per round; interleaved arms see the same slowdown.
    rng = np.random.default_rng(3)
    called = sum(
        stats.compare(
            arm(rng, 1.0, rounds=4, drift=0.1), arm(rng, 1.0, rounds=4, drift=0.1), seed=i, resamples=500
        ).resolved
        for i in range(REPS // 2)
    )
    assert called / (REPS // 2) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / (REPS // 2))


def test_a_large_effect_is_resolved_and_worded_with_its_interval():
    rng = np.random.default_rng(4)
    diff = stats.compare(arm(rng, 1.0, per_round=60), arm(rng, 0.88, per_round=60))
    assert diff.resolved and diff.high < 0
    line = stats.verdict(diff, "pin=unset", "pin=1", "ITL")
    assert line.startswith("ITL: pin=1 faster than pin=unset by ")
    assert f"{-diff.relative:.1%}" in line and "(95% CI)" in line


def test_the_winner_is_named_whichever_arm_it_is():
    rng = np.random.default_rng(5)
    slower = stats.compare(arm(rng, 0.88, per_round=60), arm(rng, 1.0, per_round=60))
    assert stats.verdict(slower, "pin=unset", "pin=1", "ITL").startswith("ITL: pin=unset faster than pin=1 by ")
    more = stats.compare(arm(rng, 1.0, per_round=60), arm(rng, 1.2, per_round=60))
    worded = stats.verdict(more, "a", "b", "throughput", lower_is_better=False)
    assert worded.startswith("throughput: b higher than a by ")


def test_an_unresolved_difference_says_so_with_the_sample_size():
    rng = np.random.default_rng(6)
    diff = stats.compare(arm(rng, 1.0, per_round=5), arm(rng, 0.99, per_round=5))
    assert not diff.resolved
    line = stats.verdict(diff, "pin=unset", "pin=1", "ITL")
    assert "no difference resolved at this sample size" in line and "10+10 requests" in line


def test_the_requests_needed_for_five_percent_follow_the_spread():
    rng = np.random.default_rng(7)
    tight = stats.compare(arm(rng, 1.0, sigma=0.05), arm(rng, 1.0, sigma=0.05))
    wide = stats.compare(arm(rng, 1.0, sigma=0.3), arm(rng, 1.0, sigma=0.3))
    assert tight.needed_per_arm < wide.needed_per_arm
    # With the estimated count, a 5% effect is resolved most of the time (80% power by design).
    n = wide.needed_per_arm
    resolved = sum(
        stats.compare(arm(rng, 1.0, 1, n, 0.3), arm(rng, 0.95, 1, n, 0.3), seed=i, resamples=500).resolved
        for i in range(50)
    )
    assert resolved >= 30


def test_too_few_samples_give_the_estimate_without_an_interval():
    diff = stats.compare([[10.0, 10.5]], [[8.0, 8.4]])  # two rounds of throughput, say
    assert diff.relative == pytest.approx(8.2 / 10.25 - 1) and not diff.resolved and diff.needed_per_arm is None
    assert "too few samples for an interval (2+2; at least 5 per arm)" in stats.verdict(diff, "a", "b", "x")


def test_no_samples_in_an_arm_is_no_comparison_not_a_crash():
    assert stats.compare([[]], [[1.0, 2.0]]) is None
    assert "nothing to compare" in stats.verdict(None, "a", "b", "ITL")


@pytest.mark.parametrize("values", [[], [5.0], list(range(1, 101))])
def test_spread_reports_median_and_tail(values):
    spread = stats.Spread.of(values)
    assert spread.n == len(values)
    if values:
        assert spread.median == pytest.approx(np.median(values)) and spread.p99 >= spread.p90 >= spread.median
    else:
        assert math.isnan(spread.median)
