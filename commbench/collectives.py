"""The registry: one small descriptor per collective.

A descriptor says how a message size maps onto buffers for a world size and placement, the
bus-bandwidth factor, which backend method runs it, and for --check which values each output must hold.
The runner, timers and writers read descriptors and never branch on a collective's name.

Size convention (nccl-tests'): ``size`` is the total bytes of the larger buffer, the reduce-scatter input
or the all-gather output. Collectives whose larger buffer holds one chunk per rank have ``shards(n) == n``;
``count_per_rank`` is the elements in one such chunk (for all_reduce, broadcast, reduce and the
point-to-point patterns the whole buffer). v-collectives take their element counts from --splits
(splits.py) and their size is the largest per-rank byte count.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from commbench.check import Expected, Pattern, fill_inputs
from commbench.errors import UsageError, did_you_mean
from commbench.splits import SizePlan, SplitSpec, plan_all_to_allv, plan_gathered

OUT_OF_PLACE = "out-of-place"
IN_PLACE = "in-place"
PLACEMENTS = (OUT_OF_PLACE, IN_PLACE)


@dataclass(frozen=True)
class Layout:
    """What a descriptor needs to build one rank's buffers."""

    count_per_rank: int
    world_size: int
    rank: int
    root: int
    dtype: torch.dtype
    device: torch.device
    placement: str = ""  # '' is the descriptor's default placement
    chunk_counts: tuple[int, ...] = ()  # reduce_scatter_v, all_gather_v: each rank's chunk
    pair_counts: tuple[tuple[int, ...], ...] = ()  # all_to_allv: [i][j] elements rank i sends rank j
    window: int = 1  # point-to-point messages in flight per op

    def empty(self, count: int) -> torch.Tensor:
        return torch.empty(count, dtype=self.dtype, device=self.device)

    def chunks(self) -> list[torch.Tensor]:
        return [self.empty(self.count_per_rank) for _ in range(self.world_size)]


@dataclass
class Buffers:
    """One rank's buffers for one size, and the call's other per-rank arguments.

    ``peer`` is the partner of send_recv and ping_pong (``leads``: this rank sends first);
    ``send_peer``/``recv_peer`` the ranks the p2p patterns send to and receive from, ``window`` times
    per op; the splits are all_to_allv's element counts to and from each rank.
    """

    input: Any
    output: Any
    peer: int | None = None
    send_peer: int | None = None
    recv_peer: int | None = None
    leads: bool = False
    window: int = 1
    input_splits: list[int] | None = None
    output_splits: list[int] | None = None

    @staticmethod
    def _parts(part: Any) -> list[torch.Tensor]:
        return [t for t in (part if isinstance(part, list) else [part]) if t is not None]

    def input_parts(self) -> list[torch.Tensor]:
        return self._parts(self.input)

    def output_parts(self) -> list[torch.Tensor]:
        return self._parts(self.output)

    def tensors(self) -> list[torch.Tensor]:
        """Every distinct tensor, for filling and byte counting."""
        found: list[torch.Tensor] = []
        for tensor in self.input_parts() + self.output_parts():
            if not any(tensor is seen for seen in found):
                found.append(tensor)
        return found

    def call_options(self) -> dict[str, Any]:
        """The CollectiveArgs fields these buffers decide."""
        return {"input": self.input, "output": self.output, "peer": self.peer, "send_peer": self.send_peer,
                "recv_peer": self.recv_peer, "leads": self.leads, "window": self.window,
                "input_splits": self.input_splits, "output_splits": self.output_splits}


def _all_ranks_share(n: int) -> int:
    return n


def _one(n: int) -> int:
    return 1


def _ring_factor(n: int) -> float:
    return (n - 1) / n


def _all_reduce_factor(n: int) -> float:
    return 2 * (n - 1) / n


def _unit_factor(n: int) -> float:
    return 1.0


def _unscaled(layout: Layout) -> float:
    return 1.0


def _fill_flat(layout: Layout, buffers: Buffers, pattern: Pattern) -> None:
    fill_inputs(buffers.input_parts(), buffers.output_parts(), layout.rank, pattern)


