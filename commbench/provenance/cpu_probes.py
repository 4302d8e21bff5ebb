"""What a CPU rank of this host can count on: the CPUs this process may run on and the load already on
them (``load``), and how fast one thread copies memory (``memory_copy``), the figure gloo's copies
through loopback are bounded by (docs/explain.md).

Invariants: as every probe (probing.py); the copy probe is short (two 64 MiB buffers, a few copies:
tens of milliseconds) and skipped, named as missing, when less than a second of the budget is left.
"""

import os
import time
from typing import Any

from commbench.provenance.probing import ProbeBudget, ProbeMissing, Roots, read_optional

COPY_BYTES = 64 * 1024 * 1024  # above most last-level caches, so the copy runs from memory
COPY_REPEATS = 5  # timed copies; the fastest is kept (the others lost time to whatever else ran)
COPY_BUDGET_S = 1.0  # the probe budget that must be left to run it


def probe_load(roots: Roots) -> dict[str, Any]:
    """The CPUs this process may run on (its affinity, as a scheduler or container sets it) and the
    load average when probed: runnable tasks, ours included, averaged over 1 and 5 minutes."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    loadavg = (read_optional(roots.proc / "loadavg") or "").split()
    try:
        load_1min, load_5min = float(loadavg[0]), float(loadavg[1])
    except (IndexError, ValueError):
        load_1min = load_5min = None
    return {"usable_cpus": usable, "load_1min": load_1min, "load_5min": load_5min}


def probe_memory_copy(budget: ProbeBudget) -> dict[str, Any]:
    """One thread copying a 64 MiB buffer into another: the fastest of a few copies, in GB/s of bytes
    copied (1e9 bytes per second; each byte is read once and written once)."""
    if budget.left() < COPY_BUDGET_S:
        raise ProbeMissing(f"not probed: less than {COPY_BUDGET_S:g} s of the probe budget was left")
    source = bytearray(b"\x5a") * COPY_BYTES  # written, so its pages are real memory, not the zero page
    target = bytearray(COPY_BYTES)
    target[:] = source  # the first copy faults the target's pages in: not timed
    fastest = float("inf")
    for _ in range(COPY_REPEATS):
        started = time.perf_counter()
        target[:] = source  # a slice assignment of equal length is one memmove
        fastest = min(fastest, time.perf_counter() - started)
    return {"gbps": round(COPY_BYTES / fastest / 1e9, 3), "bytes": COPY_BYTES, "repeats": COPY_REPEATS,
            "seconds": round(fastest, 6), "threads": 1}
