"""The gate's statistics (commbench/analysis/evidence.py) against independent computations: Welch's t
and the geometric mean as scipy computes them, Benjamini-Hochberg by its definition. The gate's
decision is tested through the gate in tests/test_gate.py; its error rates on passes drawn from known
distributions are scripts/gate_rates.py's (the gate itself, and tests/test_scripts.py checks its
targets)."""

import math

import numpy as np
import pytest
from scipy.stats import gmean, ttest_ind

from commbench.analysis.evidence import (
    MIN_PASSES_PER_SIDE,
    Change,
    benjamini_hochberg,
    estimate_change,
    geometric_mean,
)


def test_the_change_and_its_p_value_are_welchs_t_on_the_passes_log_times():
    rng = np.random.default_rng(7)
    for _ in range(50):
        base = np.exp(rng.normal(6.5, rng.uniform(0.01, 0.5), size=rng.integers(2, 12)))
        new = np.exp(rng.normal(6.6, rng.uniform(0.01, 0.5), size=rng.integers(2, 12)))
        change = estimate_change(list(base), list(new))
        expected = ttest_ind(np.log(new), np.log(base), equal_var=False)
        assert change.ratio == pytest.approx(gmean(new) / gmean(base), rel=1e-12)
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


def test_a_side_s_time_is_the_geometric_mean_of_its_positive_passes():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([0.5, 2.0]) == pytest.approx(1.0)  # below one microsecond is a time too
    assert geometric_mean([0.0, 2.0, -1.0, 8.0]) == pytest.approx(float(gmean([2.0, 8.0])))
    assert geometric_mean([]) is None and geometric_mean([0.0, -3.0]) is None


@pytest.mark.parametrize("base, new", [([], [1.0]), ([1.0], []), ([1.0, 0.0], [1.0, 1.0]),
                                       ([1.0, 1.0], [-1.0, 1.0])])
def test_a_side_without_a_positive_time_in_every_pass_has_no_change(base, new):
    assert estimate_change(base, new) is None


def test_times_below_a_microsecond_are_compared_like_any_other():
    change = estimate_change([0.5, 0.52], [1.0, 1.04])
    assert change is not None and change.ratio == pytest.approx(2.0)


def test_a_change_without_degrees_of_freedom_has_no_interval():
    assert Change(1.2, 0.1).interval() is None and Change(1.2).interval() is None


def test_two_passes_a_side_are_the_fewest_with_an_interval():
    assert MIN_PASSES_PER_SIDE == 2
    assert estimate_change([800.0, 810.0], [900.0]).interval() is None
    assert estimate_change([800.0, 810.0], [900.0, 905.0]).interval() is not None


@pytest.mark.parametrize("level", [0.5, 0.9, 0.99])
def test_an_interval_at_any_level_is_welch_s(level):
    base, new = [800.0, 830.0, 790.0, 870.0], [900.0, 1010.0, 950.0]
    change = estimate_change(base, new)
    expected = ttest_ind(np.log(new), np.log(base), equal_var=False).confidence_interval(level)
    low, high = change.interval(level)
    assert (math.log(low), math.log(high)) == pytest.approx((expected.low, expected.high), rel=1e-9)
    assert (change.low, change.high) == pytest.approx(change.interval(0.95))


def welch_p_beyond(base, new, line: float) -> float:
    """The one-sided p-value that new is slower than base by more than ``line``: Welch's t-test (scipy's)
    on the passes' log times, new / line against base: is it above?"""
    return float(ttest_ind(np.log(new) - math.log(line), np.log(base), equal_var=False,
                           alternative="greater").pvalue)


def test_the_one_sided_p_value_beyond_a_line_is_welch_s_against_that_line():
    base, new = [800.0, 830.0, 790.0, 870.0], [900.0, 1010.0, 950.0]
    change = estimate_change(base, new)
    for line in (0.9, 1.0, 1.1, 1.3):
        assert change.p_beyond(line) == pytest.approx(welch_p_beyond(base, new, line), rel=1e-9)
    faster = estimate_change(new, base)  # the same change the other way is as different
    assert faster.p_different() == pytest.approx(change.p_different(), rel=1e-12)


def test_passes_alike_on_both_sides_decide_by_the_sign_and_keep_their_degrees_of_freedom():
    change = estimate_change([100.0] * 3, [100.0] * 4)
    assert change.ratio == pytest.approx(1.0) and change.df == 5  # n_base + n_new - 2
    assert change.p_different() == 1.0  # no change at all
    assert change.interval() == pytest.approx((1.0, 1.0))
