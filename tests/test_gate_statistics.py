"""The gate's statistics (commbench/analysis/evidence.py) against independent computations: Welch's t
as scipy computes it, Benjamini-Hochberg by its definition, and the error rates of the rule on passes
drawn from known distributions."""

import math

import numpy as np
import pytest
from scipy.stats import ttest_ind

from commbench.analysis.evidence import benjamini_hochberg, estimate_change, geometric_mean


def test_the_change_and_its_p_value_are_welchs_t_on_the_passes_log_times():
    rng = np.random.default_rng(7)
    for _ in range(50):
        base = np.exp(rng.normal(6.5, rng.uniform(0.01, 0.5), size=rng.integers(2, 12)))
        new = np.exp(rng.normal(6.6, rng.uniform(0.01, 0.5), size=rng.integers(2, 12)))
        change = estimate_change(list(base), list(new))
        expected = ttest_ind(np.log(new), np.log(base), equal_var=False)
        assert change.ratio == pytest.approx(geometric_mean(list(new)) / geometric_mean(list(base)))
        assert change.p_different() == pytest.approx(expected.pvalue, rel=1e-9)
        low, high = change.interval()
        interval = expected.confidence_interval(0.95)
        assert (math.log(low), math.log(high)) == pytest.approx((interval.low, interval.high), rel=1e-9)


def test_one_pass_on_a_side_has_a_change_but_no_interval_or_significance():
    change = estimate_change([800.0], [900.0, 950.0, 1000.0])
    assert change.ratio == pytest.approx(math.exp(np.mean(np.log([900, 950, 1000]))) / 800)
    assert not change.testable and change.interval() is None
    assert change.p_different() is None and change.p_beyond(1.1) is None


def test_passes_that_do_not_vary_decide_by_the_line_alone():
    change = estimate_change([100.0, 100.0], [130.0, 130.0])
    assert change.p_beyond(1.1) == 0.0 and change.p_beyond(1.5) == 1.0
    assert change.interval() == pytest.approx((1.3, 1.3))
    assert estimate_change([0.0, 1.0], [1.0, 1.0]) is None  # no time to compare


def test_benjamini_hochberg_is_the_step_up_rule():
    rng = np.random.default_rng(3)
    for size in (1, 2, 7, 40):
        p_values = list(rng.uniform(0, 0.2, size=size))
        q_values = benjamini_hochberg([*p_values, None])
        assert q_values[-1] is None
        ordered = sorted(p_values)
        for p, q in zip(p_values, q_values[:-1], strict=True):
            rank = ordered.index(p) + 1
            assert q == pytest.approx(min(1.0, min(ordered[k - 1] * size / k for k in range(rank, size + 1))))
        for level in (0.01, 0.05, 0.1):  # rejected by q <= level: the largest k with p(k) <= k level / m
            passing = [k for k in range(1, size + 1) if ordered[k - 1] <= k * level / size]
            cutoff = ordered[max(passing) - 1] if passing else -1.0
            assert [q <= level for q in q_values[:-1]] == [p <= cutoff for p in p_values]


def _gate_fails(base: np.ndarray, new: np.ndarray, line: float, level: float = 0.05) -> bool:
    """The gate on one comparison of several points of one collective (rows of ``base`` and ``new``:
    passes): any point, or the points taken together (each pass's geometric mean over them)."""
    changes = [estimate_change(list(b), list(n)) for b, n in zip(base, new, strict=True)]
    q_values = benjamini_hochberg([change.p_beyond(line) for change in changes])
    per_pass = [[geometric_mean(list(column)) for column in side.T] for side in (base, new)]  # as compare
    together = estimate_change(*per_pass)
    return any(q <= level and change.ratio > line for q, change in zip(q_values, changes, strict=True)) \
        or (together.p_beyond(line) <= level and together.ratio > line)


@pytest.mark.parametrize("passes", [5, 10])
def test_on_exchangeable_passes_the_gate_rarely_fails_and_catches_a_slowdown(passes):
    """20 points of noisy passes (log-normal, 20% spread, one pass in five twice as slow): identical
    sides fail the gate at 10% in well under 1 of 20 comparisons; a 2x slowdown fails it every time, and
    1.3x nearly every time."""
    rng = np.random.default_rng(11)

    def side(points: int, factor: float = 1.0) -> np.ndarray:
        times = np.exp(rng.normal(np.log(800.0 * factor), 0.2, size=(points, passes)))
        return times * np.where(rng.random((points, passes)) < 0.2, 2.0, 1.0)

    trials = 150
    false_alarms = sum(_gate_fails(side(20), side(20), 1.10) for _ in range(trials))
    detections = sum(_gate_fails(side(20), side(20, 2.0), 1.10) for _ in range(trials))
    # 1.3x is too small beside each point's noise to be caught reliably at one point (29 and 77 of
    # 150 at 5 and 10 passes when the gate judged points alone): the points together catch it
    modest = sum(_gate_fails(side(20), side(20, 1.3), 1.10) for _ in range(trials))
    assert false_alarms / trials <= 0.02
    assert detections / trials >= 0.95
    assert modest / trials >= 0.9
