"""--per-iteration: every rank's time of every sample, kept in its row, and what it shows.

A sample is one timed op in sync mode, one window in async mode. A row keeps, in ``iteration_us`` and
``iteration_arrival_us``, each rank's own time (µs, before the max over ranks) and its arrival at each
sample (µs after the barrier that opened the sample's timed region; timing.py): little-endian float32,
rank by rank, in base64. That is 4 bytes a value (5.3 characters) where the same number as JSON text
takes 8 to 10, and float32's 7 significant digits resolve 0.1 µs in a second. The block's shape is the
row's own: ``samples`` columns, as many ranks as values over them. Saved files are untrusted: a block
that does not decode into that shape, or holds a value that is not finite, is refused with a line
naming the row.

What the blocks show, as pure functions of saved rows and the ranks' host names (the console after each
table and `commbench iterations` print them; docs/measurement.md#per-iteration-times):

- spikes: a rank's time at one sample that is an outlier against that rank's own median over the row's
  samples, by the robust rule (measure/robust.py: at least SPIKE_FACTOR times the median and beyond 4
  scaled MADs of the rank's log-times), or SPIKE_OVER_USUAL times the rank's usual worst (its 90th
  percentile), which still names a spike when the rank's samples fall in two modes. A rank that arrived
  before the last rank of its group waited inside the collective: when the last one came at least
  WAIT_SHARE of the spike's excess over the median after it, the spike is named with the rank it waited
  for; else the time was its own.
- the straggler over iterations: at each sample the rank that arrived last in its group; the rank last
  most often, in how many samples, and by how much it trailed the others' median arrival there.
- hosts: each host's ranks' median and p99 over their samples, the slowest host against the median host.
- the first op: the size's first op (``first_op_us``: before its warm-up, buffers and connections cold)
  and the first timed sample, each against the steady state (the median of the samples after the first).
"""

import base64
import binascii
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commbench.core.words import plural
from commbench.measure.robust import LATENCY, robust_spread, slow_mask
from commbench.results.model import Row, describe_row

SPIKE_FACTOR = 2.0  # a spike is at least this many times its rank's median (and beyond 4 scaled MADs)
SPIKE_OVER_USUAL = 10.0  # or at least this many times its rank's usual worst, whatever the spread
USUAL_WORST = 0.9  # the quantile of a rank's samples that is its usual worst
WAIT_SHARE = 0.5  # a spike waited for a rank that arrived at least this share of its excess later
MAX_SPIKES_SHOWN = 5  # the console names this many of a row's spikes, the worst first
_FLOAT32 = np.dtype("<f4")


class BadIterations(ValueError):
    """A row's per-iteration block that does not decode into its shape."""


def encode(per_rank: Sequence[Sequence[float]] | np.ndarray, scale: float = 1e6) -> str:
    """[rank][sample] values (seconds, scaled to µs by ``scale``) as the row keeps them."""
    values = np.asarray(per_rank, dtype=np.float64) * scale
    return base64.b64encode(values.astype(_FLOAT32).tobytes()).decode("ascii")


