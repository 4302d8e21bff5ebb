"""A fabric run's conclusions from its rows: matrices, slow measurements, suspects, spikes, the verdict.

Suspects come from the matrices (each pair's median over the soak's passes); spikes are a view of a
soak over time, reported beside the verdict but naming no suspect (a single pass can be disturbed by
anything else on the machine; a flaky link is for a person to read off the spikes and the figure).
Computed from rows and host names alone, the same way on every rank during a run (so every rank knows
the exit status) and on a saved file (plot, report); to_dict is the `fabric` part of results.json (the
matrices' entries as numpy arrays, which the writer writes as JSON lists).
"""

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from commbench.fabric.drift import MIN_PASSES, PassMedian, Spike, drift_line, find_spikes, pass_medians
from commbench.fabric.matrices import (
    BANDWIDTH_COLLECTIVE,
    LATENCY_COLLECTIVE,
    FabricMatrices,
    Pair,
    PairPasses,
    build_matrices,
    class_medians,
    measured_passes,
    pair_medians,
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
        count = len(self.suspects)
        noun = "suspects" if count > 1 else "suspect"
        lines = [f"verdict: {count} {noun}, most likely first ({self._medians_text()})"]
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
            "bandwidth_gbps": matrices.bandwidth_gbps.to_dict(), "latency_us": matrices.latency_us.to_dict(),
            "host_bandwidth_gbps": matrices.host_bandwidth_gbps.to_dict(),
            "host_latency_us": matrices.host_latency_us.to_dict(),
            "medians": self.medians,
            "all_reduce": [{"layout": node.layout, "host": node.host, "ranks": node.ranks,
                            "busbw_gbps": node.busbw_gbps, "time_us": node.time_us}
                           for node in matrices.nodes],
            "slow": [{"src": item.src, "dst": item.dst, "metric": item.metric.name, "value": item.value,
                      "median": item.median, "class": item.pair_class, "ratio": round(item.ratio, 4)}
                     for item in self.slow],
            "suspects": [suspect.to_dict() for suspect in self.suspects],
            "drain": self.drain,
            "spikes": [spike.to_dict() for spike in self.spikes],
            "passes": [{"repeat": item.repeat, "elapsed_s": item.elapsed_s,
                        "median_bandwidth_gbps": item.bandwidth_gbps} for item in self.passes],
            "verdict": self.verdict_lines(),
            "rule": {"slow_factor": self.slow_factor, "sigmas": SIGMAS, "mad_to_sigma": MAD_TO_SIGMA,
                     "min_judged": MIN_JUDGED},
        }


def analyse(rows: Sequence[Row], hostnames: list[str], slow_factor: float) -> FabricAnalysis:
    collecting = gc.isenabled()
    gc.disable()  # millions of rows and pairs, and no cycles: the collector would walk them again and again
    try:
        return _analyse(rows, hostnames, slow_factor)
    finally:
        if collecting:
            gc.enable()


def _analyse(rows: Sequence[Row], hostnames: list[str], slow_factor: float) -> FabricAnalysis:
    passes = measured_passes(rows)  # the one pass over the rows, a column at a time
    by_collective = pair_medians(passes, len(hostnames))
    matrices = build_matrices(rows, hostnames, by_collective)
    values = {metric.name: by_collective[collective]
              for collective, metric in ((BANDWIDTH_COLLECTIVE, BANDWIDTH), (LATENCY_COLLECTIVE, LATENCY))}
    medians = {name: class_medians(found, hostnames) for name, found in values.items()}
    suspects, judged = find_suspects(values, hostnames, matrices.nodes, slow_factor)
    return FabricAnalysis(matrices, judged, suspects, find_spikes(rows, slow_factor, _repeated(rows, passes)),
                          pass_medians(rows, passes), medians, slow_factor)


def _repeated(rows: Sequence[Row], passes: dict[str, PairPasses]) -> dict[str, dict[Pair, list[Row]]]:
    """The pair directions measured in MIN_PASSES passes or more, with each pass's row: the only ones
    find_spikes looks at (a single pass has none, so its rows are never each built)."""
    found: dict[str, dict[Pair, list[Row]]] = {}
    for collective, table in passes.items():
        found[collective] = {
            (int(table.src[start]), int(table.dst[start])): [rows[index] for index in
                                                             table.row[start:start + count].tolist()]
            for start, count in zip(table.starts.tolist(), table.counts().tolist(), strict=True)
            if count >= MIN_PASSES}
    return found


def recorded_slow_factor(config: Mapping[str, Any]) -> float:
    """The --slow-factor a run recorded (its meta.config), or the default where that is missing or not a
    factor above 1 (a file from elsewhere)."""
    factor = config.get("slow_factor", DEFAULT_SLOW_FACTOR)
    if not isinstance(factor, int | float) or isinstance(factor, bool) or not factor > 1:
        return DEFAULT_SLOW_FACTOR
    return float(factor)
