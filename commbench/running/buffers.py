"""A size's buffers (``point`` is a runner.SizePoint): allocated outside every timed region, zeroed, and
an allocation that fails becomes a one-line reason (what the size needs, what budget it had) instead of
an exception."""

from typing import Any

from commbench.core.sizes import format_size
from commbench.measure.collectives import Buffers, Layout
from commbench.measure.planning import SizeLimits, memory_need


def allocate(point: Any, layout: Layout) -> Buffers:
    try:
        buffers = point.table.collective.build(layout)
    except (RuntimeError, MemoryError) as exc:  # torch's out-of-memory errors are RuntimeErrors
        raise AllocationFailed(out_of_memory(point, exc)) from exc
    for tensor in buffers.tensors():
        tensor.zero_()  # zeros: repeated in-place reductions stay finite in every dtype
    return buffers


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
