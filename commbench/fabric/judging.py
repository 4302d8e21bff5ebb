"""The outlier rule over every measurement at once: one metric's pair values as arrays, the owners'
scores, and the judged measurements kept as arrays until asked for one by one.

A full fabric pass of N ranks has N(N-1) directed measurements per metric (a million at 1,024 ranks), so
the blame of outliers.py runs here as numpy operations over them, with the rule's own array form
(measure/robust.py).
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from commbench.fabric.matrices import INTER, INTRA
from commbench.measure.robust import Metric, gap_factor, relative, robust_spread, slow_mask

MIN_JUDGED = 3  # fewer peers than this: nothing is judged
MIN_COUNTERPARTS = 2  # a host or rank is scored only on measurements with at least this many others
Values = dict[tuple[int, int], float]


@dataclass(frozen=True)
class Measurements:
    """One metric's directed measurements, in the order of the values given: each pair's ranks, its
    value and whether it crosses hosts; ``host_of`` numbers each rank's host (hosts in rank order)."""

    src: np.ndarray
    dst: np.ndarray
    value: np.ndarray
    inter: np.ndarray
    host_of: np.ndarray
    hosts: list[str]

    @classmethod
    def of(cls, values: Values, hostnames: list[str]) -> "Measurements":
        hosts = list(dict.fromkeys(hostnames))
        number = {host: index for index, host in enumerate(hosts)}
        host_of = np.array([number[host] for host in hostnames], dtype=np.int64)
        pairs = np.array(list(values), dtype=np.int64).reshape(-1, 2)
        src, dst = pairs[:, 0], pairs[:, 1]
        value = np.fromiter(values.values(), dtype=np.float64, count=len(values))
        return cls(src, dst, value, host_of[src] != host_of[dst], host_of, hosts)

    def touching(self, ranks: set[int]) -> np.ndarray:
        """Which measurements have an end among ``ranks``."""
        listed = np.fromiter(ranks, dtype=np.int64, count=len(ranks))
        return np.isin(self.src, listed) | np.isin(self.dst, listed)

    def host_scores(self, excused: frozenset[str] = frozenset()) -> dict[str, float]:
        """Each host's score: the median, over the other hosts it has inter-node measurements with (at
        least MIN_COUNTERPARTS of them), of the median of the measurements between the two hosts (both
        directions); hosts in order, none ``excused`` and none scored on its pair with one. Not the median
        of its own measurements: with three hosts, half of a good host's are with a bad host, so that
        median sits between the two and a single disturbed measurement decides which side it falls on (a
        host-pair median moves only when most of its measurements do)."""
        chosen = np.flatnonzero(self.inter)
        if not chosen.size:
            return {}
        count = len(self.hosts)
        ends = self.host_of[self.src[chosen]], self.host_of[self.dst[chosen]]
        cells = np.minimum(*ends) * count + np.maximum(*ends)
        order = np.argsort(cells, kind="stable")
        found, starts = np.unique(cells[order], return_index=True)
        stops = np.append(starts[1:], cells.size)
        values = self.value[chosen][order]
        left_out = {index for index, host in enumerate(self.hosts) if host in excused}
        by_host: dict[int, list[float]] = {}
        for cell, start, stop in zip(found.tolist(), starts.tolist(), stops.tolist(), strict=True):
            pair = divmod(cell, count)
            if left_out.isdisjoint(pair):
                median = float(np.median(values[start:stop]))
                for host in pair:
                    by_host.setdefault(host, []).append(median)
        return {self.hosts[host]: float(np.median(medians)) for host, medians in sorted(by_host.items())
                if len(medians) >= MIN_COUNTERPARTS}

    def rank_scores(self, inter: bool, explained: set[int]) -> dict[int, float]:
        """Each rank's median over its measurements of one class (crossing hosts or not), ranks not in
        ``explained``; only ranks whose measurements reach MIN_COUNTERPARTS other ranks; ranks in the
        order they first appear, the sender's end of a measurement before the receiver's."""
        chosen = self.inter == inter
        ends = np.stack([self.src[chosen], self.dst[chosen]], axis=1).ravel()
        others = np.stack([self.dst[chosen], self.src[chosen]], axis=1).ravel()
        values = np.repeat(self.value[chosen], 2)
        kept = ~np.isin(ends, np.fromiter(explained, dtype=np.int64, count=len(explained)))
        owners, counterparts, values = ends[kept], others[kept], values[kept]
        if not owners.size:
            return {}
        found, first = np.unique(owners, return_index=True)
        width = int(counterparts.max()) + 1  # (owner, counterpart) as one number, to count distinct ones
        reached = dict(zip(*np.unique(np.unique(owners * width + counterparts) // width, return_counts=True),
                           strict=True))
        order = np.argsort(owners, kind="stable")
        sorted_values = values[order]
        starts = np.searchsorted(owners[order], found)
        ends_at = np.append(starts[1:], owners.size)
        scores = {}
        for position in np.argsort(first):
            owner = int(found[position])
            if reached[owner] >= MIN_COUNTERPARTS:
                scores[owner] = float(np.median(sorted_values[starts[position]:ends_at[position]]))
        return scores


@dataclass(frozen=True, slots=True)
class Judged:
    """One directed measurement against the unexplained measurements of its class."""

    src: int
    dst: int
    metric: Metric
    value: float
    median: float
    pair_class: str
    slow: bool

    @property
    def ratio(self) -> float:
        return relative(self.value, self.median)


@dataclass(frozen=True)
class JudgedClass:
    """One metric's measurements of one class, judged, in (src, dst) order; ``threshold`` is how many
    times off the median (slower) a measurement had to be to be slow, exp(max(4 s, ln F)) with s the
    spread of the peers it was judged against (None: too few peers, nothing judged)."""

    metric: Metric
    pair_class: str
    median: float
    src: np.ndarray
    dst: np.ndarray
    value: np.ndarray
    slow: np.ndarray
    threshold: float | None = None

    def item(self, index: int) -> Judged:
        return Judged(int(self.src[index]), int(self.dst[index]), self.metric, float(self.value[index]),
                      self.median, self.pair_class, bool(self.slow[index]))


class Judgements:
    """Every judged measurement (a million per metric at 1,024 ranks), kept as arrays: iterating
    makes each Judged, ``slow`` and ``touching`` only those asked for."""

    def __init__(self, classes: list[JudgedClass] | None = None) -> None:
        self.classes = classes or []

    def __len__(self) -> int:
        return sum(len(part.src) for part in self.classes)

    def __iter__(self) -> Iterator[Judged]:
        for part in self.classes:
            for index in range(len(part.src)):
                yield part.item(index)

    def __add__(self, other: "Judgements") -> "Judgements":
        return Judgements(self.classes + other.classes)

    def slow(self) -> list[Judged]:
        return [part.item(int(index)) for part in self.classes for index in np.flatnonzero(part.slow)]

    def touching(self, ranks: set[int], pair_class: str) -> list[Judged]:
        """The measurements of that class with an end among ``ranks``, in order."""
        listed = np.fromiter(ranks, dtype=np.int64, count=len(ranks))
        return [part.item(int(index)) for part in self.classes if part.pair_class == pair_class
                for index in np.flatnonzero(np.isin(part.src, listed) | np.isin(part.dst, listed))]


def judge(measured: Measurements, metric: Metric, factor: float, explained: set[int]) -> Judgements:
    """Every measurement judged against those of its class that touch no rank in ``explained``; what a
    named host or rank explains is already blamed, so any unexplained peer is reference enough."""
    touches = measured.touching(explained)
    parts = []
    for name, inter in ((INTRA, False), (INTER, True)):
        members = np.flatnonzero(measured.inter == inter)
        if not members.size:
            continue
        members = members[np.lexsort((measured.dst[members], measured.src[members]))]
        values, touching = measured.value[members], touches[members]
        peers = values[~touching]
        median, sigma = robust_spread(peers if peers.size else values)
        enough = np.where(touching, peers.size >= 1, peers.size >= MIN_JUDGED)
        threshold = gap_factor(sigma, factor) if peers.size >= MIN_JUDGED else None
        parts.append(JudgedClass(metric, name, median, measured.src[members], measured.dst[members], values,
                                 enough & slow_mask(values, median, sigma, metric, factor), threshold))
    return Judgements(parts)
