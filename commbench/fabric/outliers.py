"""The outlier rule, and who is to blame.

The rule, for a value v against a set of its peers, on a log scale (bandwidths and latencies vary by
factors, not by amounts): with m the peers' median and s = 1.4826 x the median of |ln(p / m)| over the
peers p (their MAD of logarithms, scaled to a normal distribution's standard deviation), v is an
outlier when |ln(v / m)| >= max(4 s, ln F), on the slow side (a bandwidth below m, a latency above).
F is --slow-factor (2 by default), the minimum relative gap: on a quiet cluster, where the MAD is tiny,
a value a few percent off the median names nobody, and nothing within F x of the median is ever named.
Fewer than 3 peers are not judged.

Blame goes from the widest cause to the narrowest, per metric (bandwidth, then latency), and a value is
only ever judged against peers that nothing named so far explains:
1. Hosts (3 or more): a host's score is the median, over the other hosts, of the median of the
   measurements between it and that host (both directions of every pair of their ranks); a host whose
   score is slow against the other hosts' scores is named. So is a host whose intra-node all_reduce bus
   bandwidth is slow against the other hosts'. Scoring hosts before pairs keeps one bad host from
   hiding: its pairs can be 40% of all inter-node pairs (2 of 5 hosts in every pair it is in), too many
   for a median of pairs. Scoring them by host pairs keeps a good host from looking bad: with 3 hosts,
   half of its measurements are with the bad one, and a median over them would fall on either side.
2. Ranks on hosts not named: a rank's score in a class (intra-node, inter-node) is the median of its
   measurements in that class, judged against the scores of the other ranks not on named hosts.
   A host (rank) is scored only when its measurements reach 2 other hosts (ranks) or more: with one,
   a slow pair blames the link between the two as much as either end (two ranks per host: their one
   intra-node pair is a link, not a rank).
3. Pairs: each directed measurement (a -> b) is judged against the measurements of its class that
   touch no named host or rank; a slow one that touches none either names its link.
With 2 hosts every inter-node pair touches both, so no host can be told from the other: their pairs
name the link between them. The drain list is the hosts named and the hosts of the ranks named.
Before all of these, a host ``excused`` (one running more CPU ranks than it has cores: its times include
waits for a core) explains its own ranks: nothing on it is named, and its measurements are no reference.
Each suspect keeps what it rests on (its Basis: the measurements and the median they were compared
with), so that a pass can measure exactly that again (fabric/confirm.py).
"""

import statistics
from collections.abc import Hashable
from dataclasses import dataclass, field

from commbench.core.groups import ranks_by_host
from commbench.fabric.judging import (
    MIN_COUNTERPARTS,
    MIN_JUDGED,
    Judged,
    Judgements,
    Measurements,
    Values,
    judge,
)
from commbench.fabric.matrices import INTER, INTRA, NodeResult
from commbench.measure.robust import (
    BANDWIDTH,
    LATENCY,
    Metric,
    as_bandwidth,
    relative,
    robust_spread,
    slow_mask,
)

__all__ = ["DEFAULT_SLOW_FACTOR", "MIN_COUNTERPARTS", "MIN_JUDGED", "Basis", "Judged", "Judgements",
           "Suspect", "drain_list", "find_suspects", "outlying"]

DEFAULT_SLOW_FACTOR = 2.0  # --slow-factor: the minimum relative gap


def outlying(scores: dict[Hashable, float], metric: Metric, factor: float) -> dict[Hashable, float]:
    """The keys whose score is slow against all the scores, each with the scores' median."""
    if len(scores) < MIN_JUDGED:
        return {}
    median, sigma = robust_spread(scores.values())
    slow = slow_mask(scores.values(), median, sigma, metric, factor)
    return {key: median for key, is_slow in zip(scores, slow, strict=True) if is_slow}


@dataclass(frozen=True)
class Basis:
    """What one sentence of a suspect's evidence rests on: one metric's directed measurements (src, dst),
    or, with ``host`` set, that host's intra-node all_reduce; the median they were compared with, and what
    that median is ('the median of the other hosts')."""

    metric: Metric
    pairs: tuple[tuple[int, int], ...]
    reference: float
    against: str
    host: str = ""


@dataclass
class Suspect:
    """A host, rank or link named as a likely cause, with the sentences that say why."""

    kind: str  # host, rank or link
    name: str
    hosts: list[str]
    ranks: list[int]
    score: float  # the worst ratio to the reference, on the bandwidth scale (lower is worse)
    evidence: list[str] = field(default_factory=list)
    bases: list[Basis] = field(default_factory=list)  # one per sentence of evidence

    @property
    def label(self) -> str:
        """'host h1', 'rank 5 (h1)', 'link 0-5 (h0-h2)': the kind, then the name, which for a rank says it."""
        return self.name if self.kind == "rank" else f"{self.kind} {self.name}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "hosts": self.hosts, "ranks": self.ranks,
                "score": round(self.score, 4), "evidence": self.evidence}


def _add(suspects: dict[str, Suspect], suspect: Suspect, sentence: str, basis: Basis) -> None:
    known = suspects.setdefault(suspect.name, suspect)
    known.evidence.append(sentence)
    known.bases.append(basis)
    known.score = min(known.score, suspect.score)


