"""How many ops to time at each size, and when to stop.

Adaptive (the default), after Intel MPI Benchmarks' dynamic policy: one probe op is timed, the max over
ranks is taken, and rank 0 chooses a count that fits the per-size time budget, between --min-iters and
--max-iters and never above the count of a smaller size (in sync mode a count between 6 and 39 rises
to 40 or 20 samples within twice the budget, else falls to --min-iters: see ``sync_samples``). Ops
then run in batches, the first of 20 samples (in sync mode the probe is the first of them: it is timed
as every sample is); after each batch rank 0 computes the 95% confidence interval of the median and
stops once it is within --precision. Every count is decided on rank 0 and broadcast, so all ranks run the same
number of ops. A fixed --iters N turns adaptation off.

Async mode samples windows: a fixed --iters N is one window of N ops; adaptively the count is split into
windows of about a tenth of it, so the windows' per-op times have a median and an interval too.

An ``Interlude`` (--check-every) runs untimed work after every N timed ops: no timed region (sync batch
or async window) then spans more than N ops, and the work runs between regions, whose barriers keep it
out of the next one. ``max_window`` (from the memory budget: each op in flight holds torch's
temporaries) caps an async window the same way.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from commbench.backends.base import Backend
from commbench.measure.stats import MIN_SAMPLES_FOR_CI, PerRank, ci95_rel, slowest_rank_per_iteration
from commbench.measure.timing import BoundOp, TimedRegion, time_async, time_cuda_graph, time_sync

ASYNC_WINDOWS = 10  # adaptive async mode splits its op count into about this many windows
# Sync mode: no stop for precision before this many samples, and no interval from fewer (the 95%
# interval of the median of n < 20 samples spans most of them; a fixed --iters 20 has [x6, x15]).
SAMPLES_FOR_INTERVAL = 20


@dataclass(frozen=True)
class SamplingPolicy:
    fixed_iters: int | None  # None: adaptive
    time_per_size: float
    min_iters: int
    max_iters: int
    precision: float
    barrier_per_iter: bool = False
    cuda_graph_replays: int = 0


class IterationBudget:
    """The calibrated op counts of one collective x dtype x op x mode, by size."""

    def __init__(self, policy: SamplingPolicy) -> None:
        self.policy = policy
        self._counts: dict[int, int] = {}

    def choose(self, size_bytes: int, probe_seconds: float) -> int:
        """Ops that fit the time budget after a probe of ``probe_seconds`` (max over ranks)."""
        policy = self.policy
        fitting = policy.max_iters if probe_seconds <= 0 else int(policy.time_per_size / probe_seconds)
        count = max(policy.min_iters, min(policy.max_iters, fitting))
        smaller = [n for size, n in self._counts.items() if size < size_bytes]
        if smaller:  # a larger message never gets more iterations than a smaller one
            count = min(count, min(smaller))
        larger = [n for size, n in self._counts.items() if size > size_bytes]
        if larger:  # sizes given out of order: stay at or above what larger sizes got
            count = max(count, max(larger))
        self._counts[size_bytes] = count
        return count


@dataclass
class Interlude:
    """Untimed work (a checked op) to run after every ``every`` timed ops, between timed regions."""

    every: int
    run: Callable[[], None]
    since: int = 0  # timed ops since the work last ran
    ran: bool = False

    def after(self, ops: int) -> None:
        self.since += ops
        if self.since >= self.every:
            self._run()

    def finish(self) -> None:
        """After the last region: run once more unless it just ran."""
        if self.since or not self.ran:
            self._run()

    def _run(self) -> None:
        self.run()
        self.since, self.ran = 0, True


@dataclass
class Sampled:
    """Every rank's samples: [rank][sample] lists, or (a sweep's, gathered) 2-D arrays (stats.PerRank)."""

    per_rank_seconds: PerRank  # [rank][sample], seconds per op
    ops: int  # ops timed in all
    # [rank][sample]: when the rank entered the sample, seconds after the barrier opening its region
    per_rank_arrivals: PerRank = field(default_factory=list)
    # [rank][sample]: seconds per op as the host saw them (on CPU the samples themselves)
    per_rank_host_seconds: PerRank = field(default_factory=list)

    @property
    def slowest(self) -> list[float]:
        return slowest_rank_per_iteration(self.per_rank_seconds)


def _extend(into: np.ndarray | None, batch: np.ndarray) -> np.ndarray:
    return batch if into is None else np.concatenate([into, batch], axis=1)


def _gather(backend: Backend, regions: list[TimedRegion]) -> list[np.ndarray]:
    """Every rank's seconds, arrivals and host seconds of these regions, in one gather: three arrays of
    [rank][sample] (a Python float per value would cost seconds per size at thousands of ranks)."""
    series = [[value for region in regions for value in getattr(region, name)]
              for name in ("seconds", "arrivals", "host_seconds")]
    gathered = backend.all_gather_array([value for values in series for value in values])
    found, start = [], 0
    for values in series:
        found.append(gathered[:, start:start + len(values)])
        start += len(values)
    return found


def collect(op: BoundOp, mode: str, budget: IterationBudget, size_bytes: int,
            interlude: Interlude | None = None, max_window: int | None = None) -> Sampled:
    """Time ``op`` in ``mode`` under the budget's policy; every rank returns the same samples of every
    rank.

    With an ``interlude`` its work runs after every ``interlude.every`` timed ops (not with CUDA graphs,
    whose replays are checked only after timing); an async window never holds more than ``max_window``
    ops (the memory budget's room for torch's temporaries).
    """
    policy, backend = budget.policy, op.backend
    if policy.cuda_graph_replays:
        ops = policy.fixed_iters or 20
        seconds, arrivals, host = _gather(backend, [time_cuda_graph(op, ops, policy.cuda_graph_replays)])
        return Sampled(seconds, ops * policy.cuda_graph_replays, arrivals, host)
    split = Split(mode, policy, interlude, max_window)
    if policy.fixed_iters is not None:
        seconds, arrivals, host = _gather(backend, split.timed(op, policy.fixed_iters))
        return Sampled(seconds, policy.fixed_iters, arrivals, host)
    return _collect_adaptive(op, split, budget, size_bytes)


def _collect_adaptive(op: BoundOp, split: "Split", budget: IterationBudget, size_bytes: int) -> Sampled:
    """Adaptive counts (see the module docstring): a probe, a count that fits the time budget, then
    batches until the count is spent or the median is precise enough. Every count is rank 0's."""
    policy, backend = budget.policy, op.backend
    probe_region = _gather(backend, [time_sync(op, 1, barrier_per_iter=policy.barrier_per_iter)])
    probe = float(probe_region[0].max())
    plan = _sample_plan(split, budget, size_bytes, probe) if backend.rank == 0 else None
    ops_per_sample, samples_wanted, batch = backend.broadcast_object(plan)
    # seconds, arrivals, host seconds; in sync mode the probe, timed as every sample is, is the first
    series: list[np.ndarray | None] = [None, None, None]
    taken = 0
    if split.mode == "sync":
        series, taken, batch = probe_region, 1, batch - 1
        if split.interlude is not None:
            split.interlude.after(1)
    while batch > 0:
        if split.mode == "sync":
            regions = split.timed(op, batch)
        else:
            regions = [split.window(op, ops_per_sample) for _ in range(batch)]
        series = [_extend(mine, gathered) for mine, gathered in zip(series, _gather(backend, regions),
                                                                    strict=True)]
        taken += batch
        batch = _agreed_next_batch(backend, [] if series[0] is None else series[0], taken, samples_wanted,
                                   policy)
    seconds, arrivals, host = ([] if values is None else values for values in series)
    return Sampled(seconds, taken * ops_per_sample, arrivals, host)


