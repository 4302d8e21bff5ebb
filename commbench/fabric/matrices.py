"""Matrices from fabric rows: rank x rank and host x host, for bandwidth and latency.

Read from rows only (a live run's or a saved file's), so the console, the JSON, plot and report agree;
nothing here or in what reads it (outliers, drift, analysis, tables, heatmap, hooks) imports torch, so
the commands that read saved files stay quick to start.
An entry [a][b] is the direction a -> b: for bandwidth a sends and b receives; for latency a leads the
ping-pong. A pair direction's value in a pass is its p50, or, when the pass measured it again (its
confirmations, fabric/confirm.py), the best of them (the higher bandwidth, the lower latency): a
slowdown counts only if it is there every time. A rank-pair value is the median over the soak's
passes of those values. A host-pair value is the median over the rank pairs between the two hosts; the
diagonal of the host matrix is the host's intra-node median (absent with one rank on it).
A matrix is sparse (PairValues): the measured entries only, as arrays of sender, receiver and value, so
it grows with the measurements (2KN of N^2 entries with --sample K) and not with N^2; the diagonal and
the pairs --sample left out are not in it. The pass over the rows reads a column at a time
(results.columns.values_of), never a Row per measurement: a full pass of 1,024 ranks has two million.
"""

import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from commbench.core.groups import ranks_by_host
from commbench.results.columns import values_of
from commbench.results.model import Row

KIND = "fabric"  # Row.pattern of every fabric row; how plot, report and compare recognise a fabric run
BANDWIDTH_COLLECTIVE = "p2p_uni"
LATENCY_COLLECTIVE = "ping_pong"
NODE_COLLECTIVE = "all_reduce"
INTRA, INTER = "intra-node", "inter-node"

Pair = tuple[int, int]


def fabric_rows(rows: Sequence[Row]) -> list[Row]:
    return [row for row in rows if row.pattern == KIND and row.time_us_p50 is not None]