def decode(text: str, samples: int, field: str = "iteration_us") -> np.ndarray:
    """A block back into a float64 [rank][sample] array; BadIterations when it is not one."""
    if not text:
        return np.zeros((0, samples))
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadIterations(f"{field} is not base64") from None
    count = len(raw) // _FLOAT32.itemsize
    if len(raw) % _FLOAT32.itemsize or samples <= 0 or count % samples:
        raise BadIterations(f"{field} holds {len(raw)} bytes: not {samples} samples of float32 per rank")
    values = np.frombuffer(raw, dtype=_FLOAT32).astype(np.float64).reshape(count // samples, samples)
    if not np.isfinite(values).all():
        raise BadIterations(f"{field} holds a value that is not a finite number")
    return values


@dataclass(frozen=True)
class Iterations:
    """One row's per-iteration times and arrivals, µs, [rank][sample]; ``ranks`` are the global ranks of
    its rows (a concurrent communicator's row holds its members only)."""

    row: Row
    times: np.ndarray
    arrivals: np.ndarray
    ranks: tuple[int, ...]

    @classmethod
    def of(cls, row: Row) -> "Iterations | None":
        """The row's blocks, or None when it has none; BadIterations naming the row when they are bad."""
        if not row.iteration_us:
            return None
        try:
            times = decode(row.iteration_us, row.samples)
            arrivals = decode(row.iteration_arrival_us, row.samples, "iteration_arrival_us")
        except BadIterations as exc:
            raise BadIterations(f"{describe_row(row)}: {exc}") from None
        if len(arrivals) and arrivals.shape != times.shape:
            raise BadIterations(f"{describe_row(row)}: iteration_arrival_us is {arrivals.shape[0]} x "
                                f"{arrivals.shape[1]}, iteration_us {times.shape[0]} x {times.shape[1]}")
        return cls(row, times, arrivals, row_ranks(row, len(times)))


def row_ranks(row: Row, count: int) -> tuple[int, ...]:
    """The global ranks of a row's ``count`` per-rank values: every rank of the world, or the members of
    its communicator when --concurrent-groups disjoint cut the world into contiguous groups, one per
    communicator; BadIterations for any other count."""
    if count == row.world_size:
        return tuple(range(count))
    if row.communicator is not None and count == row.group_size:
        start = row.communicator * row.group_size
        return tuple(range(start, start + count))
    raise BadIterations(f"{describe_row(row)}: per-iteration blocks hold {plural(count, 'rank')}, the row "
                        f"{plural(row.world_size, 'rank')}")


@dataclass(frozen=True)
class IterationSpike:
    """One rank's time at one sample, far above its median (``median_us``: the rank's over the row's
    samples)."""

    iteration: int
    rank: int
    time_us: float
    median_us: float
    waited_for: int | None = None  # the last rank of its group to arrive, when this rank came earlier
    waited_us: float = 0.0  # how long before that rank it arrived

    @property
    def ratio(self) -> float:
        return self.time_us / self.median_us if self.median_us > 0 else math.inf


def spikes(found: Iterations, groups: Sequence[Sequence[int]] | None = None) -> list[IterationSpike]:
    """Every (sample, rank) far above that rank's own median, the worst first; ``groups``: the global
    ranks of each group the row's collective ran in (None: one group of all its ranks).

    Each rank is judged against its own samples, not the row's: a rank that is slow at every sample
    (it waits for a straggler, or is one) is the straggler line's business, not a spike at each sample,
    and ranks whose steady times differ (the first to arrive waits, the last does not) would otherwise
    widen one shared spread until no single sample stood out.

    A rank's samples can fall in two modes (on an idle virtual machine about half of a small op's samples
    came a scheduler tick, 10x, after the rest): their spread is then so wide that 4 scaled MADs pass
    nothing, however far out a sample lies. So a sample at least SPIKE_OVER_USUAL times the rank's
    usual worst (its USUAL_WORST quantile, the sample at or below it) is a spike too."""
    times = found.times
    if not times.shape[0] or times.shape[1] < 2:  # one sample a rank has nothing to stand out from
        return []
    centres = [robust_spread(mine) for mine in times]  # each rank against its own samples
    slow = np.array([slow_mask(mine, median, log_sigma, LATENCY, SPIKE_FACTOR)
                     | (mine >= SPIKE_OVER_USUAL * np.quantile(mine, USUAL_WORST, method="lower"))
                     for mine, (median, log_sigma) in zip(times, centres, strict=True)])
    last = _last_arrivals(found, groups)
    spiked = []
    for index, sample in zip(*np.nonzero(slow), strict=True):
        time_us, median = float(times[index, sample]), centres[index][0]
        waited_for, waited = None, 0.0
        latest = last[index, sample] if last is not None else index
        arrived = found.arrivals[:, sample] if last is not None else None
        gap = 0.0 if arrived is None else float(arrived[latest] - arrived[index])
        if gap >= WAIT_SHARE * (time_us - median):  # the wait explains the spike
            waited_for, waited = found.ranks[latest], gap
        spiked.append(IterationSpike(int(sample), found.ranks[index], time_us, median, waited_for, waited))
    return sorted(spiked, key=lambda spike: -spike.time_us)


def _positions(found: Iterations, groups: Sequence[Sequence[int]] | None) -> list[list[int]]:
    """Each group as positions in the row's blocks (the groups' ranks the row holds)."""
    where = {rank: index for index, rank in enumerate(found.ranks)}
    if not groups:
        return [list(range(len(found.ranks)))]
    found_groups = [[where[rank] for rank in ranks if rank in where] for ranks in groups]
    return [positions for positions in found_groups if positions]


def _last_arrivals(found: Iterations, groups: Sequence[Sequence[int]] | None) -> np.ndarray | None:
    """[position][sample]: the position of the last rank of its group to arrive; None without arrivals."""
    if not found.arrivals.size:
        return None
    last = np.zeros(found.times.shape, dtype=np.int64)
    for positions in _positions(found, groups):
        members = found.arrivals[positions]
        last[positions] = np.asarray(positions)[members.argmax(axis=0)]
    return last


@dataclass(frozen=True)
class Straggler:
    """The rank that arrived last in the most samples."""

    rank: int
    last_in: int  # samples in which it arrived last in its group
    samples: int
    mean_late_us: float  # how far after its group's median arrival it came, averaged over those samples


def straggler(found: Iterations, groups: Sequence[Sequence[int]] | None = None) -> Straggler | None:
    """The rank last to arrive most often (ties: the lowest rank); None without arrivals or when every
    group's arrivals are the same (one rank a group)."""
    if not found.arrivals.size:
        return None
    counts = np.zeros(len(found.ranks), dtype=np.int64)
    late = np.zeros(len(found.ranks))
    for positions in _positions(found, groups):
        if len(positions) < 2:
            continue
        members = found.arrivals[positions]
        latest = members.argmax(axis=0)
        behind = members.max(axis=0) - np.median(members, axis=0)
        for column, position in enumerate(latest):
            counts[positions[position]] += 1
            late[positions[position]] += behind[column]
    if not counts.any():
        return None
    worst = int(counts.argmax())
    return Straggler(found.ranks[worst], int(counts[worst]), found.times.shape[1],
                     float(late[worst] / counts[worst]))


@dataclass(frozen=True)
class HostTimes:
    """One host's ranks' times over every sample of a row."""

    host: str
    ranks: tuple[int, ...]
    p50_us: float
    p99_us: float


def by_host(found: Iterations, hostnames: Sequence[str]) -> list[HostTimes]:
    """Each host's p50 and p99 over its ranks' samples, the slowest (highest p50) first; ranks without
    a known host go under '?'."""
    hosts: dict[str, list[int]] = {}
    for position, rank in enumerate(found.ranks):
        hosts.setdefault(hostnames[rank] if rank < len(hostnames) else "?", []).append(position)
    found_hosts = [HostTimes(host, tuple(found.ranks[p] for p in positions),
                             float(np.percentile(found.times[positions], 50)),
                             float(np.percentile(found.times[positions], 99)))
                   for host, positions in hosts.items()]
    return sorted(found_hosts, key=lambda host: -host.p50_us)


@dataclass(frozen=True)
class FirstOp:
    """The size's first ops against its steady state."""

    first_op_us: float | None  # the op before warm-up (Row.first_op_us)
    first_sample_us: float  # the first timed sample, max over ranks
    steady_us: float  # the median of the samples after the first, each the max over ranks


def first_op(found: Iterations) -> FirstOp | None:
    """None with fewer than 2 samples (no steady state to compare with)."""
    slowest = found.times.max(axis=0)
    if len(slowest) < 2:
        return None
    return FirstOp(found.row.first_op_us, float(slowest[0]), float(np.median(slowest[1:])))


def rank_cvs(found: Iterations) -> np.ndarray:
    """Each rank's own coefficient of variation over its samples (stdev with n - 1, over the mean)."""
    times = found.times
    if times.shape[1] < 2:
        return np.zeros(len(times))
    means = times.mean(axis=1)
    return np.where(means > 0, times.std(axis=1, ddof=1) / np.where(means > 0, means, 1.0), 0.0)


# --- lines, for the console and `commbench iterations` -----------------------------------------------

def _host(rank: int, hostnames: Sequence[str]) -> str:
    return hostnames[rank] if rank < len(hostnames) else "?"


def _us(value: float) -> str:
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.1f} µs"


