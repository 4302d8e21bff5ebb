"""Timing on CUDA devices: event timers, the launch hidden behind a spin, and CUDA graphs.

Invariants:
- Every event exists (has been recorded once and completed) before the timed region opens: torch
  creates a CUDA event lazily, at its first ``record()``, which would otherwise happen inside the region.
- Device time with the launch hidden (sync mode's default on CUDA): before the start event the stream is
  kept busy by a spin kernel (``torch.cuda._sleep``) longer than the host takes to issue the op, so the
  start event fires when the collective can start, not when the host began issuing it; the host's launch
  cost (10-30 us) is left out. The spin adapts to the issue time the host just measured.
- The host-observed latency of sync mode is timed on the host, on its own op after each device-timed op
  (no spin in front, so it holds the launch, the device's time and seeing the completion).
- Nothing here blocks the host uninterruptibly: completion is the backend's polled ``sync_device``.
- A CUDA graph captures only host-free collectives (``Collective.capturable``): the barrier blocks the
  host and is refused before capture.
"""

import inspect
import time
from collections.abc import Callable
from typing import Any

import torch

from commbench.backends.base import Backend, CollectiveArgs

MIN_SPIN_US = 20.0  # a spin shorter than this hides nothing worth the kernel
MAX_SPIN_US = 2000.0  # an op that takes longer than this to issue is not a latency measurement
INITIAL_SPIN_US = 100.0  # before the first issue time is known
CALIBRATION_CYCLES = 2_000_000

_cycles_per_us: dict[int, float] = {}


def spin_target_us(issue_seconds: float) -> float:
    """How long to spin before the next op, from how long the host took to issue the last one: twice
    that, within [MIN_SPIN_US, MAX_SPIN_US]."""
    return min(MAX_SPIN_US, max(MIN_SPIN_US, 2e6 * issue_seconds))


def spin_cycles(spin_us: float, cycles_per_us: float) -> int:
    """GPU clock cycles for a spin of ``spin_us`` microseconds."""
    return max(1, int(spin_us * cycles_per_us))


def cycles_per_us(device: torch.device) -> float:
    """The device's spin rate, measured once per device with events around ``torch.cuda._sleep``."""
    index = device.index or 0
    if index not in _cycles_per_us:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(CALIBRATION_CYCLES // 10)  # the first launch loads the kernel
        start.record()
        torch.cuda._sleep(CALIBRATION_CYCLES)
        end.record()
        end.synchronize()  # set-up, before any collective: nothing to wait on but this spin
        _cycles_per_us[index] = CALIBRATION_CYCLES / (start.elapsed_time(end) * 1e3)
    return _cycles_per_us[index]


class LaunchHider:
    """Spins the current stream before an op's start event, for as long as issuing the op takes."""

    def __init__(self, device: torch.device) -> None:
        self._rate = cycles_per_us(device)
        self.spin_us = INITIAL_SPIN_US

    def spin(self) -> None:
        torch.cuda._sleep(spin_cycles(self.spin_us, self._rate))

    def observe(self, issue_seconds: float) -> None:
        self.spin_us = spin_target_us(issue_seconds)


class CudaEventTimer:
    """CUDA events on the current stream: device time from the start event to the last completion.

    Waiting on a handle makes the current stream wait for the collective's stream, so the stop event,
    recorded after the waits and before the host waits for the device, marks the collective's end on
    the device. With ``hide_launch`` a spin precedes each start event, and ``observe_host`` times one
    more op on the host alone; without it the host's own start and end stamps give its latency.
    """

    def __init__(self, backend: Backend, slots: int, hide_launch: bool = False) -> None:
        self._backend = backend
        self._starts = [torch.cuda.Event(enable_timing=True) for _ in range(slots)]
        self._ends = [torch.cuda.Event(enable_timing=True) for _ in range(slots)]
        for event in self._starts + self._ends:  # created now, not at their first record in the region
            event.record()
        backend.sync_device()
        self._host_starts = [0] * slots  # when the host issued each op: the rank's arrival
        self._host_ends = [0] * slots
        self._host_observed: list[float] = [0.0] * slots
        self._hider = LaunchHider(backend.device) if hide_launch else None

    def start(self, slot: int) -> None:
        if self._hider is not None:
            self._hider.spin()
        self._host_starts[slot] = time.perf_counter_ns()
        self._starts[slot].record()

    def arrivals(self, origin_ns: int) -> list[float]:
        return [(start - origin_ns) * 1e-9 for start in self._host_starts]

    def finish(self, slot: int, args: CollectiveArgs) -> None:
        if self._hider is not None:
            self._hider.observe((time.perf_counter_ns() - self._host_starts[slot]) * 1e-9)
        self._backend.wait(args)
        self._ends[slot].record()
        self._backend.sync_device()
        self._host_ends[slot] = time.perf_counter_ns()

    def observe_host(self, slot: int, op: Callable[[], None], args: CollectiveArgs) -> None:
        """One more op, timed on the host from its issue to the completion the host sees."""
        if self._hider is None:
            return
        started = time.perf_counter_ns()
        op()
        self._backend.wait(args)
        self._backend.sync_device()
        self._host_observed[slot] = (time.perf_counter_ns() - started) * 1e-9

    def seconds(self) -> list[float]:
        self._backend.sync_device()
        return [start.elapsed_time(end) * 1e-3 for start, end in zip(self._starts, self._ends, strict=True)]

    def host_seconds(self) -> list[float]:
        if self._hider is not None:
            return list(self._host_observed)
        return [(end - start) * 1e-9 for start, end in zip(self._host_starts, self._host_ends, strict=True)]


def capture(graph: Any, ops: Callable[[], None]) -> None:
    """Run ``ops`` under capture into ``graph``. NCCL's watchdog thread queries its events during the
    capture: the thread-local capture mode lets it (where torch.cuda.graph takes the argument)."""
    options: dict[str, Any] = {}
    if "capture_error_mode" in inspect.signature(torch.cuda.graph).parameters:
        options["capture_error_mode"] = "thread_local"
    with torch.cuda.graph(graph, **options):
        ops()


def captured(backend: Backend, issue: Callable[[], None], ops: int) -> Any:
    """A CUDA graph of ``ops`` calls of ``issue`` (one eager call on a side stream first, as capture
    requires of NCCL's lazily created resources)."""
    side = torch.cuda.Stream(backend.device)
    side.wait_stream(torch.cuda.current_stream(backend.device))
    with torch.cuda.stream(side):
        issue()
    torch.cuda.current_stream(backend.device).wait_stream(side)
    backend.sync_device()
    graph = torch.cuda.CUDAGraph()

    def repeated() -> None:
        for _ in range(ops):
            issue()

    capture(graph, repeated)
    backend.sync_device()
    return graph
