"""The registry: one small descriptor per collective.

A descriptor says how a message size maps onto buffers for a world size, the bus-bandwidth factor, and
which backend method runs it. The runner, timers and writers read descriptors and never branch on a
collective's name.

Size convention (nccl-tests'): ``size`` is the total bytes of the larger buffer, the reduce-scatter input
or the all-gather output. Collectives whose larger buffer holds one chunk per rank have ``shards(n) == n``;
``count_per_rank`` is the elements in one such chunk (for all_reduce, broadcast, reduce and send_recv
the whole buffer).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from commbench.errors import UsageError, did_you_mean


@dataclass(frozen=True)
class Layout:
    """What a descriptor needs to build one rank's buffers."""

    count_per_rank: int
    world_size: int
    rank: int
    root: int
    dtype: torch.dtype
    device: torch.device

    def empty(self, count: int) -> torch.Tensor:
        return torch.empty(count, dtype=self.dtype, device=self.device)

    def chunks(self) -> list[torch.Tensor]:
        return [self.empty(self.count_per_rank) for _ in range(self.world_size)]


@dataclass
class Buffers:
    """One rank's buffers for one size; ``peer`` is the partner rank for point-to-point."""

    input: Any
    output: Any
    peer: int | None = None

    def tensors(self) -> list[torch.Tensor]:
        """Every distinct tensor, for filling and byte counting."""
        found: list[torch.Tensor] = []
        for part in (self.input, self.output):
            for tensor in part if isinstance(part, list) else [part]:
                if tensor is not None and not any(tensor is seen for seen in found):
                    found.append(tensor)
        return found


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


@dataclass(frozen=True)
class Collective:
    name: str
    method: str  # the Backend method that runs it
    summary: str
    busbw_factor: Callable[[int], float]
    shards: Callable[[int], int]  # per-rank chunks in the larger buffer
    build: Callable[[Layout], Buffers]
    sized: bool = True  # barrier moves no data and runs once, at size 0
    reduces: bool = False  # takes a reduce op
    rooted: bool = False  # has a root rank

    def plan(self, size_bytes: int, world_size: int, element_size: int) -> tuple[int, int]:
        """(count_per_rank, size actually used) for a requested size: rounded down to a whole number
        of elements per rank chunk."""
        if not self.sized:
            return 0, 0
        unit = element_size * self.shards(world_size)
        count = size_bytes // unit
        return count, count * unit


def _in_place(layout: Layout) -> Buffers:
    buffer = layout.empty(layout.count_per_rank)
    return Buffers(buffer, buffer)


def _reduce_scatter(layout: Layout) -> Buffers:
    return Buffers(layout.chunks(), layout.empty(layout.count_per_rank))


def _reduce_scatter_base(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.count_per_rank * layout.world_size),
                   layout.empty(layout.count_per_rank))


def _all_gather(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.count_per_rank), layout.chunks())


def _all_gather_base(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.count_per_rank),
                   layout.empty(layout.count_per_rank * layout.world_size))


def _all_to_all(layout: Layout) -> Buffers:
    return Buffers(layout.chunks(), layout.chunks())


def _all_to_all_single(layout: Layout) -> Buffers:
    total = layout.count_per_rank * layout.world_size
    return Buffers(layout.empty(total), layout.empty(total))


def _gather(layout: Layout) -> Buffers:
    output = layout.chunks() if layout.rank == layout.root else None
    return Buffers(layout.empty(layout.count_per_rank), output)


def _scatter(layout: Layout) -> Buffers:
    source = layout.chunks() if layout.rank == layout.root else None
    return Buffers(source, layout.empty(layout.count_per_rank))


def _nothing(layout: Layout) -> Buffers:
    return Buffers(None, None)


def _pairwise(layout: Layout) -> Buffers:
    partner = layout.rank ^ 1  # pairs (0,1), (2,3), ...; an odd rank out sits the exchange out
    peer = partner if partner < layout.world_size else None
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank), peer)


REGISTRY: dict[str, Collective] = {c.name: c for c in [
    Collective("all_reduce", "all_reduce", "in-place all-reduce of one buffer",
               _all_reduce_factor, _one, _in_place, reduces=True),
    Collective("reduce_scatter", "reduce_scatter", "reduce-scatter from a list of per-rank chunks",
               _ring_factor, _all_ranks_share, _reduce_scatter, reduces=True),
    Collective("reduce_scatter_base", "reduce_scatter_base", "reduce-scatter of one flat tensor",
               _ring_factor, _all_ranks_share, _reduce_scatter_base, reduces=True),
    Collective("all_gather", "all_gather", "all-gather into a list of per-rank chunks",
               _ring_factor, _all_ranks_share, _all_gather),
    Collective("all_gather_base", "all_gather_base", "all-gather into one flat tensor",
               _ring_factor, _all_ranks_share, _all_gather_base),
    Collective("all_to_all", "all_to_all", "all-to-all between lists of per-rank chunks",
               _ring_factor, _all_ranks_share, _all_to_all),
    Collective("all_to_all_single", "all_to_all_single", "all-to-all of one flat tensor",
               _ring_factor, _all_ranks_share, _all_to_all_single),
    Collective("broadcast", "broadcast", "broadcast from the root",
               _unit_factor, _one, _in_place, rooted=True),
    Collective("reduce", "reduce", "reduce onto the root",
               _unit_factor, _one, _in_place, reduces=True, rooted=True),
    Collective("gather", "gather", "gather per-rank chunks onto the root",
               _ring_factor, _all_ranks_share, _gather, rooted=True),
    Collective("scatter", "scatter", "scatter per-rank chunks from the root",
               _ring_factor, _all_ranks_share, _scatter, rooted=True),
    Collective("barrier", "barrier_op", "barrier (no data; timed once)",
               _unit_factor, _one, _nothing, sized=False),
    Collective("send_recv", "send_recv", "pairwise exchange: ranks 2k and 2k+1 send to each other",
               _unit_factor, _one, _pairwise),
]}


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