@dataclass(frozen=True)
class PairValues:
    """A sparse matrix of ``size`` x ``size`` (ranks, or hosts numbered in the order of their first rank):
    entry [src[k]][dst[k]] is value[k]; every entry not listed is unmeasured."""

    size: int
    src: np.ndarray
    dst: np.ndarray
    value: np.ndarray

    @classmethod
    def of(cls, values: "Mapping[Pair, float] | PairValues", size: int | None = None) -> "PairValues":
        """From (src, dst) -> value (in its order), or as it is."""
        if isinstance(values, PairValues):
            return values
        pairs = np.array(list(values), dtype=np.int64).reshape(-1, 2)
        found = np.fromiter(values.values(), dtype=np.float64, count=len(values))
        if size is None:
            size = int(pairs.max()) + 1 if len(pairs) else 0
        return cls(size, pairs[:, 0], pairs[:, 1], found)

    def __len__(self) -> int:
        return len(self.value)

    def items(self) -> Iterator[tuple[Pair, float]]:
        return zip(zip(self.src.tolist(), self.dst.tolist(), strict=True), self.value.tolist(), strict=True)

    def dense(self) -> list[list[float | None]]:
        """Every entry, None where unmeasured: for tables of a few ranks or hosts."""
        matrix: list[list[float | None]] = [[None] * self.size for _ in range(self.size)]
        for (src, dst), value in self.items():
            matrix[src][dst] = value
        return matrix

    def grid(self, order: list[int]) -> np.ndarray:
        """The matrix with its rows and columns in ``order`` (every index once), NaN where unmeasured."""
        position = np.empty(self.size, dtype=np.int64)
        position[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
        grid = np.full((self.size, self.size), np.nan)
        grid[position[self.src], position[self.dst]] = self.value
        return grid

    def to_dict(self) -> dict[str, np.ndarray]:
        """results.json's form: the measured entries as three lists (docs/clusters.md#results), here numpy
        arrays, which the writer writes as lists a chunk at a time (writers.files.json_pieces)."""
        return {"src": self.src, "dst": self.dst, "value": self.value}


@dataclass(frozen=True)
class PairPasses:
    """One collective's measured pair directions, each with its value in every pass that measured it
    (the better one where a pass measured it twice), as arrays: the pairs in the order of their first
    row, each pair's passes in order; ``row`` is each value's position in the rows read."""

    src: np.ndarray
    dst: np.ndarray
    repeat: np.ndarray
    value: np.ndarray
    elapsed_s: np.ndarray  # NaN where the row has none
    row: np.ndarray
    starts: np.ndarray  # where each pair's passes begin

    def counts(self) -> np.ndarray:
        """How many passes measured each pair."""
        return np.diff(np.append(self.starts, len(self.value)))

    def medians(self, size: int) -> PairValues:
        """Each pair's median over its passes (statistics.median's: the mean of the two middle values of
        an even count)."""
        src, dst = (ranks[self.starts].astype(np.int64) for ranks in (self.src, self.dst))
        if len(self.starts) == len(self.value):  # one pass: the values themselves
            return PairValues(size, src, dst, self.value)
        counts = self.counts()
        pair = np.repeat(np.arange(len(self.starts)), counts)
        ordered = self.value[np.lexsort((self.value, pair))]
        low, high = self.starts + (counts - 1) // 2, self.starts + counts // 2
        middle = np.where(counts == 1, ordered[low], (ordered[low] + ordered[high]) / 2)
        return PairValues(size, src, dst, middle)


def measured_passes(rows: Sequence[Row]) -> dict[str, PairPasses]:
    """collective -> its PairPasses, for every collective fabric rows measured between two ranks, in the
    order first measured: one pass over the rows, a column at a time, a collective at a time (a column
    of two million rows is 16 MB: each is read whole, cut to the rows it is wanted for, and let go)."""
    measured = values_of(rows, "pattern") == KIND
    for name in ("time_us_p50", "src_rank", "dst_rank"):
        measured &= ~np.isnan(values_of(rows, name).astype(np.float64, copy=False))
    collectives = values_of(rows, "collective")
    named = list(dict.fromkeys(collectives[measured].tolist()))  # in the order first measured
    which = np.full(len(collectives), -1, dtype=np.int8 if len(named) < 127 else np.int64)
    for code, collective in enumerate(named):
        which[measured & (collectives == collective)] = code
    del collectives, measured
    found = {}
    for code, collective in enumerate(named):
        chosen = np.flatnonzero(which == code)

        def cut(name: str, kind: type, chosen: np.ndarray = chosen) -> np.ndarray:
            return values_of(rows, name)[chosen].astype(kind)

        if collective in (BANDWIDTH_COLLECTIVE, NODE_COLLECTIVE):  # row_value, over the chosen rows
            value = np.nan_to_num(cut("algbw_gbps" if collective == BANDWIDTH_COLLECTIVE else "busbw_gbps",
                                      np.float64), nan=0.0)
        else:
            value = cut("time_us_p50", np.float64)
        found[collective] = _pair_passes(collective, cut("src_rank", np.int32), cut("dst_rank", np.int32),
                                         cut("repeat", np.int32), value, cut("elapsed_s", np.float64),
                                         chosen.astype(np.int32))
    return found


def _pair_passes(collective: str, src: np.ndarray, dst: np.ndarray, repeat: np.ndarray, value: np.ndarray,
                 elapsed: np.ndarray, row: np.ndarray) -> PairPasses:
    """_better's choice in each pass, vectorised: sorted by pair, pass, value and row, the last of each
    pass is its highest bandwidth (of equals, the later row), the first its lowest latency (the earlier)."""
    if not len(src):
        return PairPasses(src, dst, repeat, value, elapsed, row, np.zeros(0, dtype=np.int64))
    order = np.lexsort((row, value, repeat, dst, src))
    sorted_src, sorted_dst, sorted_repeat = src[order], dst[order], repeat[order]
    new_pair = np.ones(len(src), dtype=bool)
    new_pair[1:] = (sorted_src[1:] != sorted_src[:-1]) | (sorted_dst[1:] != sorted_dst[:-1])
    new_pass = new_pair.copy()
    new_pass[1:] |= sorted_repeat[1:] != sorted_repeat[:-1]
    del sorted_src, sorted_dst, sorted_repeat
    first_row = np.minimum.reduceat(row[order], np.flatnonzero(new_pair))
    pass_starts = np.flatnonzero(new_pass)
    picked = pass_starts if collective == LATENCY_COLLECTIVE else np.append(pass_starts[1:], len(src)) - 1
    pair_of_picked = (np.cumsum(new_pair) - 1)[picked]
    del new_pair, new_pass, pass_starts
    rank_of_pair = np.argsort(np.argsort(first_row, kind="stable"), kind="stable")  # pairs in first-row order
    chosen = order[picked]  # each pass's row, as positions in the arrays given
    chosen = chosen[np.lexsort((repeat[chosen], rank_of_pair[pair_of_picked]))]
    src, dst = src[chosen], dst[chosen]
    starts = np.flatnonzero(np.append(True, (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])))
    return PairPasses(src, dst, repeat[chosen], value[chosen], elapsed[chosen], row[chosen], starts)


def _better(row: Row, known: Row) -> bool:
    """Whether ``row`` replaces ``known`` as its pass's value: a higher bandwidth, a lower latency (a
    bandwidth tie goes to the later row)."""
    return (row_value(row) < row_value(known)) == (row.collective == LATENCY_COLLECTIVE)


