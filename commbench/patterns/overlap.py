"""Compute/communication overlap: the compute kernel, its calibration and the overlap percentage.

The overlap percentage is OSU micro-benchmarks' Overlap(%) for non-blocking collectives
(``print_stats_nbc`` in osu_util: ``max(0, 100 - ((overall - compute) / pure_comm) * 100)``):

    overlap % = max(0, 100 * (1 - (t_both - t_compute) / t_comm))

t_comm is the communication alone, t_compute the compute alone and t_both both together: 100 when the
communication hides completely under the compute (t_both = t_compute), 0 when nothing overlaps
(t_both = t_compute + t_comm). It can reach 100 only when t_compute >= t_comm, which is why OSU sizes its
compute to the communication time; ``--compute-size auto`` does the same. OSU takes t_compute inside the
overlapped run; commbench times compute alone (a device kernel's time cannot be read from the host while
it overlaps), so noise can make t_both < t_compute: the percentage is capped at 100.
"""

import time
from collections.abc import Callable

import torch

from commbench.measure.compute import MatmulKernel

MIN_COMPUTE_SIZE, MAX_COMPUTE_SIZE, SIZE_STEP = 16, 16384, 16


def overlap_percent(comm_us: float, compute_us: float, both_us: float) -> float | None:
    """OSU's Overlap(%), capped at 100; None when there was no communication to hide."""
    if comm_us <= 0:
        return None
    return min(100.0, max(0.0, 100.0 * (1.0 - (both_us - compute_us) / comm_us)))


def _round_size(size: float) -> int:
    rounded = int(round(size / SIZE_STEP)) * SIZE_STEP
    return min(MAX_COMPUTE_SIZE, max(MIN_COMPUTE_SIZE, rounded))


def calibrate_size(seconds_at: Callable[[int], float], target_seconds: float, start: int = 128,
                   rounds: int = 4) -> int:
    """The matmul size whose time is closest to ``target_seconds``, assuming time grows as size**3
    (refined over a few rounds, since small matmuls are dominated by fixed costs)."""
    size = _round_size(start)
    if target_seconds <= 0:
        return size
    for _ in range(rounds):
        seconds = seconds_at(size)
        if seconds <= 0:
            break
        better = _round_size(size * (target_seconds / seconds) ** (1 / 3))
        if better == size:
            break
        size = better
    return size


def time_kernel(size: int, dtype: torch.dtype, device: torch.device, sync: Callable[[], None],
                repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs of a size x size matmul, in seconds (after one untimed run)."""
    kernel = MatmulKernel(size, dtype, device)
    kernel()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        kernel()
        sync()
        best = min(best, time.perf_counter() - start)
    return best
