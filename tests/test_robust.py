"""The robust outlier rule (measure/robust.py) against a textbook computation written here, apart from
the product's helpers: the median of the values (the mean of the two middle ones for an even count), the
median absolute deviation of their logarithms from the median's, scaled by 1.4826, and a value slow when
it is at least max(4 scaled MADs, ln F) beyond the median on its metric's slow side."""

import math
import warnings

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from commbench.measure.robust import (
    BANDWIDTH,
    LATENCY,
    as_bandwidth,
    gap_factor,
    relative,
    robust_spread,
    slow_mask,
)

FLOOR = 1e-30  # the documented floor: a value of 0 is as slow as can be
# A logarithm may differ from math.log's in its last bit (numpy's vectorised log): a distance this close
# to the line is a tie the rule settles with its own 1e-12 tolerance, not a disagreement.
NEAR_THE_LINE = 1e-9

scattered = st.lists(st.one_of(st.floats(min_value=1e-6, max_value=1e9), st.just(0.0)), min_size=1,
                     max_size=40)
# Peers around one centre, a few far off: distances near 4 scaled MADs, where the rule's line is drawn.
clustered = st.builds(lambda centre, offsets: [centre * math.exp(offset) for offset in offsets],
                      st.floats(min_value=1e-3, max_value=1e6),
                      st.lists(st.floats(min_value=-3.0, max_value=3.0), min_size=1, max_size=40))
values = st.one_of(scattered, clustered)
factors = st.floats(min_value=1.0, max_value=20.0)
metrics = st.sampled_from([BANDWIDTH, LATENCY])


def textbook_median(numbers: list[float]) -> float:
    ordered = sorted(numbers)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def textbook_log(value: float) -> float:
    return math.log(max(value, FLOOR))


def textbook_spread(numbers: list[float]) -> tuple[float, float]:
    median = textbook_median(numbers)
    deviations = [abs(textbook_log(value) - textbook_log(median)) for value in numbers]
    return median, 1.4826 * textbook_median(deviations)


def textbook_distance(value: float, median: float, higher_is_better: bool) -> float:
    """How far ``value`` is beyond the median on the slow side, in natural log units."""
    beyond = textbook_log(value) - textbook_log(median)
    return -beyond if higher_is_better else beyond


@settings(deadline=None)
@given(values)
def test_the_spread_is_the_median_and_the_scaled_mad_of_the_logarithms(numbers):
    median, sigma = robust_spread(numbers)
    expected_median, expected_sigma = textbook_spread(numbers)
    assert median == expected_median
    assert math.isclose(sigma, expected_sigma, rel_tol=1e-12, abs_tol=1e-12)


@settings(deadline=None)
@given(values, metrics, factors)
def test_a_value_is_slow_exactly_when_the_textbook_rule_says_so(numbers, metric, factor):
    median, sigma = textbook_spread(numbers)
    line = max(4 * sigma, math.log(factor))
    distances = [textbook_distance(value, median, metric.higher_is_better) for value in numbers]
    assume(all(abs(distance - line) > NEAR_THE_LINE for distance in distances))
    mask = slow_mask(numbers, *robust_spread(numbers), metric, factor)
    assert mask.tolist() == [distance > line for distance in distances]


@settings(deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e9), metrics, factors)
def test_a_scalar_is_an_array_of_one_and_never_its_own_outlier(value, metric, factor):
    assert robust_spread([value]) == (value, 0.0)
    assert slow_mask([value], value, 0.0, metric, max(factor, 1.0 + 1e-6)).tolist() == [False]


@settings(deadline=None)
@given(st.floats(min_value=1e-3, max_value=1e6), st.floats(min_value=1.1, max_value=20.0), metrics)
def test_a_value_exactly_the_factor_off_with_quiet_peers_is_slow(median, factor, metric):
    off = median / factor if metric.higher_is_better else median * factor
    peers = [median] * 5
    assert slow_mask([*peers, off], *robust_spread([*peers, off]), metric, factor).tolist() == \
        [False] * 5 + [True]


@settings(deadline=None)
@given(st.floats(min_value=0.0, max_value=2.0), factors)
def test_the_gap_is_the_larger_of_four_scaled_mads_and_the_factor(log_sigma, factor):
    assert math.isclose(gap_factor(log_sigma, factor), max(math.exp(4 * log_sigma), factor), rel_tol=1e-12)


def test_a_value_relative_to_its_median_and_on_the_bandwidth_scale():
    assert relative(2.0, 10.0) == 0.2 and relative(40.0, 10.0) == 4.0 and relative(0.1, 0.5) == 0.2
    assert relative(5.0, 0.0) == 1.0 and relative(5.0, -1.0) == 1.0  # no median: nothing to be off from
    assert as_bandwidth(0.2, BANDWIDTH) == 0.2  # a fifth of the bandwidth: worse
    assert as_bandwidth(4.0, LATENCY) == 0.25  # four times the latency: a quarter, worse
    assert as_bandwidth(0.5, LATENCY) == 2.0  # half the latency: twice as good
    assert as_bandwidth(0.0, LATENCY) == 1.0


def test_numpy_arrays_are_judged_as_the_lists_they_hold():
    peers = [10.0, 10.5, 9.5, 10.2, 1.0]
    as_list = slow_mask(peers, *robust_spread(peers), BANDWIDTH, 2.0)
    as_array = slow_mask(np.array(peers), *robust_spread(np.array(peers)), BANDWIDTH, 2.0)
    assert as_list.tolist() == as_array.tolist() == [False] * 4 + [True]


def test_a_value_past_a_ratio_of_1e308_is_infinitely_slow_and_says_nothing():
    # a latency of 1e300 against a median of 1e-30 overflows the ratio: the rule takes it as infinitely
    # far (slow), quietly, since a warning would land in the middle of a user's table
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert slow_mask([1e300], 1e-30, 0.0, LATENCY, 2.0).tolist() == [True]
        assert slow_mask([1e-300], 1e300, 0.0, BANDWIDTH, 2.0).tolist() == [True]
