"""Gathering and spreading collectives: all_gather (list and flat), gather, scatter and broadcast.

Each descriptor sits beside its buffers and the values --check expects of it.
"""

from commbench.measure.collectives.base import (
    IN_PLACE,
    PLACEMENTS,
    Buffers,
    Collective,
    Expected,
    Layout,
    all_chunks,
    all_chunks_on_cpu,
    one_chunk_per_rank,
    register,
    ring_factor,
    unit_factor,
    views,
)
from commbench.measure.collectives.reductions import in_place_buffer


def gathered(layout: Layout, buffers: Buffers) -> list[Expected]:
    """Chunk r of the output is rank r's input."""
    if buffers.output is None:
        return []
    c = layout.count_per_rank
    parts = buffers.output if isinstance(buffers.output, list) else views(buffers.output,
                                                                          [c] * layout.world_size)
    return [Expected(part, rank, 0, rank * c) for rank, part in enumerate(parts)]


# --- all_gather ---------------------------------------------------------------------------------------

def all_gather_buffers(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.count_per_rank), layout.chunks())


ALL_GATHER = register(Collective(
    name="all_gather", summary="all-gather into a list of per-rank chunks",
    issue=lambda backend, args: backend.all_gather(args),
    build=all_gather_buffers, expect=gathered, busbw_factor=ring_factor, shards=one_chunk_per_rank,
    temporary=all_chunks))


def all_gather_base_buffers(layout: Layout) -> Buffers:
    gathered_flat = layout.empty(layout.count_per_rank * layout.world_size)
    if layout.placement == IN_PLACE:  # the input is this rank's chunk of the output
        start = layout.rank * layout.count_per_rank
        return Buffers(gathered_flat[start:start + layout.count_per_rank], gathered_flat)
    return Buffers(layout.empty(layout.count_per_rank), gathered_flat)


ALL_GATHER_BASE = register(Collective(
    name="all_gather_base", summary="all-gather into one flat tensor",
    issue=lambda backend, args: backend.all_gather_base(args),
    build=all_gather_base_buffers, expect=gathered, busbw_factor=ring_factor, shards=one_chunk_per_rank,
    placements=PLACEMENTS, temporary=all_chunks_on_cpu))


# --- rooted: broadcast, gather, scatter --------------------------------------------------------------

def from_root(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, layout.root, 0, 0)]


BROADCAST = register(Collective(
    name="broadcast", summary="broadcast from the root",
    issue=lambda backend, args: backend.broadcast(args),
    build=in_place_buffer, expect=from_root, busbw_factor=unit_factor, rooted=True, placements=(IN_PLACE,)))


def gather_buffers(layout: Layout) -> Buffers:
    output = layout.chunks() if layout.rank == layout.root else None
    return Buffers(layout.empty(layout.count_per_rank), output)


GATHER = register(Collective(
    name="gather", summary="gather per-rank chunks onto the root",
    issue=lambda backend, args: backend.gather(args),
    build=gather_buffers, expect=gathered, busbw_factor=ring_factor, shards=one_chunk_per_rank,
    rooted=True, temporary=lambda layout: all_chunks_on_cpu(layout) if layout.rank == layout.root else 0))


def scatter_buffers(layout: Layout) -> Buffers:
    source = layout.chunks() if layout.rank == layout.root else None
    return Buffers(source, layout.empty(layout.count_per_rank))


def scattered(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, layout.root, layout.rank * layout.count_per_rank, 0)]


SCATTER = register(Collective(
    name="scatter", summary="scatter per-rank chunks from the root",
    issue=lambda backend, args: backend.scatter(args),
    build=scatter_buffers, expect=scattered, busbw_factor=ring_factor, shards=one_chunk_per_rank,
    rooted=True))
