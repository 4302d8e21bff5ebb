"""The robust outlier rule: a value against its peers on a log scale (bandwidths and latencies vary by
factors, not by amounts). With m the peers' median and s = 1.4826 x the median of |ln(p / m)| over the
peers p (their MAD of logarithms, scaled to a normal distribution's standard deviation), a value v is
slow when |ln(v / m)| >= max(4 s, ln F) on the slow side (a bandwidth below m, a latency above), F being
the minimum relative gap. fabric names links and hosts with it (fabric/outliers.py), a soak's passes their
spikes (results/passes.py), the regression gate its noisy points.
"""

import math
import statistics
from dataclasses import dataclass

MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation is 1.4826 MADs
SIGMAS = 4.0  # how far from the median, in scaled MADs, an outlier must be


@dataclass(frozen=True)
class Metric:
    name: str  # bandwidth or latency
    unit: str
    higher_is_better: bool
    digits: int


BANDWIDTH = Metric("bandwidth", "GB/s", True, 3)
LATENCY = Metric("latency", "µs", False, 1)


def _log(value: float) -> float:
    return math.log(max(value, 1e-30))  # a bandwidth of 0 is as slow as can be, not an error


def robust_spread(values: list[float]) -> tuple[float, float]:
    """(median, 1.4826 x the median of |ln(value / median)|): the centre and spread of the rule."""
    median = statistics.median(values)
    return median, MAD_TO_SIGMA * statistics.median(abs(_log(value) - _log(median)) for value in values)


def is_slow(value: float, median: float, log_sigma: float, metric: Metric, factor: float) -> bool:
    """The rule of the module docstring for one value against its peers' median and log spread."""
    distance = _log(value) - _log(median)
    if metric.higher_is_better:
        distance = -distance
    return distance >= max(SIGMAS * log_sigma, math.log(factor)) - 1e-12  # exactly F x off counts


def relative(value: float, median: float) -> float:
    """How many times the median a value is (bandwidth 0.2: a fifth; latency 4: four times)."""
    return value / median if median > 0 else 1.0


def as_bandwidth(ratio: float, metric: Metric) -> float:
    """A ratio on one scale, lower worse: latency's is inverted."""
    return ratio if metric.higher_is_better else 1.0 / ratio if ratio > 0 else 1.0