@dataclass(frozen=True)
class Collective:
    name: str
    method: str  # the Backend method that runs it
    summary: str
    busbw_factor: Callable[[int], float]
    shards: Callable[[int], int]  # per-rank chunks in the larger buffer
    build: Callable[[Layout], Buffers]
    expect: Callable[[Layout, Buffers], list[Expected]]  # --check: what each output view must hold
    fill: Callable[[Layout, Buffers, Pattern], None] = _fill_flat  # --check: this rank's inputs
    sized: bool = True  # barrier moves no data and runs once, at size 0
    reduces: bool = False  # takes a reduce op
    rooted: bool = False  # has a root rank
    placements: tuple[str, ...] = (OUT_OF_PLACE,)  # the layouts it has; the first is the default
    uneven: Callable[[SplitSpec, int, int, int], SizePlan] | None = None  # v-collectives: counts
    time_scale: Callable[[Layout], float] = _unscaled  # reported time = measured time x this
    modes: tuple[str, ...] = ("sync", "async")
    uses_window: bool = False  # the point-to-point window (--p2p-window) applies

    def plan(self, size_bytes: int, world_size: int, element_size: int) -> tuple[int, int]:
        """(count_per_rank, size actually used) for a requested size: rounded down to a whole number
        of elements per rank chunk."""
        if not self.sized:
            return 0, 0
        unit = element_size * self.shards(world_size)
        count = size_bytes // unit
        return count, count * unit

    def plan_size(self, size_bytes: int, world_size: int, element_size: int, splits: SplitSpec
                  ) -> SizePlan:
        """The element counts a requested size means, uneven ones included."""
        if self.uneven is not None:
            return self.uneven(splits, size_bytes, world_size, element_size)
        count, used = self.plan(size_bytes, world_size, element_size)
        return SizePlan(count, used)


# --- buffers -------------------------------------------------------------------------------------

def _in_place(layout: Layout) -> Buffers:
    buffer = layout.empty(layout.count_per_rank)
    return Buffers(buffer, buffer)


def _all_reduce(layout: Layout) -> Buffers:
    # torch's all_reduce is in place; out of place, the op copies the input into the output first
    if layout.placement == OUT_OF_PLACE:
        return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank))
    return _in_place(layout)


def _reduce_scatter(layout: Layout) -> Buffers:
    return Buffers(layout.chunks(), layout.empty(layout.count_per_rank))


def _reduce_scatter_base(layout: Layout) -> Buffers:
    source = layout.empty(layout.count_per_rank * layout.world_size)
    if layout.placement == IN_PLACE:  # the output is this rank's chunk of the input
        start = layout.rank * layout.count_per_rank
        return Buffers(source, source[start:start + layout.count_per_rank])
    return Buffers(source, layout.empty(layout.count_per_rank))


def _all_gather(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.count_per_rank), layout.chunks())


def _all_gather_base(layout: Layout) -> Buffers:
    gathered = layout.empty(layout.count_per_rank * layout.world_size)
    if layout.placement == IN_PLACE:  # the input is this rank's chunk of the output
        start = layout.rank * layout.count_per_rank
        return Buffers(gathered[start:start + layout.count_per_rank], gathered)
    return Buffers(layout.empty(layout.count_per_rank), gathered)


def _all_to_all(layout: Layout) -> Buffers:
    return Buffers(layout.chunks(), layout.chunks())


def _all_to_all_single(layout: Layout) -> Buffers:
    total = layout.count_per_rank * layout.world_size
    return Buffers(layout.empty(total), layout.empty(total))


def _all_to_allv(layout: Layout) -> Buffers:
    sends = list(layout.pair_counts[layout.rank])
    receives = [row[layout.rank] for row in layout.pair_counts]
    return Buffers(layout.empty(sum(sends)), layout.empty(sum(receives)), input_splits=sends,
                   output_splits=receives)


def _reduce_scatter_v(layout: Layout) -> Buffers:
    return Buffers([layout.empty(count) for count in layout.chunk_counts],
                   layout.empty(layout.chunk_counts[layout.rank]))


def _all_gather_v(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.chunk_counts[layout.rank]),
                   [layout.empty(count) for count in layout.chunk_counts])


def _gather(layout: Layout) -> Buffers:
    output = layout.chunks() if layout.rank == layout.root else None
    return Buffers(layout.empty(layout.count_per_rank), output)


def _scatter(layout: Layout) -> Buffers:
    source = layout.chunks() if layout.rank == layout.root else None
    return Buffers(source, layout.empty(layout.count_per_rank))


def _nothing(layout: Layout) -> Buffers:
    return Buffers(None, None)


def _partner(layout: Layout) -> int | None:
    partner = layout.rank ^ 1  # pairs (0,1), (2,3), ...; an odd rank out sits the exchange out
    return partner if partner < layout.world_size else None


def _pairwise(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank),
                   _partner(layout))


def _one_way(layout: Layout, window: int) -> Buffers:
    partner = _partner(layout)
    if partner is None:
        return Buffers(None, None)
    if layout.rank % 2 == 0:  # the even rank of a pair sends
        return Buffers(layout.empty(layout.count_per_rank), None, send_peer=partner, window=window)
    return Buffers(None, layout.empty(layout.count_per_rank), recv_peer=partner, window=window)