def _sample_plan(split: "Split", budget: IterationBudget, size_bytes: int, probe: float
                 ) -> tuple[int, int, int]:
    """(ops per sample, samples wanted, the first batch): sync mode samples ops, async mode windows."""
    policy = budget.policy
    count = budget.choose(size_bytes, probe)
    if split.mode == "sync":
        ops_per_sample, samples_wanted = 1, sync_samples(count, probe, policy)
    else:
        ops_per_sample = min(max(1, math.ceil(count / ASYNC_WINDOWS)), split.largest())
        samples_wanted = math.ceil(count / ops_per_sample)
    return ops_per_sample, samples_wanted, min(samples_wanted, max(policy.min_iters, SAMPLES_FOR_INTERVAL))


def sync_samples(count: int, probe_seconds: float, policy: SamplingPolicy) -> int:
    """How many sync samples to take of the ``count`` the time budget affords. Below
    MIN_SAMPLES_FOR_CI no interval is possible: ``count``. Up to 2 x SAMPLES_FOR_INTERVAL the median's
    interval is no narrower than a fixed --iters 20's, or spans most of the samples: the count rises to
    the next of 20 and 40 samples that fits in twice --time-per-size, or, when not even 20 fit, falls to
    --min-iters (no interval claimed rather than one as wide as the samples)."""
    if count < MIN_SAMPLES_FOR_CI or count >= 2 * SAMPLES_FOR_INTERVAL:
        return count
    for samples in (2 * SAMPLES_FOR_INTERVAL, SAMPLES_FOR_INTERVAL):
        if samples * probe_seconds <= 2 * policy.time_per_size:
            return min(max(samples, count), policy.max_iters)
    return count if count >= SAMPLES_FOR_INTERVAL else min(count, policy.min_iters)


