"""A soak's view over time: spikes on a pair, and drift of the whole fabric.

Spikes: each direction of each pair is compared with itself across the soak's passes (3 passes or
more): a pass is a spike when the pair's value that pass is an outlier against the pair's own median
over the passes, by the rule of outliers.py (beyond 4 scaled MADs and at least --slow-factor off; the
finder is a sweep's soak's too, results/passes.py). A flaky link shows as spikes on one pair while its
median over the passes, and so the matrix, looks fine.
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
from commbench.measure.robust import BANDWIDTH, LATENCY
from commbench.results.model import Row
from commbench.results.passes import Spike, find_spikes


def pair_spikes(rows: list[Row], factor: float, passes: dict[str, dict[Pair, list[Row]]] | None = None
                ) -> list[Spike]:
    """Every pair direction with at least one spike, the most spikes first, bandwidth before latency
    and pairs in order among equals (``passes``: pair_passes(rows), when the caller has it)."""
    passes = pair_passes(rows) if passes is None else passes
    spikes = []
    for collective, metric in ((BANDWIDTH_COLLECTIVE, BANDWIDTH), (LATENCY_COLLECTIVE, LATENCY)):
        by_pair = passes.get(collective, {})
        spikes += find_spikes([by_pair[pair] for pair in sorted(by_pair)], row_value, metric, factor)
    return sorted(spikes, key=lambda spike: -len(spike.passes))


def spike_pair(spike: Spike) -> Pair:
    """The pair direction a spike is on (pair_passes keeps only rows that name both ranks)."""
    return spike.first.src_rank, spike.first.dst_rank


def describe_spike(spike: Spike, hostnames: list[str]) -> str:
    """'0->5 (h0->h2) bandwidth: 2 of 12 passes off its median 0.412 GB/s, worst 0.31x (at 40 s)'."""
    src, dst = spike_pair(spike)
    metric = spike.metric
    median = f"{spike.median:.{metric.digits}f} {metric.unit}"
    return (f"{src}->{dst} ({hostnames[src]}->{hostnames[dst]}) {metric.name}: {len(spike.passes)} of "
            f"{spike.total} passes off its median {median}, worst {spike.worst_ratio:.2f}x{spike.times()}")


def spike_dict(spike: Spike) -> dict:
    """A spike in the `fabric` part of results.json."""
    src, dst = spike_pair(spike)
    return {"src": src, "dst": dst, "metric": spike.metric.name, "passes": spike.passes,
            "elapsed_s": spike.elapsed_s, "of_passes": spike.total,
            "worst_ratio": round(spike.worst_ratio, 4), "median": spike.median}


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
