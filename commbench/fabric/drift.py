"""A soak's view over time: spikes on a pair, and drift of the whole fabric.

Spikes: each direction of each pair is compared with itself across the soak's passes (3 passes or
more): a pass is a spike when the pair's value that pass is an outlier against the pair's own median
over the passes, by the rule of outliers.py (beyond 4 scaled MADs and at least --slow-factor off). A
flaky link shows as spikes on one pair while its median over the passes, and so the matrix, looks fine.
Drift: per pass, the median bandwidth over all pairs; its change from the first pass to the last.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from commbench.fabric.matrices import (
    BANDWIDTH_COLLECTIVE,
    LATENCY_COLLECTIVE,
    Pair,
    PairPasses,
    measured_passes,
    pair_passes,
    row_value,
)
from commbench.measure.robust import BANDWIDTH, LATENCY, Metric, is_slow, relative, robust_spread
from commbench.results.model import Row

MIN_PASSES = 3  # fewer passes give a pair no median of its own to compare with


@dataclass(frozen=True)
class Spike:
    """The passes in which one direction of one pair fell far off its own median."""

    src: int
    dst: int
    metric: Metric
    passes: list[int]  # Row.repeat of each spike
    elapsed_s: list[float | None]  # when each was measured
    total: int  # passes measured
    worst_ratio: float  # the worst spike's value over the pair's median
    median: float

    def describe(self, hostnames: list[str]) -> str:
        when = ", ".join(f"{value:.0f} s" for value in self.elapsed_s if value is not None)
        median = f"{self.median:.{self.metric.digits}f} {self.metric.unit}"
        return (f"{self.src}->{self.dst} ({hostnames[self.src]}->{hostnames[self.dst]}) {self.metric.name}: "
                f"{len(self.passes)} of {self.total} passes off its median {median}, worst "
                f"{self.worst_ratio:.2f}x" + (f" (at {when})" if when else ""))

    def to_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "metric": self.metric.name, "passes": self.passes,
                "elapsed_s": self.elapsed_s, "of_passes": self.total,
                "worst_ratio": round(self.worst_ratio, 4), "median": self.median}


def find_spikes(rows: list[Row], factor: float, passes: dict[str, dict[Pair, list[Row]]] | None = None
                ) -> list[Spike]:
    """Every pair direction with at least one spike, the worst first (``passes``: pair_passes(rows),
    when the caller has it)."""
    passes = pair_passes(rows) if passes is None else passes
    spikes = []
    for collective, metric in ((BANDWIDTH_COLLECTIVE, BANDWIDTH), (LATENCY_COLLECTIVE, LATENCY)):
        repeated = [(pair, series) for pair, series in passes.get(collective, {}).items()
                    if len(series) >= MIN_PASSES]
        for (src, dst), series in sorted(repeated):
            values = [row_value(row) for row in series]
            median, sigma = robust_spread(values)
            off = [row for row, value in zip(series, values, strict=True)
                   if is_slow(value, median, sigma, metric, factor)]
            if not off:
                continue
            ratios = [relative(row_value(row), median) for row in off]
            worst = min(ratios) if metric.higher_is_better else max(ratios)
            spikes.append(Spike(src, dst, metric, [row.repeat for row in off], [row.elapsed_s for row in off],
                                len(series), worst, median))
    return sorted(spikes, key=lambda spike: -len(spike.passes))


@dataclass(frozen=True)
class PassMedian:
    repeat: int
    elapsed_s: float | None  # when the pass's last bandwidth row was measured
    bandwidth_gbps: float


def pass_medians(rows: Sequence[Row], passes: Mapping[str, PairPasses] | None = None) -> list[PassMedian]:
    """Per pass, the median bandwidth over every pair direction measured in it (``passes``:
    measured_passes(rows), when the caller has it)."""
    passes = measured_passes(rows) if passes is None else passes
    bandwidth = passes.get(BANDWIDTH_COLLECTIVE)
    if bandwidth is None:
        return []
    medians = []
    for repeat in np.unique(bandwidth.repeat).tolist():
        chosen = bandwidth.repeat == repeat
        elapsed = bandwidth.elapsed_s[chosen]
        elapsed = elapsed[~np.isnan(elapsed)]
        medians.append(PassMedian(repeat, float(elapsed.max()) if elapsed.size else None,
                                  float(np.median(bandwidth.value[chosen]))))
    return medians


def drift_line(medians: list[PassMedian]) -> str | None:
    """'drift: median bandwidth per pass 0.412 -> 0.398 GB/s over 12 passes (-3.4%)'; None for one pass."""
    if len(medians) < 2 or medians[0].bandwidth_gbps <= 0:
        return None
    first, last = medians[0].bandwidth_gbps, medians[-1].bandwidth_gbps
    low = min(item.bandwidth_gbps for item in medians)
    return (f"drift: median bandwidth per pass {first:.3f} -> {last:.3f} GB/s over {len(medians)} passes "
            f"({100 * (last / first - 1):+.1f}%; lowest {low:.3f})")