def _agreed_next_batch(backend: Backend, per_rank: PerRank, taken: int, wanted: int,
                       policy: SamplingPolicy) -> int:
    """Rank 0's next batch, broadcast: every rank runs the same ops."""
    batch = _next_batch(slowest_rank_per_iteration(per_rank), taken, wanted, policy) if backend.rank == 0 \
        else 0
    return backend.broadcast_object(batch)


def _next_batch(samples: list[float], taken: int, wanted: int, policy: SamplingPolicy) -> int:
    """0 to stop: the budget is spent or the median is known to within the precision asked for."""
    if taken >= wanted:
        return 0
    if taken >= policy.min_iters:
        relative = ci95_rel(samples)
        if relative is not None and relative <= policy.precision:
            return 0
    return min(wanted - taken, taken)  # double what has been taken, within the budget


@dataclass(frozen=True)
class Split:
    """How timed ops are cut into regions: a sync batch or an async window never spans an interlude's
    work, and an async window never holds more than ``max_window`` ops."""

    mode: str
    policy: SamplingPolicy
    interlude: Interlude | None = None
    max_window: int | None = None

    def largest(self) -> int:
        """The most ops one region may hold."""
        limits = [1 << 62]
        if self.interlude is not None:
            limits.append(self.interlude.every)
        if self.mode == "async" and self.max_window is not None:
            limits.append(self.max_window)
        return min(limits)

    def timed(self, op: BoundOp, iters: int) -> list[TimedRegion]:
        """``iters`` timed ops as one region, or as regions of at most ``largest()`` ops with the
        interlude's work between them."""
        regions = []
        remaining = iters
        while remaining > 0:
            ops = min(remaining, self.largest())
            regions.append(_timed(op, self.mode, self.policy, ops))
            remaining -= ops
            if self.interlude is not None:
                self.interlude.after(ops)
        return regions

    def window(self, op: BoundOp, ops: int) -> TimedRegion:
        """One async window of ``ops`` ops, then the interlude's turn."""
        region = time_async(op, ops)
        if self.interlude is not None:
            self.interlude.after(ops)
        return region


def _timed(op: BoundOp, mode: str, policy: SamplingPolicy, iters: int) -> TimedRegion:
    if mode == "sync":
        return time_sync(op, iters, barrier_per_iter=policy.barrier_per_iter)
    return time_async(op, iters)