def _ping(layout: Layout) -> Buffers:
    return _one_way(layout, 1)


def _unidirectional(layout: Layout) -> Buffers:
    return _one_way(layout, layout.window)


def _bidirectional(layout: Layout) -> Buffers:
    partner = _partner(layout)
    if partner is None:
        return Buffers(None, None)
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank),
                   send_peer=partner, recv_peer=partner, window=layout.window)


def _ping_pong(layout: Layout) -> Buffers:
    partner = _partner(layout)
    if partner is None:
        return Buffers(None, None)
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank),
                   peer=partner, leads=layout.rank % 2 == 0)


def _ring(layout: Layout) -> Buffers:
    n = layout.world_size
    if n == 1:
        return Buffers(None, None)
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank),
                   send_peer=(layout.rank + 1) % n, recv_peer=(layout.rank - 1) % n)


# --- expected values for --check -----------------------------------------------------------------

def _offsets(counts: list[int] | tuple[int, ...]) -> list[int]:
    found, position = [], 0
    for count in counts:
        found.append(position)
        position += count
    return found


def _views(flat: torch.Tensor, counts: list[int] | tuple[int, ...]) -> list[torch.Tensor]:
    return [flat[start:start + count] for start, count in zip(_offsets(counts), counts, strict=True)]


def _reduced_whole(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, None, 0, 0)]


def _reduced_on_root(layout: Layout, buffers: Buffers) -> list[Expected]:
    # other ranks' buffers are the backend's scratch (gloo overwrites them)
    return _reduced_whole(layout, buffers) if layout.rank == layout.root else []


def _reduced_chunk(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, None, layout.rank * layout.count_per_rank, 0)]


def _reduced_uneven_chunk(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, None, _offsets(layout.chunk_counts)[layout.rank], 0)]


def _gathered(layout: Layout, buffers: Buffers) -> list[Expected]:
    if buffers.output is None:
        return []
    c = layout.count_per_rank
    parts = buffers.output if isinstance(buffers.output, list) else _views(buffers.output,
                                                                           [c] * layout.world_size)
    return [Expected(part, rank, 0, rank * c) for rank, part in enumerate(parts)]


def _gathered_uneven(layout: Layout, buffers: Buffers) -> list[Expected]:
    offsets = _offsets(layout.chunk_counts)
    return [Expected(part, rank, 0, offsets[rank]) for rank, part in enumerate(buffers.output)]


def _exchanged(layout: Layout, buffers: Buffers) -> list[Expected]:
    # what rank j sent this rank: the rank-th chunk of j's input
    c = layout.count_per_rank
    parts = buffers.output if isinstance(buffers.output, list) else _views(buffers.output,
                                                                           [c] * layout.world_size)
    return [Expected(part, rank, layout.rank * c, rank * c) for rank, part in enumerate(parts)]


def _exchanged_uneven(layout: Layout, buffers: Buffers) -> list[Expected]:
    receives = [row[layout.rank] for row in layout.pair_counts]
    offsets = _offsets(receives)
    return [Expected(part, rank, _offsets(layout.pair_counts[rank])[layout.rank], offsets[rank])
            for rank, part in enumerate(_views(buffers.output, receives))]


def _from_root(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, layout.root, 0, 0)]


def _scattered(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, layout.root, layout.rank * layout.count_per_rank, 0)]


def _nothing_expected(layout: Layout, buffers: Buffers) -> list[Expected]:
    return []


