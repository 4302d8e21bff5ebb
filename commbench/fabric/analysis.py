"""A fabric run's conclusions from its rows: matrices, slow measurements, suspects, transients, spikes,
the verdict.

Suspects come from the matrices (each pair's median over the soak's passes, a pass's value the best of
its confirmations: fabric/confirm.py); what a pass's first judgement named and its confirmations
cleared is transient, reported and never named; spikes are a view of a soak over time, reported beside
the verdict but naming no suspect (a single pass can be disturbed by anything else on the machine; a
flaky link is for a person to read off the spikes and the figure). A host running more CPU ranks than
it has usable CPUs is oversubscribed: it is said first, and nothing on it is named (its times include
waits for a core). Computed from rows, host names and the hosts' CPU counts alone, the same way on rank
0 during a run and on a saved file (plot, report; the CPU counts from meta.hardware); to_dict is the
`fabric` part of results.json.
"""

import gc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from commbench.core.groups import ranks_by_host
from commbench.core.words import plural
from commbench.fabric.confirm import CONFIRMATIONS, RECHECK, SLOW_IN, Transient, transient
from commbench.fabric.drift import PassMedian, drift_line, pair_spikes, pass_medians, spike_dict
from commbench.fabric.matrices import (
    BANDWIDTH_COLLECTIVE,
    INTER,
    INTRA,
    LATENCY_COLLECTIVE,
    FabricMatrices,
    build_matrices,
    class_medians,
    fabric_rows,
    median_values,
    node_results,
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
from commbench.measure.robust import BANDWIDTH, LATENCY, MAD_TO_SIGMA, SIGMAS, Metric
from commbench.results.model import Row
from commbench.results.passes import Spike

Crowded = dict[str, tuple[int, int]]  # an oversubscribed host -> (its ranks, its usable CPUs)


@dataclass
class FabricAnalysis:
    matrices: FabricMatrices
    judged: Judgements
    suspects: list[Suspect]
    spikes: list[Spike]
    passes: list[PassMedian]
    medians: dict[str, dict[str, float]]  # metric -> class -> median
    slow_factor: float
    transients: list[Transient] = field(default_factory=list)
    crowded: Crowded = field(default_factory=dict)

    @property
    def slow(self) -> list[Judged]:
        return sorted(self.judged.slow(),
                      key=lambda item: item.ratio if item.metric.higher_is_better else -item.ratio)

    @property
    def drain(self) -> list[str]:
        return drain_list(self.suspects)

    def verdict_lines(self) -> list[str]:
        """What oversubscription explains, then 'verdict: nothing suspicious ...' or the suspects in order,
        each with its evidence; the rule's thresholds as they were; what was transient."""
        lines = [crowded_line(self.crowded)] if self.crowded else []
        if not self.judged:
            return [*lines, "verdict: nothing measured"]
        if set(self.crowded) >= set(self.matrices.hosts):
            return [*lines, "verdict: nothing named: every host is oversubscribed (above)"]
        rule = f"max({SIGMAS:g} scaled MADs, {self.slow_factor:g}x)"
        if not self.suspects:
            lines.append(f"verdict: nothing suspicious: no measurement stayed {rule} slower than the median "
                         "of its class")
        else:
            how = (f"by its median over {len(self.passes)} passes, each pass confirming what it named"
                   if len(self.passes) > 1 else "slow each time it was measured")
            lines.append(f"verdict: {plural(len(self.suspects), 'suspect')}, most likely first ({how}: "
                         f"{rule} slower than the median of its class)")
            for index, suspect in enumerate(self.suspects, start=1):
                lines.append(f"  {index}. {suspect.label}")
                lines.extend(f"     {sentence}" for sentence in suspect.evidence)
        lines.extend(f"  {line}" for line in self.threshold_lines())
        lines.extend(item.line(len(self.passes)) for item in self.transients)
        if self.drain:
            lines.append(f"drain: {' '.join(self.drain)}")
        return lines

    def threshold_lines(self) -> list[str]:
        """Per class and metric, the median and how far off it a measurement had to be to be slow:
        'intra-node bandwidth: median 1.234 GB/s, slow below 0.420 (2.94x)'."""
        return [_threshold_text(part.pair_class, part.metric, part.median, part.threshold)
                for pair_class in (INTRA, INTER) for part in self.judged.classes
                if part.pair_class == pair_class]

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
            "transient": [item.to_dict() for item in self.transients],
            "oversubscribed": {host: {"ranks": ranks, "cpus": cpus}
                               for host, (ranks, cpus) in self.crowded.items()},
            "drain": self.drain,
            "spikes": [spike_dict(spike) for spike in self.spikes],
            "passes": [{"repeat": item.repeat, "elapsed_s": item.elapsed_s,
                        "median_bandwidth_gbps": item.bandwidth_gbps} for item in self.passes],
            "verdict": self.verdict_lines(),
            "rule": {"slow_factor": self.slow_factor, "sigmas": SIGMAS, "mad_to_sigma": MAD_TO_SIGMA,
                     "min_judged": MIN_JUDGED, "slow_in": SLOW_IN, "confirmations": CONFIRMATIONS,
                     "thresholds": [{"metric": part.metric.name, "class": part.pair_class,
                                     "median": part.median, "factor": part.threshold}
                                    for part in self.judged.classes]},
        }


def _threshold_text(pair_class: str, metric: Metric, median: float, threshold: float | None) -> str:
    digits, unit = metric.digits, metric.unit
    text = f"{pair_class} {metric.name}: median {median:.{digits}f} {unit}"
    if threshold is None:
        return f"{text}, not judged (fewer than {MIN_JUDGED} measurements left to judge against)"
    if metric.higher_is_better:
        return f"{text}, slow below {median / threshold:.{digits}f} ({threshold:.2f}x)"
    return f"{text}, slow above {median * threshold:.{digits}f} ({threshold:.2f}x)"