def _sentence(owner: str, mine: list[Judged], reference: float, peers: str) -> tuple[str, float]:
    """'host h3: its 8 inter-node transfers at a median 0.026 GB/s, 0.10x the median of the other
    hosts (0.270 GB/s); 8 of 8 are outliers on their own' and the ratio."""
    metric = mine[0].metric
    score = statistics.median(item.value for item in mine)
    ratio = relative(score, reference)
    noun = "transfers" if metric.higher_is_better else "ping-pongs"
    slow = sum(item.slow for item in mine)
    return (f"{owner}: its {len(mine)} {mine[0].pair_class} {noun} at a median {score:.{metric.digits}f} "
            f"{metric.unit}, {ratio:.2f}x the median of {peers} ({reference:.{metric.digits}f} "
            f"{metric.unit}); {slow} of {len(mine)} are outliers on their own", as_bandwidth(ratio, metric))


def blame_metric(values: Values, hostnames: list[str], metric: Metric, factor: float,
                 suspects: dict[str, Suspect], excused: frozenset[str] = frozenset()) -> Judgements:
    """Steps 1 to 3 of the module docstring for one metric; the judged measurements."""
    measured = Measurements.of(values, hostnames)
    hosts = {host: set(ranks) for host, ranks in ranks_by_host(hostnames).items()}
    named_hosts = outlying(measured.host_scores(excused), metric, factor)
    explained = {rank for suspect in suspects.values() if suspect.kind in ("host", "rank")
                 for rank in suspect.ranks}
    explained |= {rank for host in excused for rank in hosts.get(host, ())}
    explained |= {rank for host in named_hosts for rank in hosts[host]}
    named_ranks: dict[tuple[int, str], float] = {}
    for name, inter in ((INTRA, False), (INTER, True)):
        for rank, median in outlying(measured.rank_scores(inter, explained), metric, factor).items():
            named_ranks[(rank, name)] = median
    explained |= {rank for rank, _ in named_ranks}
    judged = judge(measured, metric, factor, explained)
    for host, reference in named_hosts.items():
        mine = judged.touching(hosts[host], INTER)
        sentence, score = _sentence(f"host {host}", mine, reference, "the other hosts")
        _add(suspects, Suspect("host", host, [host], sorted(hosts[host]), score), sentence,
             _basis(mine, metric, reference, "the median of the other hosts"))
    for (rank, name), reference in named_ranks.items():
        owner = f"rank {rank} ({hostnames[rank]})"
        mine = judged.touching({rank}, name)
        sentence, score = _sentence(owner, mine, reference, "the other ranks")
        _add(suspects, Suspect("rank", owner, [hostnames[rank]], [rank], score), sentence,
             _basis(mine, metric, reference, "the median of the other ranks"))
    for item in judged.slow():
        if item.src not in explained and item.dst not in explained:
            _blame_link(item, hostnames, suspects)
    return judged


def _basis(mine: list[Judged], metric: Metric, reference: float, against: str) -> Basis:
    return Basis(metric, tuple((item.src, item.dst) for item in mine), reference, against)


def _blame_link(item: Judged, hostnames: list[str], suspects: dict[str, Suspect]) -> None:
    low, high = sorted((item.src, item.dst))
    metric = item.metric
    sentence = (f"{item.src}->{item.dst} {metric.name} {item.value:.{metric.digits}f} {metric.unit}, "
                f"{item.ratio:.2f}x the {item.pair_class} median ({item.median:.{metric.digits}f})")
    suspect = Suspect("link", f"{low}-{high} ({hostnames[low]}-{hostnames[high]})",
                      sorted({hostnames[low], hostnames[high]}), [low, high],
                      as_bandwidth(item.ratio, metric))
    _add(suspects, suspect, sentence, _basis([item], metric, item.median, f"the {item.pair_class} median"))


def blame_node_all_reduce(nodes: list[NodeResult], factor: float, hostnames: list[str],
                          suspects: dict[str, Suspect], excused: frozenset[str] = frozenset()) -> None:
    """A host whose intra-node all_reduce is slow against the other hosts' (an excused host is neither
    named nor a reference)."""
    intra = {node.host: node.busbw_gbps for node in nodes
             if node.layout == INTRA and node.busbw_gbps is not None and node.host not in excused}
    for host, median in outlying(intra, BANDWIDTH, factor).items():
        ratio = relative(intra[host], median)
        sentence = (f"host {host}: its intra-node all_reduce at {intra[host]:.3f} GB/s bus bandwidth, "
                    f"{ratio:.2f}x the median of {len(intra)} hosts ({median:.3f} GB/s)")
        ranks = ranks_by_host(hostnames).get(str(host), [])
        _add(suspects, Suspect("host", str(host), [str(host)], list(ranks), ratio), sentence,
             Basis(BANDWIDTH, (), median, f"the median of {len(intra)} hosts", host=str(host)))


KIND_ORDER = ("host", "rank", "link")


def find_suspects(values_by_metric: dict[str, Values], hostnames: list[str], nodes: list[NodeResult],
                  factor: float, excused: frozenset[str] = frozenset()) -> tuple[list[Suspect], Judgements]:
    """The suspects (hosts, ranks, links; the worst first within each) and every judged measurement;
    nothing on an ``excused`` host is named (see the module docstring)."""
    suspects: dict[str, Suspect] = {}
    blame_node_all_reduce(nodes, factor, hostnames, suspects, excused)
    judged = Judgements()
    for metric in (BANDWIDTH, LATENCY):
        judged += blame_metric(values_by_metric.get(metric.name, {}), hostnames, metric, factor, suspects,
                               excused)
    ordered = sorted(suspects.values(), key=lambda suspect: (KIND_ORDER.index(suspect.kind), suspect.score))
    return ordered, judged


def drain_list(suspects: list[Suspect]) -> list[str]:
    """The hosts to take out of service: those named, and those of the ranks named."""
    return list(dict.fromkeys(host for suspect in suspects if suspect.kind in ("host", "rank")
                              for host in suspect.hosts))
