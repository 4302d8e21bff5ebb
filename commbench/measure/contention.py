"""The timed loop of contention (--concurrent, --with-compute): ops on several communicators, and a matmul,
racing from one rank.

One iteration: every op's ``prepare`` (--flush-cache), a barrier, the compute launched, then each op
issued with ``async_op=True`` (the host stamps each issue), and every op's completion stamped as it
happens (Backend.completion_times). An op's time is from its own issue to its completion as the host
sees it, on CPU and CUDA alike: a number that includes whatever the others cost it. The compute's time
is its own: on CUDA device time between two events on the current stream (the collectives run on their
communicators' streams), on CPU the host's time of the matmul, run on a thread of its own so that the
rank's thread issues and completes the ops while it runs (torch releases the GIL inside the matmul).

The same loop times each part alone: an op with no other op and no compute, the compute with no op;
a phase with nothing on a rank (a disjoint group's op running alone elsewhere) still joins each
iteration's barrier, so every rank runs the same iterations.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.backends.base import Backend
from commbench.measure.timing import BoundOp

if TYPE_CHECKING:
    import torch


class HostCompute:
    """The compute on a thread of its own, timed on the host (CPU)."""

    def __init__(self, compute: Callable[[], None]) -> None:
        self._compute = compute
        self._thread: threading.Thread | None = None
        self._seconds = 0.0
        self._error: BaseException | None = None

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            self._compute()
        except BaseException as exc:  # raised again on the rank's thread, by seconds()
            self._error = exc
        self._seconds = time.perf_counter() - started

    def launch(self) -> None:
        self._thread = threading.Thread(target=self._run, name="commbench-compute", daemon=True)
        self._thread.start()

    def seconds(self) -> float:
        """Once the compute is done (it joins the thread)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._seconds


class DeviceCompute:
    """The compute on the current CUDA stream between two timing events; read once the stream is idle."""

    def __init__(self, compute: Callable[[], None], backend: Backend) -> None:
        import torch

        self._compute = compute
        self._backend = backend
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def launch(self) -> None:
        self._start.record()
        self._compute()
        self._end.record()

    def seconds(self) -> float:
        self._backend.sync_device()  # polled, bounded by --timeout; then both events have fired
        return self._start.elapsed_time(self._end) * 1e-3


ComputeTimer = HostCompute | DeviceCompute


def compute_timer(compute: Callable[[], None], backend: Backend, device: "torch.device") -> ComputeTimer:
    return DeviceCompute(compute, backend) if device.type == "cuda" else HostCompute(compute)


@dataclass
class Race:
    """One rank's iterations of one phase: each op's seconds ([op][iteration]) and the compute's."""

    op_seconds: list[list[float]] = field(default_factory=list)
    compute_seconds: list[float] = field(default_factory=list)


def time_race(backend: Backend, ops: list[BoundOp], compute: ComputeTimer | None, iters: int) -> Race:
    """``iters`` iterations of ``ops`` issued together and ``compute`` beside them (module docstring)."""
    race = Race([[0.0] * iters for _ in ops], [])
    for op in ops:
        op.args.async_op = True
    try:
        for iteration in range(iters):
            for op in ops:
                op.prepare()
            backend.barrier()
            if compute is not None:
                compute.launch()
            issued = []
            for op in ops:
                issued.append(time.perf_counter_ns())
                op()
            ends = backend.completion_times([op.args for op in ops])
            if compute is not None:
                race.compute_seconds.append(compute.seconds())
            for index, (start, end) in enumerate(zip(issued, ends, strict=True)):
                race.op_seconds[index][iteration] = (end - start) * 1e-9
    finally:
        for op in ops:
            op.args.async_op = False
            op.args.wait_list.clear()
    return race
