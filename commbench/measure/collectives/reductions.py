"""Reducing collectives: all_reduce, reduce_scatter (list and flat) and reduce.

Each descriptor sits beside its buffers and the values --check expects of it.
"""

from commbench.measure.collectives.base import (
    IN_PLACE,
    OUT_OF_PLACE,
    PLACEMENTS,
    Buffers,
    Collective,
    Expected,
    Layout,
    all_chunks,
    all_chunks_on_cpu,
    all_reduce_factor,
    one_chunk_per_rank,
    register,
    ring_factor,
    unit_factor,
)


def in_place_buffer(layout: Layout) -> Buffers:
    buffer = layout.empty(layout.count_per_rank)
    return Buffers(buffer, buffer)


def reduced_whole(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, None, 0, 0)]


# --- all_reduce ---------------------------------------------------------------------------------------

def all_reduce_buffers(layout: Layout) -> Buffers:
    # torch's all_reduce is in place; out of place, the op copies the input into the output first
    if layout.placement == OUT_OF_PLACE:
        return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank))
    return in_place_buffer(layout)


ALL_REDUCE = register(Collective(
    name="all_reduce", summary="all-reduce of one buffer (in place, or copied out of place)",
    issue=lambda backend, args: backend.all_reduce(args),
    build=all_reduce_buffers, expect=reduced_whole, busbw_factor=all_reduce_factor,
    reduces=True, placements=(IN_PLACE, OUT_OF_PLACE)))


# --- reduce_scatter ------------------------------------------------------------------------------------

def reduced_chunk(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, None, layout.rank * layout.count_per_rank, 0)]


def reduce_scatter_buffers(layout: Layout) -> Buffers:
    return Buffers(layout.chunks(), layout.empty(layout.count_per_rank))


def flat_input_copy(layout: Layout) -> int:
    """NCCL flattens the whole input list; gloo copies every chunk but this rank's own."""
    if layout.device.type == "cpu":
        return all_chunks(layout) - layout.count_per_rank * layout.dtype.itemsize
    return all_chunks(layout)


REDUCE_SCATTER = register(Collective(
    name="reduce_scatter", summary="reduce-scatter from a list of per-rank chunks",
    issue=lambda backend, args: backend.reduce_scatter(args),
    build=reduce_scatter_buffers, expect=reduced_chunk, busbw_factor=ring_factor,
    shards=one_chunk_per_rank, reduces=True, temporary=flat_input_copy))


def reduce_scatter_base_buffers(layout: Layout) -> Buffers:
    source = layout.empty(layout.count_per_rank * layout.world_size)
    if layout.placement == IN_PLACE:  # the output is this rank's chunk of the input
        start = layout.rank * layout.count_per_rank
        return Buffers(source, source[start:start + layout.count_per_rank])
    return Buffers(source, layout.empty(layout.count_per_rank))


REDUCE_SCATTER_BASE = register(Collective(
    name="reduce_scatter_base", summary="reduce-scatter of one flat tensor",
    issue=lambda backend, args: backend.reduce_scatter_base(args),
    build=reduce_scatter_base_buffers, expect=reduced_chunk, busbw_factor=ring_factor,
    shards=one_chunk_per_rank, reduces=True, placements=PLACEMENTS, temporary=all_chunks_on_cpu))


# --- reduce -----------------------------------------------------------------------------------------

def reduced_on_root(layout: Layout, buffers: Buffers) -> list[Expected]:
    # other ranks' buffers are the backend's scratch (gloo overwrites them)
    return reduced_whole(layout, buffers) if layout.rank == layout.root else []


REDUCE = register(Collective(
    name="reduce", summary="reduce onto the root",
    issue=lambda backend, args: backend.reduce(args),
    build=in_place_buffer, expect=reduced_on_root, busbw_factor=unit_factor,
    reduces=True, rooted=True, placements=(IN_PLACE,)))
