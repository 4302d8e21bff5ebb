"""Confirmation: what a pass measures again before it names anything, and what it found transient.

A pass's first judgement (its schedule's rounds and the node all_reduces, judged as outliers.py says)
only proposes suspects. Each rests on measurements (its bases): a link on its pair's slow directions, a
rank or host on every measurement it was scored on, a host named on its all_reduce on the node
all_reduces. Those are measured again (rows with phase ``recheck``), and the pass is judged again with
each measurement's value in the pass the best of its measurements (the higher bandwidth, the lower
latency: fabric/matrices.py), so a suspect stays named only while what it rests on was slow every
time it was measured. A suspect is confirmed once each of its measurements has been taken SLOW_IN times
(all slow, or it would have been cleared), and cleared the first time one judgement finds it fast; a
pass runs at most CONFIRMATIONS confirmations (a suspect that a clearing reveals, such as a link behind a
host, can need one more than a first suspect). Rank 0 decides what to measure again and sends it to
every rank (run.py), so all take the same decisions.

What a pass's first judgement named and its confirmations cleared is transient: reported with the ratio
of each measurement to the median it was first judged against, never named. Computed from rows alone
(a pass's rows in the order measured), on a saved file as during the run.
"""

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from commbench.core.words import plural
from commbench.fabric.matrices import (
    BANDWIDTH_COLLECTIVE,
    INTRA,
    LATENCY_COLLECTIVE,
    NODE_COLLECTIVE,
    row_value,
)
from commbench.fabric.outliers import Basis, Suspect
from commbench.measure.robust import BANDWIDTH, LATENCY, relative
from commbench.results.model import Row

RECHECK = "recheck"  # the phase of every row a confirmation measures
SLOW_IN = 3  # a suspect is confirmed once each of its measurements was taken this many times, all slow
CONFIRMATIONS = 3  # at most this many confirmations a pass

COLLECTIVE_OF = {BANDWIDTH.name: BANDWIDTH_COLLECTIVE, LATENCY.name: LATENCY_COLLECTIVE}
Key = tuple[str, int, int] | tuple[str, str]  # (collective, src, dst) of a pair, (all_reduce, host) of a node


def measured_series(rows: Iterable[Row]) -> dict[Key, list[float]]:
    """Each measurement's values in a pass's rows, in the order measured: pairs by (collective, src, dst),
    hosts' intra-node all_reduces by (all_reduce, host)."""
    series: dict[Key, list[float]] = {}
    for row in rows:
        if row.src_rank is not None and row.dst_rank is not None:
            key: Key = (row.collective, row.src_rank, row.dst_rank)
        elif row.collective == NODE_COLLECTIVE and row.group_layout == INTRA:
            key = (NODE_COLLECTIVE, row.host)
        else:
            continue
        series.setdefault(key, []).append(row_value(row))
    return series


def basis_keys(basis: Basis) -> list[Key]:
    if basis.host:
        return [(NODE_COLLECTIVE, basis.host)]
    collective = COLLECTIVE_OF[basis.metric.name]
    return [(collective, src, dst) for src, dst in basis.pairs]


def times_measured(suspect: Suspect, series: dict[Key, list[float]]) -> int:
    """How many times every measurement the suspect rests on has been taken (the fewest)."""
    return min((len(series.get(key, ())) for basis in suspect.bases for key in basis_keys(basis)), default=0)


@dataclass(frozen=True)
class ConfirmationPlan:
    """What a confirmation measures again: the suspects' pairs (lower rank first) and whether the node
    all_reduces; the suspects it is for, by label."""

    suspects: tuple[str, ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()
    nodes: bool = False

    def note(self, number: int) -> str:
        """'confirmation 1 of at most 3: host h1, link 0-4 (h0-h2): their 9 pairs measured again'."""
        parts = [plural(len(self.pairs), "pair")] if self.pairs else []
        parts += ["the node all_reduces"] if self.nodes else []
        return (f"confirmation {number} of at most {CONFIRMATIONS}: {', '.join(self.suspects)}: "
                f"{' and '.join(parts)} measured again")


def plan_confirmation(suspects: list[Suspect], rows: Iterable[Row]) -> ConfirmationPlan:
    """What to measure again for the suspects of a pass judged on ``rows`` (its rows so far): those whose
    measurements were taken fewer than SLOW_IN times. An empty plan: nothing is left to confirm."""
    series = measured_series(rows)
    pending = [suspect for suspect in suspects if times_measured(suspect, series) < SLOW_IN]
    pairs = {(min(src, dst), max(src, dst)) for suspect in pending for basis in suspect.bases
             for src, dst in basis.pairs}
    nodes = any(basis.host for suspect in pending for basis in suspect.bases)
    return ConfirmationPlan(tuple(suspect.label for suspect in pending), tuple(sorted(pairs)), nodes)


@dataclass(frozen=True)
class Measured:
    """One basis of a transient suspect: what it is, and each time's ratio to the median it was judged
    against (the median of its measurements that time: the first, then each confirmation's)."""

    what: str
    against: str
    reference: float
    ratios: tuple[float, ...]

    def text(self) -> str:
        first, *then = (f"{ratio:.2f}x" for ratio in self.ratios)
        again = f", then {', '.join(then)}" if then else ""
        return f"{self.what} {first}{again} {self.against}"


@dataclass(frozen=True)
class Transient:
    """A suspect of a pass's first judgement that its confirmations cleared."""

    repeat: int
    suspect: Suspect  # as the first judgement named it, with its evidence then
    measured: tuple[Measured, ...]

    def line(self, passes: int) -> str:
        """'transient: rank 3 (h1): bandwidth 0.31x, then 0.95x the median of the other ranks'."""
        where = f" (pass {self.repeat})" if passes > 1 else ""
        return f"transient: {self.suspect.label}{where}: {'; '.join(item.text() for item in self.measured)}"

    def to_dict(self) -> dict:
        measured = [{"what": item.what, "against": item.against, "reference": item.reference,
                     "ratios": [round(ratio, 4) for ratio in item.ratios]} for item in self.measured]
        return {**self.suspect.to_dict(), "repeat": self.repeat, "measured": measured}


def _what(basis: Basis) -> str:
    if basis.host:
        return "intra-node all_reduce"
    if len(basis.pairs) == 1:
        src, dst = basis.pairs[0]
        return f"{src}->{dst} {basis.metric.name}"
    return basis.metric.name


def transient(repeat: int, suspect: Suspect, rows: Iterable[Row]) -> Transient:
    """``suspect``, cleared in pass ``repeat`` whose rows are ``rows``: each basis's ratio every time."""
    series = measured_series(rows)
    measured = []
    for basis in suspect.bases:
        found = [series.get(key, []) for key in basis_keys(basis)]
        times = min(map(len, found), default=0)
        ratios = tuple(relative(statistics.median(values[time] for values in found), basis.reference)
                       for time in range(times))
        measured.append(Measured(_what(basis), basis.against, basis.reference, ratios))
    return Transient(repeat, suspect, tuple(measured))
