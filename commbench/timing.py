"""Timers and the two timed loops.

Sync mode: each op is issued and completed before the next; one sample per op.
Async mode: a window of ops is issued with async_op=True, then every handle is waited on; one sample per
window, the window's time divided by its ops. The clock stops only after the last handle has completed.

Nothing inside a timed region allocates, fills or checks: buffers, events and sample slots exist before
the first op is issued.

Arrivals: right after the barrier that opens a timed region every rank reads its monotonic clock; the
host stamp at the start of each op, relative to that reading, is the rank's arrival at that op. The
barrier releases all ranks within its own latency, so arrivals are comparable across ranks and hosts
without synchronised clocks (to within that latency).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from commbench.backends.base import Backend, CollectiveArgs


@dataclass(frozen=True)
class BoundOp:
    """A collective bound to its backend and arguments: what the timed loops issue, ``op()`` at a time.
    The loops set ``args.async_op`` for the mode they time."""

    backend: Backend
    args: CollectiveArgs
    issue: Callable[[Backend, CollectiveArgs], None]

    def __call__(self) -> None:
        self.issue(self.backend, self.args)


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


class CudaEventTimer:
    """CUDA events on the current stream: device time from the first issue to the last completion.

    Waiting on a handle makes the current stream wait for the collective's stream, so the stop event,
    recorded after the waits and before the host synchronises, marks the collective's end on the device.
    """

    def __init__(self, backend: Backend, slots: int) -> None:
        self._backend = backend
        self._starts = [torch.cuda.Event(enable_timing=True) for _ in range(slots)]
        self._ends = [torch.cuda.Event(enable_timing=True) for _ in range(slots)]
        self._host_starts = [0] * slots  # when the host issued each op: the rank's arrival

    def start(self, slot: int) -> None:
        self._host_starts[slot] = time.perf_counter_ns()
        self._starts[slot].record()

    def arrivals(self, origin_ns: int) -> list[float]:
        return [(start - origin_ns) * 1e-9 for start in self._host_starts]

    def finish(self, slot: int, args: CollectiveArgs) -> None:
        self._backend.wait(args)
        self._ends[slot].record()
        self._backend.sync_device()

    def seconds(self) -> list[float]:
        torch.cuda.synchronize()
        return [start.elapsed_time(end) * 1e-3 for start, end in zip(self._starts, self._ends, strict=True)]


Timer = WallClockTimer | CudaEventTimer


def make_timer(backend: Backend, slots: int) -> Timer:
    if backend.device.type == "cuda":
        return CudaEventTimer(backend, slots)
    return WallClockTimer(backend, slots)


def warm_up(op: BoundOp, count: int) -> None:
    for _ in range(count):
        op()
    op.backend.complete(op.args)


@dataclass
class TimedRegion:
    """One rank's timed region: seconds per sample, and when it arrived at each sample's first op,
    in seconds after the barrier that opened the region."""

    seconds: list[float]
    arrivals: list[float]


def time_sync(op: BoundOp, iters: int, barrier_per_iter: bool = False) -> TimedRegion:
    """Per-op seconds on this rank, each op completed before the next is issued, and its arrivals.

    With ``barrier_per_iter`` every op starts from a barrier (outside its timed span), so ranks enter
    each op together, as nccl-tests' -z does; without it ranks run back to back.
    """
    backend, args = op.backend, op.args
    args.async_op = False
    timer = make_timer(backend, iters)
    backend.barrier()
    origin_ns = time.perf_counter_ns()
    for slot in range(iters):
        if barrier_per_iter:
            backend.barrier()
        timer.start(slot)
        op()
        timer.finish(slot, args)
    return TimedRegion(timer.seconds(), timer.arrivals(origin_ns))


def time_async(op: BoundOp, iters: int) -> TimedRegion:
    """Seconds per op over one window of ``iters`` ops in flight together, on this rank."""
    backend, args = op.backend, op.args
    args.async_op = True
    timer = make_timer(backend, 1)
    backend.barrier()
    origin_ns = time.perf_counter_ns()
    timer.start(0)
    for _ in range(iters):
        op()
    timer.finish(0, args)
    args.async_op = False
    return TimedRegion([seconds / iters for seconds in timer.seconds()], timer.arrivals(origin_ns))


def time_cuda_graph(op: BoundOp, ops: int, replays: int) -> TimedRegion:
    """Seconds per op over each of ``replays`` replays of a CUDA graph holding ``ops`` ops.

    Capturing takes the host's launch cost out of the measurement: what is left is the device's own
    time for the collectives, back to back. A replay's arrival is when the host launched it.
    """
    backend, args = op.backend, op.args
    args.async_op = False
    side = torch.cuda.Stream(backend.device)
    side.wait_stream(torch.cuda.current_stream(backend.device))
    with torch.cuda.stream(side):  # one eager op on a side stream before capture, as capture requires
        op()
    torch.cuda.current_stream(backend.device).wait_stream(side)
    backend.sync_device()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(ops):
            op()
    timer = CudaEventTimer(backend, replays)
    backend.barrier()
    origin_ns = time.perf_counter_ns()
    for slot in range(replays):
        timer.start(slot)
        graph.replay()
        timer.finish(slot, args)
    return TimedRegion([seconds / ops for seconds in timer.seconds()], timer.arrivals(origin_ns))
