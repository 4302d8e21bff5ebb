"""Statistics over timing samples, cross-rank aggregation and bandwidth."""

import math
from dataclasses import dataclass


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    position = fraction * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return sorted_values[low] * (1 - weight) + sorted_values[high] * weight


def slowest_rank_per_iteration(per_rank: list[list[float]]) -> list[float]:
    """An iteration ends when its last rank does: the max over ranks, iteration by iteration."""
    return [max(values) for values in zip(*per_rank, strict=True)]


@dataclass(frozen=True)
class Summary:
    p50: float
    p95: float
    min: float
    max: float
    mean: float


def summarize(samples: list[float]) -> Summary:
    ordered = sorted(samples)
    return Summary(
        p50=percentile(ordered, 0.50),
        p95=percentile(ordered, 0.95),
        min=ordered[0],
        max=ordered[-1],
        mean=sum(ordered) / len(ordered),
    )


def algbw_gbps(size_bytes: int, seconds: float) -> float | None:
    """Algorithm bandwidth in GB/s (1e9 bytes): the size over the time; None when no data moves."""
    if size_bytes <= 0 or seconds <= 0:
        return None
    return size_bytes / seconds / 1e9


def rank_means(per_rank: list[list[float]]) -> list[float]:
    """Each rank's own mean over its samples (before the max over ranks)."""
    return [sum(values) / len(values) for values in per_rank]


def arrival_skews(arrivals_per_rank: list[list[float]], groups: list[list[int]] | None = None
                  ) -> list[float]:
    """Each rank's arrival skew: how long before the last rank of its group it entered, averaged over
    samples.

    ``arrivals_per_rank[r][i]`` is when rank r entered sample i, relative to the barrier that opened the
    timed region. Groups do not wait for each other, so skews are taken within each group (``groups``
    lists the global ranks of each; None: the world is one group). The rank the others waited for has
    a skew near 0.
    """
    groups = groups or [list(range(len(arrivals_per_rank)))]
    skews = [0.0] * len(arrivals_per_rank)
    for ranks in groups:
        latest = [max(values) for values in zip(*(arrivals_per_rank[r] for r in ranks), strict=True)]
        for rank in ranks:
            mine = arrivals_per_rank[rank]
            skews[rank] = sum(last - own for last, own in zip(latest, mine, strict=True)) / len(mine)
    return skews


def last_to_arrive(skews: list[float], groups: list[list[int]] | None = None) -> int:
    """The rank the others waited for longest: in the group with the largest skew, its rank with the
    smallest skew."""
    groups = groups or [list(range(len(skews)))]
    widest = max(groups, key=lambda ranks: max(skews[r] for r in ranks))
    return min(widest, key=lambda rank: skews[rank])
