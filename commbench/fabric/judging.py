"""The outlier rule over every measurement at once: one metric's pair values as arrays, the owners'
scores, and the judged measurements kept as arrays until asked for one by one.

A full fabric pass of N ranks has N(N-1) directed measurements per metric (a million at 1,024 ranks), so
the rule of measure/robust.py and the blame of outliers.py run here as numpy operations over them, with
the same results as the rule applied value by value: the same medians (the mean of the two middle values
of an even count), the same logarithms of values floored at 1e-30, the same 1e-12 tolerance at the gap.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from commbench.fabric.matrices import INTER, INTRA, PairValues
from commbench.measure.robust import MAD_TO_SIGMA, SIGMAS, Metric, relative

MIN_JUDGED = 3  # fewer peers than this: nothing is judged
MIN_COUNTERPARTS = 2  # a host or rank is scored only on measurements with at least this many others
Values = dict[tuple[int, int], float]


def _logs(values: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(values, 1e-30))  # a bandwidth of 0 is as slow as can be, not an error


def spread(values: np.ndarray) -> tuple[float, float]:
    """robust_spread over an array: (median, 1.4826 x the median of |ln(value / median)|)."""
    median = float(np.median(values))
    return median, MAD_TO_SIGMA * float(np.median(np.abs(_logs(values) - math.log(max(median, 1e-30)))))


def slow_mask(values: np.ndarray, median: float, log_sigma: float, metric: Metric, factor: float
              ) -> np.ndarray:
    """robust.is_slow for every value against one median and log spread."""
    distance = _logs(values) - math.log(max(median, 1e-30))
    if metric.higher_is_better:
        distance = -distance
    return distance >= max(SIGMAS * log_sigma, math.log(factor)) - 1e-12  # exactly F x off counts


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
    def of(cls, values: Values | PairValues, hostnames: list[str]) -> "Measurements":
        hosts = list(dict.fromkeys(hostnames))
        number = {host: index for index, host in enumerate(hosts)}
        host_of = np.array([number[host] for host in hostnames], dtype=np.int64)
        pairs = PairValues.of(values, len(hostnames))
        src, dst = pairs.src, pairs.dst
        return cls(src, dst, pairs.value, host_of[src] != host_of[dst], host_of, hosts)

    def touching(self, ranks: set[int]) -> np.ndarray:
        """Which measurements have an end among ``ranks``."""
        listed = np.fromiter(ranks, dtype=np.int64, count=len(ranks))
        return np.isin(self.src, listed) | np.isin(self.dst, listed)

    def class_scores(self, inter: bool, by_host: bool, explained: set[int]) -> dict:
        """Each owner's median over its measurements of one class (crossing hosts or not): hosts by name
        (``by_host``), else ranks not in ``explained``; only owners whose measurements reach
        MIN_COUNTERPARTS others (hosts for a host, ranks for a rank); owners in the order they first
        appear, the sender's end of a measurement before the receiver's."""
        chosen = self.inter == inter
        ends = np.stack([self.src[chosen], self.dst[chosen]], axis=1).ravel()
        others = np.stack([self.dst[chosen], self.src[chosen]], axis=1).ravel()
        values = np.repeat(self.value[chosen], 2)
        if by_host:
            owners, counterparts = self.host_of[ends], self.host_of[others]
        else:
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
                key = self.hosts[owner] if by_host else owner
                scores[key] = float(np.median(sorted_values[starts[position]:ends_at[position]]))
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
    """One metric's measurements of one class, judged, in (src, dst) order."""

    metric: Metric
    pair_class: str
    median: float
    src: np.ndarray
    dst: np.ndarray
    value: np.ndarray
    slow: np.ndarray

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
        median, sigma = spread(peers if peers.size else values)
        enough = np.where(touching, peers.size >= 1, peers.size >= MIN_JUDGED)
        parts.append(JudgedClass(metric, name, median, measured.src[members], measured.dst[members], values,
                                 enough & slow_mask(values, median, sigma, metric, factor)))
    return Judgements(parts)
