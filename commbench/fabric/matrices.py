"""Matrices from fabric rows: rank x rank and host x host, for bandwidth and latency.

Read from rows only (a live run's or a saved file's), so the console, the JSON, plot and report agree;
nothing here or in what reads it (outliers, drift, analysis, tables, heatmap, hooks) imports torch, so
the commands that read saved files stay quick to start.
An entry [a][b] is the direction a -> b: for bandwidth a sends and b receives; for latency a leads the
ping-pong. A pair direction's value in a pass is its p50, or, when the pass measured it again (its
confirmations, fabric/confirm.py), the best of them (the higher bandwidth, the lower latency): a
slowdown counts only if it is there every time. A rank-pair value is the median over the soak's
passes of those values. A host-pair value is the median over the rank pairs between the two hosts; the
diagonal of the host matrix is the host's intra-node median (None with one rank on it). Unmeasured
entries (the diagonal, pairs --sample left out) are None.
"""

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

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


Pair = tuple[int, int]


def pair_series(rows: list[Row], collective: str) -> dict[Pair, list[Row]]:
    """(src, dst) -> that direction's rows of ``collective``, in the order measured."""
    found: dict[Pair, list[Row]] = {}
    for row in fabric_rows(rows):
        if row.collective == collective and row.src_rank is not None and row.dst_rank is not None:
            found.setdefault((row.src_rank, row.dst_rank), []).append(row)
    return found


def _better(row: Row, known: Row) -> bool:
    """Whether ``row`` replaces ``known`` as its pass's value: a higher bandwidth, a lower latency (a
    bandwidth tie goes to the later row)."""
    return (row_value(row) < row_value(known)) == (row.collective == LATENCY_COLLECTIVE)


def pair_passes(rows: list[Row]) -> dict[str, dict[Pair, list[Row]]]:
    """collective -> (src, dst) -> that direction's row of each pass (the better one where the pass
    measured it twice: pass_values), in pass order; one pass over the rows, for every collective (a
    full fabric pass of 1,024 ranks has two million rows: a pass over them per question took minutes)."""
    measured = [row for row in rows if row.pattern == KIND and row.time_us_p50 is not None
                and row.src_rank is not None and row.dst_rank is not None]
    keys = [(row.collective, row.src_rank, row.dst_rank) for row in measured]
    once = dict(zip(keys, measured, strict=True))
    if len(once) == len(measured):  # one pass, no recheck: each direction's one row
        return {collective: {(src, dst): [row] for (named, src, dst), row in once.items()
                             if named == collective}
                for collective in dict.fromkeys(key[0] for key in once)}
    first: dict[tuple[str, int, int], Row] = {}
    more: dict[tuple[str, int, int], dict[int, Row]] = {}
    for key, row in zip(keys, measured, strict=True):
        known = first.setdefault(key, row)
        if known is not row:
            best = more.setdefault(key, {known.repeat: known})
            kept = best.get(row.repeat)
            if kept is None or _better(row, kept):
                best[row.repeat] = row
    found: dict[str, dict[Pair, list[Row]]] = {}
    for (collective, src, dst), row in first.items():
        by_pass = more.get((collective, src, dst))
        found.setdefault(collective, {})[(src, dst)] = \
            [row] if by_pass is None else [by_pass[repeat] for repeat in sorted(by_pass)]
    return found


def median_values(passes: dict[Pair, list[Row]]) -> dict[Pair, float]:
    """(src, dst) -> the median over passes of that direction's value."""
    if all(len(found) == 1 for found in passes.values()):  # one pass: the value itself, read in bulk
        read = _reader(next(iter(passes.values()))[0].collective) if passes else row_value
        return dict(zip(passes, map(read, (found[0] for found in passes.values())), strict=True))
    return {pair: row_value(found[0]) if len(found) == 1 else statistics.median(map(row_value, found))
            for pair, found in passes.items()}


def _reader(collective: str) -> Callable[[Row], float]:
    """row_value for rows of one collective, without asking each row which it is."""
    if collective == BANDWIDTH_COLLECTIVE:
        return lambda row: row.algbw_gbps or 0.0
    if collective == NODE_COLLECTIVE:
        return lambda row: row.busbw_gbps or 0.0
    return lambda row: float(row.time_us_p50 or 0.0)