def crowded_line(crowded: Crowded) -> str:
    """'oversubscribed: h0 runs 4 CPU ranks on 2 CPUs: its times include waits for a CPU, so nothing on it
    is named'."""
    hosts = ", ".join(f"{host} runs {ranks} CPU ranks on {plural(cpus, 'CPU')}"
                      for host, (ranks, cpus) in crowded.items())
    return f"oversubscribed: {hosts}: its times include waits for a CPU, so nothing on it is named"


def crowded_hosts(hostnames: list[str], usable_cpus: Mapping[str, int]) -> Crowded:
    """The hosts that run more CPU ranks than they have usable CPUs (``usable_cpus``: by host, where
    known), in the order of their first rank."""
    return {host: (len(ranks), usable_cpus[host]) for host, ranks in ranks_by_host(hostnames).items()
            if usable_cpus.get(host) and len(ranks) > usable_cpus[host]}


def usable_cpus_of(hardware: Any) -> dict[str, int]:
    """Each host's usable CPUs as its record in a run's meta.hardware gives them (load.usable_cpus, the
    CPUs its probing rank could run on); a file from elsewhere: anything of the wrong type is absent."""
    found = {}
    for host, record in (hardware.items() if isinstance(hardware, Mapping) else ()):
        load = record.get("load") if isinstance(record, Mapping) else None
        cpus = load.get("usable_cpus") if isinstance(load, Mapping) else None
        if isinstance(host, str) and isinstance(cpus, int) and not isinstance(cpus, bool) and cpus > 0:
            found[host] = cpus
    return found


def run_crowding(rows: list[Row], hostnames: list[str], hardware: Any) -> Crowded:
    """A run's oversubscribed hosts, from its rows (CPU ranks only) and its meta.hardware."""
    if not any(row.device == "cpu" for row in fabric_rows(rows)):
        return {}
    return crowded_hosts(hostnames, usable_cpus_of(hardware))


def analyse(rows: list[Row], hostnames: list[str], slow_factor: float,
            crowded: Crowded | None = None) -> FabricAnalysis:
    """The analysis of a run's rows; ``crowded``: its oversubscribed hosts (crowded_hosts)."""
    collecting = gc.isenabled()
    gc.disable()  # millions of rows and pairs, and no cycles: the collector would walk them again and again
    try:
        return _analyse(rows, hostnames, slow_factor, crowded or {})
    finally:
        if collecting:
            gc.enable()


def _analyse(rows: list[Row], hostnames: list[str], slow_factor: float, crowded: Crowded) -> FabricAnalysis:
    passes = pair_passes(rows)  # the one pass over the rows: everything else works on the pairs
    by_collective = {collective: median_values(passes.get(collective, {}))
                     for collective in (BANDWIDTH_COLLECTIVE, LATENCY_COLLECTIVE)}
    matrices = build_matrices(rows, hostnames, by_collective)
    values = {metric.name: by_collective[collective]
              for collective, metric in ((BANDWIDTH_COLLECTIVE, BANDWIDTH), (LATENCY_COLLECTIVE, LATENCY))}
    medians = {name: class_medians(found, hostnames) for name, found in values.items()}
    excused = frozenset(crowded)
    suspects, judged = find_suspects(values, hostnames, matrices.nodes, slow_factor, excused)
    return FabricAnalysis(matrices, judged, suspects, pair_spikes(rows, slow_factor, passes),
                          pass_medians(rows, passes), medians, slow_factor,
                          _transients(rows, hostnames, slow_factor, excused), crowded)


def suspects_of(rows: list[Row], hostnames: list[str], slow_factor: float,
                excused: frozenset[str] = frozenset()) -> list[Suspect]:
    """The suspects of one pass's rows (each measurement's value the best of its measurements)."""
    passes = pair_passes(rows)
    values = {metric.name: median_values(passes.get(collective, {}))
              for collective, metric in ((BANDWIDTH_COLLECTIVE, BANDWIDTH), (LATENCY_COLLECTIVE, LATENCY))}
    return find_suspects(values, hostnames, node_results(rows), slow_factor, excused)[0]


def _transients(rows: list[Row], hostnames: list[str], slow_factor: float,
                excused: frozenset[str]) -> list[Transient]:
    """Every pass's transients: the suspects of its first judgement (its rows but the confirmations')
    that the pass as a whole does not name."""
    confirmed_passes = {row.repeat for row in rows if row.phase == RECHECK}
    if not confirmed_passes:
        return []
    by_pass: dict[int, list[Row]] = {}
    for row in fabric_rows(rows):
        if row.repeat in confirmed_passes:
            by_pass.setdefault(row.repeat, []).append(row)
    found = []
    for repeat, measured in sorted(by_pass.items()):
        named = {suspect.name for suspect in suspects_of(measured, hostnames, slow_factor, excused)}
        first_time = [row for row in measured if row.phase != RECHECK]
        found += [transient(repeat, suspect, measured)
                  for suspect in suspects_of(first_time, hostnames, slow_factor, excused)
                  if suspect.name not in named]
    return found


def recorded_slow_factor(config: Mapping[str, Any]) -> float:
    """The --slow-factor a run recorded (its meta.config), or the default where that is missing or not a
    factor above 1 (a file from elsewhere)."""
    factor = config.get("slow_factor", DEFAULT_SLOW_FACTOR)
    if not isinstance(factor, int | float) or isinstance(factor, bool) or not factor > 1:
        return DEFAULT_SLOW_FACTOR
    return float(factor)
