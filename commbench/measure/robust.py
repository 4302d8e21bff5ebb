"""The robust outlier rule: a value against its peers on a log scale (bandwidths and latencies vary by
factors, not by amounts). With m the peers' median and s = 1.4826 x the median of |ln(p / m)| over the
peers p (their MAD of logarithms, scaled to a normal distribution's standard deviation), a value v is
slow when |ln(v / m)| >= max(4 s, ln F) on the slow side (a bandwidth below m, a latency above), F being
the minimum relative gap. fabric names links and hosts with it (fabric/outliers.py, fabric/judging.py)
and finds a soak's spikes on a pair, a sweep's soak its spikes (results/passes.py).

This is the rule's one home, written over arrays: fabric judges a million measurements at once (1,024
ranks), a soak a measurement's few passes, and a scalar is an array of one. The median of an even count
is the mean of the two middle values; a value is floored at 1e-30 before its logarithm (a bandwidth of 0
is as slow as can be, not an error); a value exactly F x off counts (a tolerance of 1e-12 at the gap).
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation is 1.4826 MADs
SIGMAS = 4.0  # how far from the median, in scaled MADs, an outlier must be
FLOOR = 1e-30  # the smallest value taken for its logarithm


@dataclass(frozen=True)
class Metric:
    name: str  # bandwidth or latency
    unit: str
    higher_is_better: bool
    digits: int


BANDWIDTH = Metric("bandwidth", "GB/s", True, 3)
LATENCY = Metric("latency", "µs", False, 1)


def _array(values: Iterable[float] | np.ndarray) -> np.ndarray:
    return values if isinstance(values, np.ndarray) else np.fromiter(values, dtype=np.float64)


def _log_distance(values: np.ndarray, median: float) -> np.ndarray:
    """ln(value / median) of every value, both floored. The ratio is taken first: a value equal to the
    median is exactly 0 away (numpy's vectorised log and math.log may differ in the last bit, which put a
    lone value 1e-16 from itself)."""
    # a ratio past 1e308 is infinitely far, one below 1e-308 is 0 and its logarithm -inf: as it should be
    with np.errstate(over="ignore", divide="ignore"):
        return np.log(np.maximum(values, FLOOR) / max(median, FLOOR))


def robust_spread(values: Iterable[float] | np.ndarray) -> tuple[float, float]:
    """(median, 1.4826 x the median of |ln(value / median)|): the centre and spread of the rule."""
    array = _array(values)
    median = float(np.median(array))
    return median, MAD_TO_SIGMA * float(np.median(np.abs(_log_distance(array, median))))


def slow_mask(values: Iterable[float] | np.ndarray, median: float, log_sigma: float, metric: Metric,
              factor: float) -> np.ndarray:
    """Which values are slow against one median and log spread (the rule of the module docstring)."""
    distance = _log_distance(_array(values), median)
    if metric.higher_is_better:
        distance = -distance
    return distance >= _log_gap(log_sigma, factor) - 1e-12  # exactly F x off counts


def _log_gap(log_sigma: float, factor: float) -> float:
    return max(SIGMAS * log_sigma, math.log(factor))


def gap_factor(log_sigma: float, factor: float) -> float:
    """How many times off the median a value must be to be slow: exp(max(4 s, ln F)), F or more."""
    return math.exp(_log_gap(log_sigma, factor))


def relative(value: float, median: float) -> float:
    """How many times the median a value is (bandwidth 0.2: a fifth; latency 4: four times)."""
    return value / median if median > 0 else 1.0


def as_bandwidth(ratio: float, metric: Metric) -> float:
    """A ratio on one scale, lower worse: latency's is inverted."""
    return ratio if metric.higher_is_better else 1.0 / ratio if ratio > 0 else 1.0
