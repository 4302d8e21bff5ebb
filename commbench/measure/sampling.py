"""How many ops to time at each size, when to stop, and how long to warm up.

Adaptive (the default) spends each size's time where precision is still missing:

- Warm-up runs until the op's time has stopped falling (an op no more than STEADY_FALL faster than the
  one before it, each the slowest rank's), within --warmup ops and WARMUP_SHARE of --time-per-size at
  the latest op's time: small ops warm up until steady, a 0.6 s op gets no warm-up beyond its probe.
- Sampling then runs in batches. Every row gets at least ``SamplingPolicy.fewest()`` samples (6, the
  fewest from which the median's distribution-free 95% interval exists, or --min-iters if more), so
  every row has an interval whatever its size costs. Then, batch by batch (each what the interval's
  width says is missing, at most as large as all before it, and no larger than the time left allows at
  the median time so far), until the interval's half-width is within --precision of the median, the
  timed ops (the slowest rank's seconds) have taken --time-per-size, or --max-iters ops have run.
- Each size is judged on its own samples and its own time: a slow size takes no samples from another.

Every decision is rank 0's, on the slowest rank's times, broadcast: all ranks run the same ops. A fixed
--iters N turns adaptation off: exactly --warmup warm-up ops and N timed ops.

Async mode samples windows: a fixed --iters N is one window of N ops; adaptively each window holds about
a tenth of the ops --time-per-size affords at the latest warm-up op's time, and windows are sampled as
sync ops are.

An ``Interlude`` (--check-every) runs untimed work after every N timed ops: no timed region (sync batch
or async window) then spans more than N ops, and the work runs between regions, whose barriers keep it
out of the next one. ``max_window`` (from the memory budget: each op in flight holds torch's
temporaries) caps an async window the same way.
"""

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from commbench.backends.base import Backend
from commbench.measure.stats import MIN_SAMPLES_FOR_CI, PerRank, ci95_rel, slowest_rank_per_iteration
from commbench.measure.timing import BoundOp, TimedRegion, time_async, time_cuda_graph, time_sync, warm_up

ASYNC_WINDOWS = 10  # adaptive async mode: a window holds about a tenth of the ops the time budget affords
WARMUP_SHARE = 0.2  # adaptive warm-up stops before it would take this share of --time-per-size
STEADY_FALL = 0.1  # adaptive warm-up: an op no more than this much faster than the one before is steady


@dataclass(frozen=True)
class SamplingPolicy:
    fixed_iters: int | None  # None: adaptive
    time_per_size: float
    min_iters: int
    max_iters: int
    precision: float
    barrier_per_iter: bool = False
    cuda_graph_replays: int = 0
    warmup: int = 5  # fixed: the warm-up ops; adaptive: the most of them

    def fewest(self) -> int:
        """An adaptive row's fewest samples: enough for the median's 95% interval, or --min-iters if
        more, within --max-iters."""
        return min(max(self.min_iters, MIN_SAMPLES_FOR_CI), self.max_iters)


def warming_done(seconds: list[float], policy: SamplingPolicy) -> bool:
    """Whether adaptive warm-up is over, given the slowest rank's seconds of each op so far (the probe's
    first): the latest op was no more than STEADY_FALL faster than the one before (the time has stopped
    falling), --warmup ops have run after the probe, or one more at the latest op's time would take the
    warm-up past WARMUP_SHARE of --time-per-size."""
    ran = len(seconds) - 1
    if ran >= policy.warmup or sum(seconds) + seconds[-1] > WARMUP_SHARE * policy.time_per_size:
        return True
    return ran > 0 and seconds[-1] >= (1 - STEADY_FALL) * seconds[-2]


def warm_up_for(op: BoundOp, policy: SamplingPolicy, probe_seconds: float) -> tuple[int, float]:
    """Warm-up as the policy says, in the mode ``op.args.async_op`` sets: (ops run, the slowest rank's
    seconds for the latest op, the probe's when none ran). ``probe_seconds``: the probe op's, slowest
    rank's. Adaptive warm-up times each op on every rank and gathers the times; rank 0 applies
    ``warming_done`` and broadcasts whether to go on."""
    if policy.fixed_iters is not None:
        warm_up(op, policy.warmup)
        return policy.warmup, probe_seconds
    backend, seconds = op.backend, [probe_seconds]
    done = warming_done(seconds, policy) if backend.rank == 0 else None
    while not backend.broadcast_object(done):
        started = time.perf_counter()
        op()
        backend.complete(op.args)
        seconds.append(float(backend.all_gather_array([time.perf_counter() - started]).max()))
        done = warming_done(seconds, policy) if backend.rank == 0 else None
    return len(seconds) - 1, seconds[-1]


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