def spike_line(spike: IterationSpike, hostnames: Sequence[str]) -> str:
    """'iteration 4: rank 1 (node2) 50.2 ms, 120x its median 418.0 µs, its own time' or '..., waited
    49.8 ms for rank 1 (node2), which arrived last'."""
    where = f"iteration {spike.iteration}: rank {spike.rank} ({_host(spike.rank, hostnames)})"
    what = f"{_us(spike.time_us)}, {spike.ratio:.0f}x its median {_us(spike.median_us)}"
    if spike.waited_for is None:
        return f"{where} {what}, its own time"
    return (f"{where} {what}, waited {_us(spike.waited_us)} for rank {spike.waited_for} "
            f"({_host(spike.waited_for, hostnames)}), which arrived last")


def row_lines(found: Iterations, hostnames: Sequence[str], groups: Sequence[Sequence[int]] | None = None,
              every_spike: bool = False) -> list[str]:
    """What one row's iterations show, a line each: its spikes (the worst MAX_SPIKES_SHOWN unless
    ``every_spike``), the straggler, the hosts when there are several, the first op and the CVs."""
    row = found.row
    title = f"{describe_row(row)}, {plural(found.times.shape[1], 'sample')}"
    lines = []
    spiked = spikes(found, groups)
    shown = spiked if every_spike else spiked[:MAX_SPIKES_SHOWN]
    lines += [f"{title}: spike at {spike_line(spike, hostnames)}" for spike in shown]
    if len(shown) < len(spiked):
        lines.append(f"{title}: {plural(len(spiked) - len(shown), 'more spike')} (commbench iterations)")
    late = straggler(found, groups)
    if late is not None and late.last_in > 1:
        lines.append(f"{title}: rank {late.rank} ({_host(late.rank, hostnames)}) arrived last in "
                     f"{late.last_in} of {late.samples}, {_us(late.mean_late_us)} after its group's median")
    hosts = by_host(found, hostnames)
    if len(hosts) > 1:
        middle = float(np.median([host.p50_us for host in hosts]))
        slowest = hosts[0]
        lines.append(f"{title}: slowest host {slowest.host} (ranks {_rank_list(slowest.ranks)}) p50 "
                     f"{_us(slowest.p50_us)}, p99 {_us(slowest.p99_us)}; the median host's p50 "
                     f"{_us(middle)}")
    first = first_op(found)
    if first is not None:
        before = "" if first.first_op_us is None else (
            f"first op (before warm-up) {_us(first.first_op_us)}, "
            f"{_times(first.first_op_us, first.steady_us)}; ")
        lines.append(f"{title}: {before}first timed sample {_us(first.first_sample_us)}, "
                     f"{_times(first.first_sample_us, first.steady_us)}; steady {_us(first.steady_us)}")
    cvs = rank_cvs(found)
    if row.time_us_cv is not None and len(cvs):
        worst = int(cvs.argmax())
        lines.append(f"{title}: CV {100 * row.time_us_cv:.1f}% (p50 {_us(row.time_us_p50 or 0.0)}, p99 "
                     f"{_us(row.time_us_p99 or 0.0)}); rank {found.ranks[worst]} the most variable, CV "
                     f"{100 * cvs[worst]:.1f}%")
    return lines


def _times(value: float, steady: float) -> str:
    return f"{value / steady:.1f}x the steady state" if steady > 0 else "no steady state"


def _rank_list(ranks: Sequence[int]) -> str:
    """'0-3' for consecutive ranks, else '0,2,5'."""
    if len(ranks) > 2 and list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(str(rank) for rank in ranks)


def table_lines(rows: Sequence[Row], hostnames: Sequence[str], groups: Sequence[Sequence[int]] | None = None
                ) -> list[str]:
    """The console's lines after a table: for each row with iterations, its spikes, straggler, hosts,
    first op and CV; a row whose blocks are damaged gets a line saying so."""
    lines = []
    for row in rows:
        try:
            found = Iterations.of(row)
        except BadIterations as exc:
            lines.append(f"per-iteration: {exc}")
            continue
        if found is not None:
            lines += row_lines(found, hostnames, groups)
    return lines