def row_value(row: Row) -> float:
    """What a row says: a pair's bandwidth (GB/s), a group's all_reduce bus bandwidth (GB/s), or a
    pair's latency (half a round trip, µs)."""
    if row.collective == BANDWIDTH_COLLECTIVE:
        return row.algbw_gbps or 0.0
    if row.collective == NODE_COLLECTIVE:
        return row.busbw_gbps or 0.0
    return float(row.time_us_p50 or 0.0)


def pass_values(series: list[Row]) -> list[Row]:
    """One row per pass of one measurement's rows: the best where the pass has more (confirmations)."""
    best: dict[int, Row] = {}
    for row in series:
        known = best.get(row.repeat)
        if known is None or _better(row, known):
            best[row.repeat] = row
    return [best[repeat] for repeat in sorted(best)]


def pair_values(rows: list[Row], collective: str) -> dict[Pair, float]:
    """(src, dst) -> the median over passes of that direction's value."""
    return median_values(pair_passes(rows).get(collective, {}))


def pair_class(hostnames: list[str], src: int, dst: int) -> str:
    return INTRA if hostnames[src] == hostnames[dst] else INTER


def rank_matrix(values: dict[tuple[int, int], float], world_size: int) -> Matrix:
    matrix: Matrix = [[None] * world_size for _ in range(world_size)]
    for (src, dst), value in values.items():
        matrix[src][dst] = value
    return matrix


def _arrays(values: dict[Pair, float], hostnames: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each measurement's source host and destination host (numbered in order of their first rank)
    and value, as arrays: the medians over a million measurements are numpy's work, not a loop's."""
    number = {host: position for position, host in enumerate(ranks_by_host(hostnames))}
    host_of = np.array([number[host] for host in hostnames], dtype=np.int64)
    pairs = np.array(list(values), dtype=np.int64).reshape(-1, 2)
    measured = np.fromiter(values.values(), dtype=np.float64, count=len(values))
    return host_of[pairs[:, 0]], host_of[pairs[:, 1]], measured


def host_matrix(values: dict[Pair, float], hostnames: list[str]) -> Matrix:
    count = len(ranks_by_host(hostnames))
    matrix: Matrix = [[None] * count for _ in range(count)]
    if not values:
        return matrix
    source, destination, measured = _arrays(values, hostnames)
    cells = source * count + destination
    order = np.argsort(cells, kind="stable")
    found, starts = np.unique(cells[order], return_index=True)
    ends = np.append(starts[1:], len(cells))
    for cell, start, end in zip(found.tolist(), starts.tolist(), ends.tolist(), strict=True):
        matrix[cell // count][cell % count] = float(np.median(measured[order[start:end]]))
    return matrix


def class_medians(values: dict[Pair, float], hostnames: list[str]) -> dict[str, float]:
    """The median of each class (intra-node, inter-node) that has measurements, in the order the classes
    first appear."""
    if not values:
        return {}
    source, destination, measured = _arrays(values, hostnames)
    inter = source != destination
    classes = [(INTRA, ~inter), (INTER, inter)]
    if inter[0]:
        classes.reverse()
    return {name: float(np.median(measured[chosen])) for name, chosen in classes if chosen.any()}


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


def build_matrices(rows: list[Row], hostnames: list[str],
                   values: dict[str, dict[Pair, float]] | None = None) -> FabricMatrices:
    """The matrices of ``rows``; ``values`` (collective -> median_values), when the caller has them."""
    if values is None:
        passes = pair_passes(rows)
        values = {name: median_values(passes.get(name, {}))
                  for name in (BANDWIDTH_COLLECTIVE, LATENCY_COLLECTIVE)}
    bandwidth, latency = values[BANDWIDTH_COLLECTIVE], values[LATENCY_COLLECTIVE]
    world_size = len(hostnames)
    return FabricMatrices(hostnames=list(hostnames), hosts=list(ranks_by_host(hostnames)),
                          bandwidth_gbps=rank_matrix(bandwidth, world_size),
                          latency_us=rank_matrix(latency, world_size),
                          host_bandwidth_gbps=host_matrix(bandwidth, hostnames),
                          host_latency_us=host_matrix(latency, hostnames), nodes=node_results(rows))
