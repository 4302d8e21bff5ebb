"""A fabric run's conclusions from its rows: matrices, slow measurements, suspects, spikes, the verdict.

Suspects come from the matrices (each pair's median over the soak's passes); spikes are a view of a
soak over time, reported beside the verdict but naming no suspect (a single pass can be disturbed by
anything else on the machine; a flaky link is for a person to read off the spikes and the figure).
Computed from rows and host names alone, the same way on every rank during a run (so every rank knows
the exit status) and on a saved file (plot, report); to_dict is the `fabric` part of results.json.
"""

import gc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from commbench.core.words import plural
from commbench.fabric.drift import PassMedian, drift_line, pair_spikes, pass_medians, spike_dict
from commbench.fabric.matrices import (
    BANDWIDTH_COLLECTIVE,
    LATENCY_COLLECTIVE,
    FabricMatrices,
    build_matrices,
    class_medians,
    median_values,
    pair_passes,
)
from commbench.fabric.outliers import (
    DEFAULT_SLOW_FACTOR,
    MIN_JUDGED,
    Judged,
    Judgements,
    Suspect,
    drain_list,
    find_suspects,
)
from commbench.measure.robust import BANDWIDTH, LATENCY, MAD_TO_SIGMA, SIGMAS
from commbench.results.model import Row
from commbench.results.passes import Spike


@dataclass
class FabricAnalysis:
    matrices: FabricMatrices
    judged: Judgements
    suspects: list[Suspect]
    spikes: list[Spike]
    passes: list[PassMedian]
    medians: dict[str, dict[str, float]]  # metric -> class -> median
    slow_factor: float

    @property
    def slow(self) -> list[Judged]:
        return sorted(self.judged.slow(),
                      key=lambda item: item.ratio if item.metric.higher_is_better else -item.ratio)

    @property
    def drain(self) -> list[str]:
        return drain_list(self.suspects)

    def verdict_lines(self) -> list[str]:
        """'verdict: nothing suspicious ...', or the suspects in order, each with its evidence."""
        if not self.judged:
            return ["verdict: nothing measured"]
        if not self.suspects:
            return [f"verdict: nothing suspicious: no pair is {self.slow_factor:g}x off the median of its "
                    f"class ({self._medians_text()})"]
        lines = [f"verdict: {plural(len(self.suspects), 'suspect')}, most likely first "
                 f"({self._medians_text()})"]
        for index, suspect in enumerate(self.suspects, start=1):
            lines.append(f"  {index}. {suspect.label}")
            lines.extend(f"     {sentence}" for sentence in suspect.evidence)
        if self.drain:
            lines.append(f"drain: {' '.join(self.drain)}")
        return lines

    def _medians_text(self) -> str:
        parts = []
        for metric in (BANDWIDTH, LATENCY):
            for name, value in sorted(self.medians.get(metric.name, {}).items(), reverse=True):
                parts.append(f"{name} {metric.name} median {value:.{metric.digits}f} {metric.unit}")
        return "; ".join(parts)

    def recheck_pairs(self) -> list[tuple[int, int]]:
        """The pairs (lower rank first) of the links named: suspects that rest on one measurement."""
        return sorted({(min(suspect.ranks), max(suspect.ranks)) for suspect in self.suspects
                       if suspect.kind == "link" and suspect.single})

    def recheck_nodes(self) -> bool:
        """Whether a host is named on its intra-node all_reduce alone (one measurement)."""
        return any(suspect.kind == "host" and suspect.single for suspect in self.suspects)

    def drift(self) -> str | None:
        return drift_line(self.passes)

    def to_dict(self) -> dict:
        matrices = self.matrices
        return {
            "hostnames": matrices.hostnames, "hosts": matrices.hosts,
            "bandwidth_gbps": matrices.bandwidth_gbps, "latency_us": matrices.latency_us,
            "host_bandwidth_gbps": matrices.host_bandwidth_gbps, "host_latency_us": matrices.host_latency_us,
            "medians": self.medians,
            "all_reduce": [{"layout": node.layout, "host": node.host, "ranks": node.ranks,
                            "busbw_gbps": node.busbw_gbps, "time_us": node.time_us}
                           for node in matrices.nodes],
            "slow": [{"src": item.src, "dst": item.dst, "metric": item.metric.name, "value": item.value,
                      "median": item.median, "class": item.pair_class, "ratio": round(item.ratio, 4)}
                     for item in self.slow],
            "suspects": [suspect.to_dict() for suspect in self.suspects],
            "drain": self.drain,
            "spikes": [spike_dict(spike) for spike in self.spikes],
            "passes": [{"repeat": item.repeat, "elapsed_s": item.elapsed_s,
                        "median_bandwidth_gbps": item.bandwidth_gbps} for item in self.passes],
            "verdict": self.verdict_lines(),
            "rule": {"slow_factor": self.slow_factor, "sigmas": SIGMAS, "mad_to_sigma": MAD_TO_SIGMA,
                     "min_judged": MIN_JUDGED},
        }


def analyse(rows: list[Row], hostnames: list[str], slow_factor: float) -> FabricAnalysis:
    collecting = gc.isenabled()
    gc.disable()  # millions of rows and pairs, and no cycles: the collector would walk them again and again
    try:
        return _analyse(rows, hostnames, slow_factor)
    finally:
        if collecting:
            gc.enable()


def _analyse(rows: list[Row], hostnames: list[str], slow_factor: float) -> FabricAnalysis:
    passes = pair_passes(rows)  # the one pass over the rows: everything else works on the pairs
    by_collective = {collective: median_values(passes.get(collective, {}))
                     for collective in (BANDWIDTH_COLLECTIVE, LATENCY_COLLECTIVE)}
    matrices = build_matrices(rows, hostnames, by_collective)
    values = {metric.name: by_collective[collective]
              for collective, metric in ((BANDWIDTH_COLLECTIVE, BANDWIDTH), (LATENCY_COLLECTIVE, LATENCY))}
    medians = {name: class_medians(found, hostnames) for name, found in values.items()}
    suspects, judged = find_suspects(values, hostnames, matrices.nodes, slow_factor)
    return FabricAnalysis(matrices, judged, suspects, pair_spikes(rows, slow_factor, passes),
                          pass_medians(rows, passes), medians, slow_factor)


def recorded_slow_factor(config: Mapping[str, Any]) -> float:
    """The --slow-factor a run recorded (its meta.config), or the default where that is missing or not a
    factor above 1 (a file from elsewhere)."""
    factor = config.get("slow_factor", DEFAULT_SLOW_FACTOR)
    if not isinstance(factor, int | float) or isinstance(factor, bool) or not factor > 1:
        return DEFAULT_SLOW_FACTOR
    return float(factor)
