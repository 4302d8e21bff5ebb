"""A size's buffers (``point`` is a runner.SizePoint): allocated outside every timed region, zeroed, and
an allocation that fails becomes a one-line reason (what the size needs, what budget it had) instead of
an exception. With --buffers N a size has N sets, with --flush-cache a cache-sized buffer beside them;
with --memory, what the size took on each rank is gathered into its rows (measure/memory.py).
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from commbench.backends.base import Backend
from commbench.core.sizes import format_size
from commbench.measure.cache import CacheFlush
from commbench.measure.collectives import Buffers, Layout
from commbench.measure.memory import SizeMemory
from commbench.measure.planning import SizeLimits, memory_need
from commbench.results.model import Row


def allocate(point: Any, layout: Layout) -> Buffers:
    try:
        buffers = point.table.collective.build(layout)
    except (RuntimeError, MemoryError) as exc:  # torch's out-of-memory errors are RuntimeErrors
        raise AllocationFailed(out_of_memory(point, exc)) from exc
    for tensor in buffers.tensors():
        tensor.zero_()  # zeros: repeated in-place reductions stay finite in every dtype
    return buffers


@dataclass(frozen=True)
class SizeBuffers:
    """A size's sets of buffers on this rank (the first is the one --check fills and reads) and
    --flush-cache's buffer, None without it."""

    sets: list[Buffers]
    flush: CacheFlush | None = None

    def nbytes(self) -> int:
        """Every byte commbench allocated for the size on this rank: each allocation once (a view's
        whole block: --misalign's offset included, an in-place chunk's buffer counted once)."""
        blocks = {tensor.untyped_storage().data_ptr(): tensor.untyped_storage().nbytes()
                  for buffers in self.sets for tensor in buffers.tensors()}
        return sum(blocks.values()) + self.flush_bytes()

    def flush_bytes(self) -> int:
        return 0 if self.flush is None else self.flush.nbytes


def allocate_sets(point: Any, layout: Layout, sets: int, flush_cache: bool) -> SizeBuffers:
    """``sets`` sets of the size's buffers, and the flush buffer when asked for."""
    found = [allocate(point, layout) for _ in range(sets)]
    return SizeBuffers(found, CacheFlush.for_device(layout.device) if flush_cache else None)


def account_memory(backend: Backend, memory: SizeMemory, user_bytes: int, rows: list[Row]) -> None:
    """--memory: this rank's account of the size (``user_bytes`` its own allocations), gathered from
    every rank; each row gets the largest (None where no rank could measure it)."""
    every = backend.all_gather_array(memory.finish(user_bytes).floats())
    largest = [None if np.isnan(column).all() else int(np.nanmax(column)) for column in every.T]
    for row in rows:
        row.mem_user_bytes, row.mem_internal_bytes, row.mem_library_bytes = largest


class AllocationFailed(Exception):
    """A size's buffers could not be allocated; the message names the size, the need and the budget."""


def out_of_memory(point: Any, exc: BaseException) -> str:
    """'could not allocate 1 GiB: needs 1.5 GiB per rank (...); 1.2 GiB per rank, 90% of ...;
    --max-memory not set'."""
    config, table = point.config, point.table
    limits = SizeLimits(point.membership.plan.size, table.dtype, config.root, None, None,
                        point.backend.device.type)
    need = memory_need(table.collective, point.size, limits)
    if config.max_memory is not None:
        within = f"within --max-memory {format_size(config.max_memory)}"
    elif point.memory is not None:
        within = f"{point.memory.describe()}; --max-memory not set"
    else:
        within = "available memory unknown; --max-memory not set"
    return (f"out of memory allocating size {format_size(point.size.used)}: it needs {need.describe()}; "
            f"{within} ({type(exc).__name__})")