def pair_series(rows: Sequence[Row], collective: str) -> dict[Pair, list[Row]]:
    """(src, dst) -> that direction's rows of ``collective``, in the order measured."""
    found: dict[Pair, list[Row]] = {}
    for row in fabric_rows(rows):
        if row.collective == collective and row.src_rank is not None and row.dst_rank is not None:
            found.setdefault((row.src_rank, row.dst_rank), []).append(row)
    return found


def pair_passes(rows: Sequence[Row]) -> dict[str, dict[Pair, list[Row]]]:
    """collective -> (src, dst) -> that direction's row of each pass (pass_values), in pass order, as
    Rows: for a soak's pairs over time (drift's spikes, the heatmap's drift panel)."""
    found: dict[str, dict[Pair, list[Row]]] = {}
    for collective in dict.fromkeys(row.collective for row in fabric_rows(rows)):
        found[collective] = {pair: pass_values(series)
                             for pair, series in pair_series(rows, collective).items()}
    return {collective: pairs for collective, pairs in found.items() if pairs}


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


def pair_class(hostnames: list[str], src: int, dst: int) -> str:
    return INTRA if hostnames[src] == hostnames[dst] else INTER


def _host_numbers(hostnames: list[str]) -> np.ndarray:
    """Each rank's host, numbered in the order of the hosts' first rank."""
    number = {host: position for position, host in enumerate(ranks_by_host(hostnames))}
    return np.array([number[host] for host in hostnames], dtype=np.int64)


def host_matrix(values: PairValues, hostnames: list[str]) -> PairValues:
    """The median of each host pair's rank pairs, the measured host pairs in (sender, receiver) order."""
    count = len(ranks_by_host(hostnames))
    if not len(values):
        return PairValues(count, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))
    host_of = _host_numbers(hostnames)
    cells = host_of[values.src] * count + host_of[values.dst]
    order = np.lexsort((values.value, cells))
    cells, measured = cells[order], values.value[order]
    found, starts, counts = np.unique(cells, return_index=True, return_counts=True)
    medians = (measured[starts + (counts - 1) // 2] + measured[starts + counts // 2]) / 2
    medians = np.where(counts % 2 == 1, measured[starts + counts // 2], medians)
    return PairValues(count, found // count, found % count, medians)


def class_medians(values: PairValues, hostnames: list[str]) -> dict[str, float]:
    """The median of each class (intra-node, inter-node) that has measurements, in the order the classes
    first appear."""
    if not len(values):
        return {}
    host_of = _host_numbers(hostnames)
    inter = host_of[values.src] != host_of[values.dst]
    classes = [(INTRA, ~inter), (INTER, inter)]
    if inter[0]:
        classes.reverse()
    return {name: float(np.median(values.value[chosen])) for name, chosen in classes if chosen.any()}


@dataclass(frozen=True)
class NodeResult:
    """One all_reduce group's result: within a host, or across one rank per host."""

    layout: str
    host: str
    ranks: int
    busbw_gbps: float | None
    time_us: float


def node_results(rows: Sequence[Row]) -> list[NodeResult]:
    """Each all_reduce group's median over passes (of each pass's better measurement, as for pairs)."""
    chosen = np.flatnonzero((values_of(rows, "pattern") == KIND)
                            & (values_of(rows, "collective") == NODE_COLLECTIVE))
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in fabric_rows([rows[index] for index in chosen.tolist()]):
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
    bandwidth_gbps: PairValues
    latency_us: PairValues
    host_bandwidth_gbps: PairValues
    host_latency_us: PairValues
    nodes: list[NodeResult]

    def ranks_by_host_order(self) -> list[int]:
        """Every rank, grouped by host (hosts in order of their first rank)."""
        return [rank for ranks in ranks_by_host(self.hostnames).values() for rank in ranks]


def pair_medians(passes: Mapping[str, PairPasses], world_size: int) -> dict[str, PairValues]:
    """Bandwidth and latency: each pair direction's median over passes."""
    empty = PairValues(world_size, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))
    return {name: passes[name].medians(world_size) if name in passes else empty
            for name in (BANDWIDTH_COLLECTIVE, LATENCY_COLLECTIVE)}


def build_matrices(rows: Sequence[Row], hostnames: list[str],
                   values: dict[str, PairValues] | None = None) -> FabricMatrices:
    """The matrices of ``rows``; ``values`` (pair_medians), when the caller has them."""
    if values is None:
        values = pair_medians(measured_passes(rows), len(hostnames))
    bandwidth, latency = values[BANDWIDTH_COLLECTIVE], values[LATENCY_COLLECTIVE]
    return FabricMatrices(hostnames=list(hostnames), hosts=list(ranks_by_host(hostnames)),
                          bandwidth_gbps=bandwidth, latency_us=latency,
                          host_bandwidth_gbps=host_matrix(bandwidth, hostnames),
                          host_latency_us=host_matrix(latency, hostnames), nodes=node_results(rows))
