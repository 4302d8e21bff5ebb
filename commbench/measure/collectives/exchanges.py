"""All-to-all exchanges (list and flat) and the barrier, which exchanges nothing.

Each descriptor sits beside its buffers and the values --check expects of it.
"""

from commbench.measure.collectives.base import (
    Buffers,
    Collective,
    Expected,
    Layout,
    all_chunks_on_cpu,
    nothing_expected,
    one_chunk_per_rank,
    register,
    ring_factor,
    unit_factor,
    views,
)


def exchanged(layout: Layout, buffers: Buffers) -> list[Expected]:
    """Chunk j of the output is what rank j sent this rank: the rank-th chunk of j's input."""
    c = layout.count_per_rank
    parts = buffers.output if isinstance(buffers.output, list) else views(buffers.output,
                                                                          [c] * layout.world_size)
    return [Expected(part, rank, layout.rank * c, rank * c) for rank, part in enumerate(parts)]


def all_to_all_buffers(layout: Layout) -> Buffers:
    return Buffers(layout.chunks(), layout.chunks())


ALL_TO_ALL = register(Collective(
    name="all_to_all", summary="all-to-all between lists of per-rank chunks",
    issue=lambda backend, args: backend.all_to_all(args),
    build=all_to_all_buffers, expect=exchanged, busbw_factor=ring_factor, shards=one_chunk_per_rank,
    temporary=lambda layout: 2 * all_chunks_on_cpu(layout)))  # gloo flattens the input and the output lists


def all_to_all_single_buffers(layout: Layout) -> Buffers:
    total = layout.count_per_rank * layout.world_size
    return Buffers(layout.empty(total), layout.empty(total))


ALL_TO_ALL_SINGLE = register(Collective(
    name="all_to_all_single", summary="all-to-all of one flat tensor",
    issue=lambda backend, args: backend.all_to_all_single(args),
    build=all_to_all_single_buffers, expect=exchanged, busbw_factor=ring_factor, shards=one_chunk_per_rank))


def no_buffers(layout: Layout) -> Buffers:
    return Buffers(None, None)


BARRIER = register(Collective(
    name="barrier", summary="barrier (no data; timed once)",
    issue=lambda backend, args: backend.barrier_op(args),
    build=no_buffers, expect=nothing_expected, busbw_factor=unit_factor, sized=False, placements=("",),
    capturable=False))
