"""Timers and the timed loops: sync, async and CUDA-graph replays.

Sync mode: each op is issued and completed before the next; one sample per op.
Async mode: a window of ops is issued with async_op=True, then every handle is waited on; one sample per
window, the window's time divided by its ops. The clock stops only after the last handle has completed.
Every region also yields the host-observed time of its samples (on CPU the same clock; on CUDA see
cuda_timing.py).

Nothing inside a timed region allocates, fills or checks: buffers, events and sample slots exist before
the first op is issued. An op's ``prepare`` (--flush-cache's write) runs before each sample, outside its
time: before the barrier of --barrier per-iter, before the timer starts.

Arrivals: right after the barrier that opens a timed region every rank reads its monotonic clock; the
host stamp at the start of each op, relative to that reading, is the rank's arrival at that op. The
barrier releases all ranks within its own latency, so arrivals are comparable across ranks and hosts
without synchronised clocks (to within that latency).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from commbench.backends.base import Backend, CollectiveArgs
from commbench.measure.cuda_timing import CudaEventTimer, captured


@dataclass(frozen=True)
class BoundOp:
    """A collective bound to its backend and arguments: what the timed loops issue, ``op()`` at a time.
    The loops set ``args.async_op`` for the mode they time."""

    backend: Backend
    args: CollectiveArgs
    issue: Callable[[Backend, CollectiveArgs], None]
    before: Callable[[], None] | None = None  # untimed work before each sample (measure/cache.py's flush)

    def __call__(self) -> None:
        self.issue(self.backend, self.args)

    def prepare(self) -> None:
        """What runs before each sample, outside its time."""
        if self.before is not None:
            self.before()


class WallClockTimer:
    """Host monotonic clock; the stop stamp is taken once the device is idle again."""

    def __init__(self, backend: Backend, slots: int) -> None:
        self._backend = backend
        self._starts = [0] * slots
        self._ends = [0] * slots

    def start(self, slot: int) -> None:
        self._starts[slot] = time.perf_counter_ns()

    def arrivals(self, origin_ns: int) -> list[float]:
        """Seconds from ``origin_ns`` to the start of each op, on this host's clock."""
        return [(start - origin_ns) * 1e-9 for start in self._starts]

    def finish(self, slot: int, args: CollectiveArgs) -> None:
        self._backend.wait(args)
        self._backend.sync_device()
        self._ends[slot] = time.perf_counter_ns()

    def seconds(self) -> list[float]:
        return [(end - start) * 1e-9 for start, end in zip(self._starts, self._ends, strict=True)]

    def host_seconds(self) -> list[float]:
        return self.seconds()  # the host's clock is the only one

    def observe_host(self, slot: int, op: Callable[[], None], args: CollectiveArgs) -> None:
        """Nothing more to observe: the op above was timed on the host."""


Timer = WallClockTimer | CudaEventTimer


def make_timer(backend: Backend, slots: int, hide_launch: bool = False) -> Timer:
    if backend.device.type == "cuda":
        return CudaEventTimer(backend, slots, hide_launch)
    return WallClockTimer(backend, slots)


def warm_up(op: BoundOp, count: int) -> None:
    for _ in range(count):
        op()
    op.backend.complete(op.args)


@dataclass
class TimedRegion:
    """One rank's timed region: seconds per sample, when it arrived at each sample's first op (in
    seconds after the barrier that opened the region), and each sample's host-observed seconds."""

    seconds: list[float]
    arrivals: list[float]
    host_seconds: list[float] = field(default_factory=list)


def time_sync(op: BoundOp, iters: int, barrier_per_iter: bool = False) -> TimedRegion:
    """Per-op seconds on this rank, each op completed before the next is issued, and its arrivals.

    With ``barrier_per_iter`` every op starts from a barrier (outside its timed span), so ranks enter
    each op together, as nccl-tests' -z does; without it ranks run back to back.
    """
    backend, args = op.backend, op.args
    args.async_op = False
    timer = make_timer(backend, iters, hide_launch=True)
    backend.barrier()
    origin_ns = time.perf_counter_ns()
    for slot in range(iters):
        op.prepare()
        if barrier_per_iter:
            backend.barrier()
        timer.start(slot)
        op()
        timer.finish(slot, args)
        timer.observe_host(slot, op, args)
    return TimedRegion(timer.seconds(), timer.arrivals(origin_ns), timer.host_seconds())


def time_async(op: BoundOp, iters: int) -> TimedRegion:
    """Seconds per op over one window of ``iters`` ops in flight together, on this rank."""
    backend, args = op.backend, op.args
    args.async_op = True
    timer = make_timer(backend, 1)
    op.prepare()
    backend.barrier()
    origin_ns = time.perf_counter_ns()
    timer.start(0)
    for _ in range(iters):
        op()
    timer.finish(0, args)
    args.async_op = False
    return TimedRegion([seconds / iters for seconds in timer.seconds()], timer.arrivals(origin_ns),
                       [seconds / iters for seconds in timer.host_seconds()])


def time_cuda_graph(op: BoundOp, ops: int, replays: int) -> TimedRegion:
    """Seconds per op over each of ``replays`` replays of a CUDA graph holding ``ops`` ops.

    Capturing takes the host's launch cost out of the measurement: what is left is the device's own
    time for the collectives, back to back. A replay's arrival is when the host launched it.
    """
    backend, args = op.backend, op.args
    args.async_op = False
    graph = captured(backend, op, ops)
    timer = CudaEventTimer(backend, replays)
    backend.barrier()
    origin_ns = time.perf_counter_ns()
    for slot in range(replays):
        op.prepare()
        timer.start(slot)
        graph.replay()
        timer.finish(slot, args)
    return TimedRegion([seconds / ops for seconds in timer.seconds()], timer.arrivals(origin_ns),
                       [seconds / ops for seconds in timer.host_seconds()])


def graph_replay_op(op: BoundOp) -> BoundOp:
    """An op whose issue replays a CUDA graph of one ``op``: what --check runs with CUDA graphs, so the
    values checked are those a replay produces. Captured now (capture runs the op once, eagerly), before
    the check fills its inputs."""
    op.args.async_op = False
    graph = captured(op.backend, op, 1)
    return BoundOp(op.backend, op.args, lambda backend, args: graph.replay())