def _from_partner(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [] if buffers.peer is None else [Expected(buffers.output, buffers.peer, 0, 0)]


def _received(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [] if buffers.recv_peer is None else [Expected(buffers.output, buffers.recv_peer, 0, 0)]


def _echoed(layout: Layout, buffers: Buffers) -> list[Expected]:
    # both ranks of a pair end with the leading rank's message: it went there and came back
    if buffers.peer is None:
        return []
    leader = layout.rank if buffers.leads else buffers.peer
    return [Expected(buffers.output, leader, 0, 0)]


def _half(layout: Layout) -> float:
    return 0.5  # a round trip is two one-way trips


def _per_message(layout: Layout) -> float:
    return 1.0 / layout.window


REGISTRY: dict[str, Collective] = {c.name: c for c in [
    Collective("all_reduce", "all_reduce", "all-reduce of one buffer (in place, or copied out of place)",
               _all_reduce_factor, _one, _all_reduce, _reduced_whole, reduces=True,
               placements=(IN_PLACE, OUT_OF_PLACE)),
    Collective("reduce_scatter", "reduce_scatter", "reduce-scatter from a list of per-rank chunks",
               _ring_factor, _all_ranks_share, _reduce_scatter, _reduced_chunk, reduces=True),
    Collective("reduce_scatter_base", "reduce_scatter_base", "reduce-scatter of one flat tensor",
               _ring_factor, _all_ranks_share, _reduce_scatter_base, _reduced_chunk, reduces=True,
               placements=PLACEMENTS),
    Collective("all_gather", "all_gather", "all-gather into a list of per-rank chunks",
               _ring_factor, _all_ranks_share, _all_gather, _gathered),
    Collective("all_gather_base", "all_gather_base", "all-gather into one flat tensor",
               _ring_factor, _all_ranks_share, _all_gather_base, _gathered, placements=PLACEMENTS),
    Collective("all_to_all", "all_to_all", "all-to-all between lists of per-rank chunks",
               _ring_factor, _all_ranks_share, _all_to_all, _exchanged),
    Collective("all_to_all_single", "all_to_all_single", "all-to-all of one flat tensor",
               _ring_factor, _all_ranks_share, _all_to_all_single, _exchanged),
    Collective("broadcast", "broadcast", "broadcast from the root",
               _unit_factor, _one, _in_place, _from_root, rooted=True, placements=(IN_PLACE,)),
    Collective("reduce", "reduce", "reduce onto the root",
               _unit_factor, _one, _in_place, _reduced_on_root, reduces=True, rooted=True,
               placements=(IN_PLACE,)),
    Collective("gather", "gather", "gather per-rank chunks onto the root",
               _ring_factor, _all_ranks_share, _gather, _gathered, rooted=True),
    Collective("scatter", "scatter", "scatter per-rank chunks from the root",
               _ring_factor, _all_ranks_share, _scatter, _scattered, rooted=True),
    Collective("barrier", "barrier_op", "barrier (no data; timed once)",
               _unit_factor, _one, _nothing, _nothing_expected, sized=False, placements=("",)),
    Collective("send_recv", "send_recv", "pairwise exchange: ranks 2k and 2k+1 send to each other",
               _unit_factor, _one, _pairwise, _from_partner),
    Collective("all_to_allv", "all_to_all_single", "all-to-all with uneven splits from --splits",
               _ring_factor, _all_ranks_share, _all_to_allv, _exchanged_uneven, uneven=plan_all_to_allv),
    Collective("reduce_scatter_v", "reduce_scatter", "reduce-scatter into uneven per-rank chunks",
               _ring_factor, _all_ranks_share, _reduce_scatter_v, _reduced_uneven_chunk, reduces=True,
               uneven=plan_gathered(by_row=False)),
    Collective("all_gather_v", "all_gather_v", "all-gather of uneven per-rank chunks",
               _ring_factor, _all_ranks_share, _all_gather_v, _gathered_uneven,
               uneven=plan_gathered(by_row=True)),
    Collective("ping", "p2p", "one-way: rank 2k sends one message to 2k+1 per op",
               _unit_factor, _one, _ping, _received),
    Collective("ping_pong", "ping_pong", "round trip 2k -> 2k+1 -> 2k; time is half the round trip",
               _unit_factor, _one, _ping_pong, _echoed, time_scale=_half, modes=("sync",)),
    Collective("p2p_uni", "p2p", "unidirectional bandwidth: 2k sends a window of messages to 2k+1",
               _unit_factor, _one, _unidirectional, _received, time_scale=_per_message, uses_window=True),
    Collective("p2p_bidir", "p2p", "bidirectional bandwidth: 2k and 2k+1 send each other a window",
               _unit_factor, _one, _bidirectional, _received, time_scale=_per_message, uses_window=True),
    Collective("ring", "p2p", "ring exchange: every rank sends to rank+1 and receives from rank-1",
               _unit_factor, _one, _ring, _received),
]}


def placements_for(collective: Collective, requested: list[str]) -> list[str]:
    """The placements to run: those asked for that the collective has, else its default (only) one."""
    chosen = [placement for placement in requested if placement in collective.placements]
    return chosen or [collective.placements[0]]


def resolve_collectives(spec: str | list[str]) -> list[str]:
    """Names from a comma list (or 'all'), in the order given, duplicates dropped."""
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if part == "all":
            names.extend(REGISTRY)
            continue
        if part not in REGISTRY:
            raise UsageError(f"unknown collective {part!r}{did_you_mean(part, list(REGISTRY))}; "
                             "see 'commbench list'")
        names.append(part)
    if not names:
        raise UsageError("no collective given: --collective NAME[,NAME...] or all")
    return list(dict.fromkeys(names))

