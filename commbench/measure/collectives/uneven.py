"""Uneven (v) collectives: all_to_allv, reduce_scatter_v and all_gather_v, whose per-rank element counts
come from --splits (splits.py); a size is the largest per-rank byte count.

Each descriptor sits beside its buffers and the values --check expects of it.
"""

from commbench.core.splits import plan_all_to_allv, plan_gathered
from commbench.measure.collectives.base import (
    Buffers,
    Collective,
    Expected,
    Layout,
    offsets,
    one_chunk_per_rank,
    register,
    ring_factor,
    views,
)


def all_to_allv_buffers(layout: Layout) -> Buffers:
    sends = list(layout.pair_counts[layout.rank])
    receives = [row[layout.rank] for row in layout.pair_counts]
    return Buffers(layout.empty(sum(sends)), layout.empty(sum(receives)), input_splits=sends,
                   output_splits=receives)


def exchanged_uneven(layout: Layout, buffers: Buffers) -> list[Expected]:
    receives = [row[layout.rank] for row in layout.pair_counts]
    starts = offsets(receives)
    return [Expected(part, rank, offsets(layout.pair_counts[rank])[layout.rank], starts[rank])
            for rank, part in enumerate(views(buffers.output, receives))]


ALL_TO_ALLV = register(Collective(
    name="all_to_allv", summary="all-to-all with uneven splits from --splits",
    issue=lambda backend, args: backend.all_to_all_single(args),
    build=all_to_allv_buffers, expect=exchanged_uneven, busbw_factor=ring_factor,
    shards=one_chunk_per_rank, uneven=plan_all_to_allv))


def reduce_scatter_v_buffers(layout: Layout) -> Buffers:
    return Buffers([layout.empty(count) for count in layout.chunk_counts],
                   layout.empty(layout.chunk_counts[layout.rank]))


def uneven_input_copy(layout: Layout) -> int:
    """gloo copies every input chunk but this rank's own; NCCL reduces each chunk in place."""
    if layout.device.type != "cpu":
        return 0
    return (sum(layout.chunk_counts) - layout.chunk_counts[layout.rank]) * layout.dtype.itemsize


def reduced_uneven_chunk(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, None, offsets(layout.chunk_counts)[layout.rank], 0)]


REDUCE_SCATTER_V = register(Collective(
    name="reduce_scatter_v", summary="reduce-scatter into uneven per-rank chunks",
    issue=lambda backend, args: backend.reduce_scatter(args),
    build=reduce_scatter_v_buffers, expect=reduced_uneven_chunk, busbw_factor=ring_factor,
    shards=one_chunk_per_rank, reduces=True, uneven=plan_gathered(by_row=False), temporary=uneven_input_copy))


def all_gather_v_buffers(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.chunk_counts[layout.rank]),
                   [layout.empty(count) for count in layout.chunk_counts])


def gathered_uneven(layout: Layout, buffers: Buffers) -> list[Expected]:
    starts = offsets(layout.chunk_counts)
    return [Expected(part, rank, 0, starts[rank]) for rank, part in enumerate(buffers.output)]


ALL_GATHER_V = register(Collective(
    name="all_gather_v", summary="all-gather of uneven per-rank chunks",
    issue=lambda backend, args: backend.all_gather_v(args),
    build=all_gather_v_buffers, expect=gathered_uneven, busbw_factor=ring_factor,
    shards=one_chunk_per_rank, uneven=plan_gathered(by_row=True)))
