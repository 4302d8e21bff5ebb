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
