"""Statistics over timing samples, cross-rank aggregation, confidence intervals and bandwidth."""

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

# Per-rank series ([rank][sample]) are lists of lists, or one 2-D array (a sweep's gathered samples:
# at thousands of ranks a Python float per value would cost seconds per size), reduced with numpy.
PerRank = Any


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    position = fraction * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return sorted_values[low] * (1 - weight) + sorted_values[high] * weight


def _matrix(per_rank: PerRank) -> np.ndarray:
    """[rank][sample] as a 2-D array; ValueError when the ranks' series differ in length."""
    values = np.asarray(per_rank, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"per-rank series of unequal lengths (shape {values.shape})")
    return values


def has_samples(per_rank: PerRank) -> bool:
    """Whether [rank][sample] holds any sample (a timer may record no arrivals or host times)."""
    return len(per_rank) > 0 and len(per_rank[0]) > 0


def slowest_rank_per_iteration(per_rank: PerRank) -> list[float]:
    """An iteration ends when its last rank does: the max over ranks, iteration by iteration."""
    if len(per_rank) == 0:
        return []
    return _matrix(per_rank).max(axis=0).tolist()


def _binomial_half_cdf(n: int) -> list[float]:
    """P(X <= k) for X ~ Binomial(n, 1/2), k = 0..n, via log-pmf so large n stays finite."""
    log_half_n = n * math.log(0.5)
    total, cdf = 0.0, []
    for k in range(n + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half_n)
        cdf.append(min(total, 1.0))
    return cdf


MIN_SAMPLES_FOR_CI = 6  # below this no pair of order statistics covers the median with 95%


def median_ci95(sorted_values: list[float]) -> tuple[float, float] | None:
    """A distribution-free 95% confidence interval for the median, from order statistics.

    With n samples, the k-th smallest lies below the true median with probability P(Binomial(n, 1/2)
    >= k); the interval [x_(k), x_(n+1-k)] for the largest k with P(Binomial(n, 1/2) < k) <= 2.5% covers
    the median with probability at least 95%, whatever the distribution. None below 6 samples.
    """
    n = len(sorted_values)
    if n < MIN_SAMPLES_FOR_CI:
        return None
    lower = _ci95_lower_index(n)
    return sorted_values[lower], sorted_values[n - 1 - lower]


@lru_cache(maxsize=4096)
def _ci95_lower_index(n: int) -> int:
    """The 0-based index of the interval's lower bound among n sorted samples (one per n: a run asks
    for the same few counts thousands of times)."""
    cdf = _binomial_half_cdf(n)  # cdf[j] = P(X <= j): the chance that x_(j+1) (0-based j) is above it
    first_above = next(j for j in range(n) if cdf[j] > 0.025)
    return first_above - 1  # P(X <= lower) <= 2.5%


@dataclass(frozen=True)
class Summary:
    p50: float
    p95: float
    p99: float
    min: float
    max: float
    mean: float
    stdev: float  # sample standard deviation (n - 1); 0 for a single sample
    cv: float  # coefficient of variation: stdev / mean
    ci95_low: float | None
    ci95_high: float | None

    @property
    def ci95_rel(self) -> float | None:
        """Half the width of the median's 95% CI over the median: the median is known to +- this."""
        if self.ci95_low is None or self.ci95_high is None or self.p50 <= 0:
            return None
        return (self.ci95_high - self.ci95_low) / (2 * self.p50)


def summarize(samples: list[float]) -> Summary:
    ordered = sorted(samples)
    count = len(ordered)
    mean = sum(ordered) / count
    stdev = math.sqrt(sum((value - mean) ** 2 for value in ordered) / (count - 1)) if count > 1 else 0.0
    interval = median_ci95(ordered)
    return Summary(
        p50=percentile(ordered, 0.50),
        p95=percentile(ordered, 0.95),
        p99=percentile(ordered, 0.99),
        min=ordered[0],
        max=ordered[-1],
        mean=mean,
        stdev=stdev,
        cv=stdev / mean if mean > 0 else 0.0,
        ci95_low=None if interval is None else interval[0],
        ci95_high=None if interval is None else interval[1],
    )


def ci95_rel(samples: list[float]) -> float | None:
    return summarize(samples).ci95_rel


def algbw_gbps(size_bytes: int, seconds: float) -> float | None:
    """Algorithm bandwidth in GB/s (1e9 bytes): the size over the time; None when no data moves."""
    if size_bytes <= 0 or seconds <= 0:
        return None
    return size_bytes / seconds / 1e9


def rank_means(per_rank: PerRank) -> list[float]:
    """Each rank's own mean over its samples (before the max over ranks)."""
    return _matrix(per_rank).mean(axis=1).tolist()


def arrival_skews(arrivals_per_rank: PerRank, groups: list[list[int]] | None = None) -> list[float]:
    """Each rank's arrival skew: how long before the last rank of its group it entered, averaged over
    samples.

    ``arrivals_per_rank[r][i]`` is when rank r entered sample i, relative to the barrier that opened the
    timed region. Groups do not wait for each other, so skews are taken within each group (``groups``
    lists the global ranks of each; None: the world is one group). The rank the others waited for has
    a skew near 0.
    """
    arrivals = _matrix(arrivals_per_rank)
    if not groups or len(groups) == 1 and len(groups[0]) == len(arrivals):
        groups = [list(range(len(arrivals)))]
    skews = np.zeros(len(arrivals))
    for ranks in groups:
        members = arrivals if len(ranks) == len(arrivals) else arrivals[list(ranks)]
        # the mean of (latest - own) over samples, as the mean of the latest less the rank's own mean
        skews[list(ranks)] = members.max(axis=0).mean() - members.mean(axis=1)
    return skews.tolist()


def last_to_arrive(skews: list[float], groups: list[list[int]] | None = None) -> int:
    """The rank the others waited for longest: in the group with the largest skew, its rank with the
    smallest skew."""
    groups = groups or [list(range(len(skews)))]
    widest = max(groups, key=lambda ranks: max(skews[r] for r in ranks))
    return min(widest, key=lambda rank: skews[rank])
