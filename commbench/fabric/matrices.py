"""Matrices from fabric rows: rank x rank and host x host, for bandwidth and latency.

Read from rows only (a live run's or a saved file's), so the console, the JSON, plot and report agree;
nothing here or in what reads it (outliers, drift, analysis, tables, heatmap, hooks) imports torch, so
the commands that read saved files stay quick to start.
An entry [a][b] is the direction a -> b: for bandwidth a sends and b receives; for latency a leads the
ping-pong. A pair direction's value in a pass is its p50, or, when the pass measured it again (a
recheck), the better of the two (the higher bandwidth, the lower latency): a slowdown counts only if it
is there both times. A rank-pair value is the median over the soak's passes of those values. A host-pair
value is the median over the rank pairs between the two hosts; the diagonal of the host matrix is the
host's intra-node median (None with one rank on it). Unmeasured entries (the diagonal, pairs --sample
left out) are None.
"""

import statistics
from dataclasses import dataclass

from commbench.core.groups import ranks_by_host
from commbench.results.model import Row

KIND = "fabric"  # Row.pattern of every fabric row; how plot, report and compare recognise a fabric run
BANDWIDTH_COLLECTIVE = "p2p_uni"
LATENCY_COLLECTIVE = "ping_pong"
NODE_COLLECTIVE = "all_reduce"
INTRA, INTER = "intra-node", "inter-node"

Matrix = list[list[float | None]]


def fabric_rows(rows: list[Row]) -> list[Row]:
    return [row for row in rows if row.pattern == KIND and row.time_us_p50 is not None]


def pair_series(rows: list[Row], collective: str) -> dict[tuple[int, int], list[Row]]:
    """(src, dst) -> that direction's rows of ``collective``, in the order measured."""
    found: dict[tuple[int, int], list[Row]] = {}
    for row in fabric_rows(rows):
        if row.collective == collective and row.src_rank is not None and row.dst_rank is not None:
            found.setdefault((row.src_rank, row.dst_rank), []).append(row)
    return found


def row_value(row: Row) -> float:
    """What a row says: a pair's bandwidth (GB/s), a group's all_reduce bus bandwidth (GB/s), or a
    pair's latency (half a round trip, µs)."""
    if row.collective == BANDWIDTH_COLLECTIVE:
        return row.algbw_gbps or 0.0
    if row.collective == NODE_COLLECTIVE:
        return row.busbw_gbps or 0.0
    return float(row.time_us_p50 or 0.0)


def pass_values(series: list[Row]) -> list[Row]:
    """One row per pass of one measurement's rows: the better one where the pass has two (a recheck)."""
    best: dict[int, Row] = {}
    for row in series:
        known = best.get(row.repeat)
        if known is None or (row_value(row) < row_value(known)) == (row.collective == LATENCY_COLLECTIVE):
            best[row.repeat] = row
    return [best[repeat] for repeat in sorted(best)]


def pair_values(rows: list[Row], collective: str) -> dict[tuple[int, int], float]:
    """(src, dst) -> the median over passes of that direction's value."""
    return {pair: statistics.median(row_value(row) for row in pass_values(series))
            for pair, series in pair_series(rows, collective).items()}


def pair_class(hostnames: list[str], src: int, dst: int) -> str:
    return INTRA if hostnames[src] == hostnames[dst] else INTER


def rank_matrix(values: dict[tuple[int, int], float], world_size: int) -> Matrix:
    matrix: Matrix = [[None] * world_size for _ in range(world_size)]
    for (src, dst), value in values.items():
        matrix[src][dst] = value
    return matrix


def host_matrix(values: dict[tuple[int, int], float], hostnames: list[str]) -> Matrix:
    hosts = list(ranks_by_host(hostnames))
    index = {host: position for position, host in enumerate(hosts)}
    cells: dict[tuple[int, int], list[float]] = {}
    for (src, dst), value in values.items():
        cells.setdefault((index[hostnames[src]], index[hostnames[dst]]), []).append(value)
    matrix: Matrix = [[None] * len(hosts) for _ in hosts]
    for (row, column), found in cells.items():
        matrix[row][column] = statistics.median(found)
    return matrix


def class_medians(values: dict[tuple[int, int], float], hostnames: list[str]) -> dict[str, float]:
    """The median of each class (intra-node, inter-node) that has measurements."""
    by_class: dict[str, list[float]] = {}
    for (src, dst), value in values.items():
        by_class.setdefault(pair_class(hostnames, src, dst), []).append(value)
    return {name: statistics.median(found) for name, found in by_class.items()}


@dataclass(frozen=True)
class NodeResult:
    """One all_reduce group's result: within a host, or across one rank per host."""

    layout: str
    host: str
    ranks: int
    busbw_gbps: float | None
    time_us: float


def node_results(rows: list[Row]) -> list[NodeResult]:
    """Each all_reduce group's median over passes (of each pass's better measurement, as for pairs)."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in fabric_rows(rows):
        if row.collective == NODE_COLLECTIVE:
            groups.setdefault((row.group_layout, row.host), []).append(row)
    results = []
    for (layout, host), found in groups.items():
        best = pass_values(found)
        bandwidths = [row.busbw_gbps for row in best if row.busbw_gbps is not None]
        results.append(NodeResult(layout, host, found[0].group_size,
                                  statistics.median(bandwidths) if bandwidths else None,
                                  statistics.median(float(row.time_us_p50 or 0.0) for row in best)))
    return results


@dataclass(frozen=True)
class FabricMatrices:
    hostnames: list[str]  # per rank
    hosts: list[str]  # in the order of their first rank
    bandwidth_gbps: Matrix
    latency_us: Matrix
    host_bandwidth_gbps: Matrix
    host_latency_us: Matrix
    nodes: list[NodeResult]

    def ranks_by_host_order(self) -> list[int]:
        """Every rank, grouped by host (hosts in order of their first rank)."""
        return [rank for ranks in ranks_by_host(self.hostnames).values() for rank in ranks]


def build_matrices(rows: list[Row], hostnames: list[str]) -> FabricMatrices:
    bandwidth = pair_values(rows, BANDWIDTH_COLLECTIVE)
    latency = pair_values(rows, LATENCY_COLLECTIVE)
    world_size = len(hostnames)
    return FabricMatrices(hostnames=list(hostnames), hosts=list(ranks_by_host(hostnames)),
                          bandwidth_gbps=rank_matrix(bandwidth, world_size),
                          latency_us=rank_matrix(latency, world_size),
                          host_bandwidth_gbps=host_matrix(bandwidth, hostnames),
                          host_latency_us=host_matrix(latency, hostnames), nodes=node_results(rows))