def collect(op: BoundOp, mode: str, policy: SamplingPolicy, per_op_seconds: float,
            interlude: Interlude | None = None, max_window: int | None = None) -> Sampled:
    """Time ``op`` in ``mode`` under ``policy`` (its warm-up done: ``warm_up_for``); every rank returns the
    same samples of every rank. ``per_op_seconds``: the slowest rank's time for the latest untimed op
    (adaptive async mode sizes its windows by it).

    With an ``interlude`` its work runs after every ``interlude.every`` timed ops (not with CUDA graphs,
    whose replays are checked only after timing); an async window never holds more than ``max_window``
    ops (the memory budget's room for torch's temporaries).
    """
    backend = op.backend
    if policy.cuda_graph_replays:
        ops = policy.fixed_iters or 20
        seconds, arrivals, host = _gather(backend, [time_cuda_graph(op, ops, policy.cuda_graph_replays)])
        return Sampled(seconds, ops * policy.cuda_graph_replays, arrivals, host)
    split = Split(mode, policy, interlude, max_window)
    if policy.fixed_iters is not None:
        seconds, arrivals, host = _gather(backend, split.timed(op, policy.fixed_iters))
        return Sampled(seconds, policy.fixed_iters, arrivals, host)
    return _collect_adaptive(op, split, policy, per_op_seconds)


def _collect_adaptive(op: BoundOp, split: "Split", policy: SamplingPolicy, per_op_seconds: float) -> Sampled:
    """Batches of samples until the stop rule of the module docstring holds. Every count is rank 0's."""
    backend = op.backend
    ops_per_sample = 1 if split.mode == "sync" else window_ops(policy, per_op_seconds, split.largest())
    most = max(policy.max_iters // ops_per_sample, policy.fewest())
    ops_per_sample, batch = backend.broadcast_object((ops_per_sample, policy.fewest()) if backend.rank == 0
                                                     else None)
    series: list[np.ndarray | None] = [None, None, None]  # seconds, arrivals, host seconds
    taken = 0
    while batch > 0:
        if split.mode == "sync":
            regions = split.timed(op, batch)
        else:
            regions = [split.window(op, ops_per_sample) for _ in range(batch)]
        series = [_extend(mine, gathered) for mine, gathered in zip(series, _gather(backend, regions),
                                                                    strict=True)]
        taken += batch
        batch = backend.broadcast_object(
            next_batch(slowest_rank_per_iteration(series[0]), taken, most, ops_per_sample, policy)
            if backend.rank == 0 else None)
    seconds, arrivals, host = ([] if values is None else values for values in series)
    return Sampled(seconds, taken * ops_per_sample, arrivals, host)


def window_ops(policy: SamplingPolicy, per_op_seconds: float, largest: int) -> int:
    """Ops per adaptive async window: a tenth (ASYNC_WINDOWS) of those --time-per-size affords at
    ``per_op_seconds`` (within --max-iters), at least one, at most ``largest`` (the memory budget's and
    --check-every's cap)."""
    affordable = policy.max_iters if per_op_seconds <= 0 else int(policy.time_per_size / per_op_seconds)
    return min(max(1, math.ceil(min(affordable, policy.max_iters) / ASYNC_WINDOWS)), largest)


def next_batch(samples: list[float], taken: int, most: int, ops_per_sample: int, policy: SamplingPolicy
               ) -> int:
    """The next batch of samples, 0 to stop: fewer than ``policy.fewest()`` samples are never enough;
    after them, stop once the median's interval is within --precision, ``most`` samples are taken, or
    the timed ops so far (``samples``, the slowest rank's seconds per op, ``ops_per_sample`` ops each)
    leave no time in --time-per-size for one more sample at their median. A batch is what the interval's
    width says is missing (it narrows as 1 / sqrt(samples): r / p times too wide wants (r / p)^2 times
    the samples), at least a quarter of what was taken and at most as much again, within those limits.
    """
    if taken < policy.fewest():
        return policy.fewest() - taken
    if taken >= most:
        return 0
    relative = ci95_rel(samples)
    if relative is not None and relative <= policy.precision:
        return 0
    missing = taken if relative is None else math.ceil(taken * (relative / policy.precision) ** 2) - taken
    per_sample = statistics.median(samples) * ops_per_sample
    spent = sum(samples) * ops_per_sample
    fitting = most if per_sample <= 0 else int((policy.time_per_size - spent) / per_sample)
    return max(0, min(taken, max(missing, math.ceil(taken / 4)), fitting, most - taken))


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
