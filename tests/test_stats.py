"""The timing statistics (measure/stats.py) against independent computations: numpy's percentiles,
mean and sample deviation, scipy's binomial distribution for the median's distribution-free interval,
and the arrival skew by its definition, written here over plain lists."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from commbench.measure.stats import (
    _ci95_lower_index,
    algbw_gbps,
    arrival_skews,
    ci95_rel,
    has_samples,
    last_to_arrive,
    median_ci95,
    percentile,
    rank_means,
    slowest_rank_per_iteration,
    summarize,
)

samples = st.lists(st.floats(min_value=1e-7, max_value=10.0), min_size=1, max_size=300)


@settings(max_examples=60, deadline=None)
@given(samples, st.floats(min_value=0.0, max_value=1.0))
def test_a_percentile_is_numpy_s_linear_interpolation(values, fraction):
    ordered = sorted(values)
    assert percentile(ordered, fraction) == pytest.approx(float(np.percentile(ordered, fraction * 100)),
                                                          rel=1e-12, abs=1e-15)


def test_a_percentile_of_nothing_is_refused():
    with pytest.raises(ValueError) as caught:
        percentile([], 0.5)
    assert str(caught.value) == "percentile of no values"


@settings(max_examples=60, deadline=None)
@given(samples)
def test_a_summary_is_numpy_s_statistics_of_the_samples(values):
    summary = summarize(values)
    array = np.array(values)
    for name, fraction in (("p50", 50), ("p95", 95), ("p99", 99)):
        assert getattr(summary, name) == pytest.approx(float(np.percentile(array, fraction)), rel=1e-12)
    assert (summary.min, summary.max) == (float(array.min()), float(array.max()))
    assert summary.mean == pytest.approx(float(array.mean()), rel=1e-12)
    deviation = float(array.std(ddof=1)) if len(values) > 1 else 0.0
    assert summary.stdev == pytest.approx(deviation, rel=1e-9, abs=1e-12)
    assert summary.cv == pytest.approx(deviation / float(array.mean()), rel=1e-9, abs=1e-12)


def test_the_spread_of_samples_below_a_second_is_relative_to_their_mean():
    # times are seconds: nearly every mean is below 1, and its cv must still be stdev / mean
    values = [0.25e-3, 0.75e-3, 0.5e-3]
    assert summarize(values).cv == pytest.approx(float(np.std(values, ddof=1) / np.mean(values)), rel=1e-12)
    assert summarize(values).cv == pytest.approx(0.5, rel=1e-12)


def test_a_summary_of_zeros_has_no_spread_relative_to_its_mean_and_no_relative_interval():
    summary = summarize([0.0] * 10)
    assert summary.cv == 0.0 and summary.ci95_rel is None
    assert (summary.ci95_low, summary.ci95_high) == (0.0, 0.0)


def _textbook_interval(ordered: list[float]) -> tuple[float, float] | None:
    """[x_(k), x_(n+1-k)] for the largest k with P(Binomial(n, 1/2) <= k - 1) <= 2.5% (1-based), by
    scipy's binomial distribution; None when no k >= 1 qualifies."""
    n = len(ordered)
    qualifying = [k for k in range(1, n // 2 + 1) if binom.cdf(k - 1, n, 0.5) <= 0.025]
    if not qualifying:
        return None
    k = max(qualifying)
    return ordered[k - 1], ordered[n - k]


@pytest.mark.parametrize("n", [*range(1, 61), 99, 100, 101, 250, 1000, 2500])
def test_the_median_s_interval_is_the_binomial_order_statistics(n):
    _ci95_lower_index.cache_clear()  # computed here, not remembered from an earlier test
    ordered = [float(index) for index in range(1, n + 1)]
    assert median_ci95(ordered) == _textbook_interval(ordered)


def test_the_interval_s_relative_half_width_is_over_the_median():
    values = [float(value) for value in range(1, 11)]  # interval (2, 9), median 5.5
    assert ci95_rel(values) == pytest.approx(3.5 / 5.5)
    assert summarize(values).ci95_low == 2.0 and summarize(values).ci95_high == 9.0
    assert ci95_rel([1.0] * 5) is None  # five samples: no interval


def test_algorithm_bandwidth_is_bytes_over_seconds_in_gigabytes():
    assert algbw_gbps(10**9, 0.5) == 2.0
    assert algbw_gbps(1024, 1e-6) == pytest.approx(1.024)
    assert algbw_gbps(1, 1e-9) == pytest.approx(1.0)  # one byte moves data too
    assert algbw_gbps(0, 1.0) is None and algbw_gbps(1024, 0.0) is None


def test_per_rank_series_must_be_of_one_length():
    assert rank_means([[1.0, 3.0], [2.0, 6.0]]) == [2.0, 4.0]
    assert rank_means(np.array([[1.0, 2.0, 6.0]])) == [3.0]
    with pytest.raises(ValueError):
        rank_means([[1.0, 2.0], [3.0]])
    with pytest.raises(ValueError, match=r"per-rank series of unequal lengths \(shape \(2,\)\)"):
        rank_means([1.0, 2.0])  # not [rank][sample]
    assert slowest_rank_per_iteration([]) == []
    assert has_samples([[0.5]]) and not has_samples([]) and not has_samples([[]])


def _textbook_skews(arrivals: list[list[float]], groups: list[list[int]]) -> list[float]:
    """Per rank: the mean over samples of (the latest arrival in its group - its own)."""
    skews = [0.0] * len(arrivals)
    for ranks in groups:
        for rank in ranks:
            gaps = [max(arrivals[other][i] for other in ranks) - arrivals[rank][i]
                    for i in range(len(arrivals[rank]))]
            skews[rank] = sum(gaps) / len(gaps)
    return skews


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.booleans(),
       st.randoms(use_true_random=False))
def test_arrival_skews_are_the_mean_wait_for_the_last_of_each_group(group_count, group_size, sample_count,
                                                                     strided, rng):
    world = group_count * group_size
    arrivals = [[rng.uniform(0, 1e-3) for _ in range(sample_count)] for _ in range(world)]
    if strided:
        groups = [[group + index * group_count for index in range(group_size)]
                  for group in range(group_count)]
    else:
        groups = [list(range(start, start + group_size)) for start in range(0, world, group_size)]
    found = arrival_skews(arrivals, groups)
    assert found == pytest.approx(_textbook_skews(arrivals, groups), abs=1e-15)
    whole = _textbook_skews(arrivals, [list(range(world))])
    assert arrival_skews(arrivals) == pytest.approx(whole, abs=1e-15)
    assert arrival_skews(arrivals, [list(range(world))]) == pytest.approx(whole, abs=1e-15)


def test_the_last_to_arrive_is_the_least_skewed_rank_of_the_most_skewed_group():
    skews = [0.0, 5.0, 3.0, 0.2, 9.0, 0.0]  # rank 4 waited longest; in its group, rank 5 arrived last
    assert last_to_arrive(skews, [[0, 1], [2, 3], [4, 5]]) == 5
    assert last_to_arrive(skews, [[0, 1, 2], [3, 4, 5]]) == 5
    assert last_to_arrive([2.0, 0.0, 1.0]) == 1  # the world as one group
    assert last_to_arrive([0.0, 4.0, 0.5, 1.0], [[0, 1], [2, 3]]) == 0


def test_a_thousand_samples_keep_the_interval_finite():
    """The binomial tail at large n (log-pmf): 2,500 samples give a proper interval, not NaN or the ends."""
    _ci95_lower_index.cache_clear()
    ordered = [float(index) for index in range(2500)]
    low, high = median_ci95(ordered)
    assert 1150 < low < 1250 and high == 2499 - low and math.isfinite(low)
