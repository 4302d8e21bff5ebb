"""What a collective descriptor is made of: the layout it builds buffers for, the buffers, and the
descriptor itself.

Size convention (nccl-tests'): ``size`` is the total bytes of the larger buffer, the reduce-scatter input
or the all-gather output. Collectives whose larger buffer holds one chunk per rank have ``shards(n) == n``;
``count_per_rank`` is the elements in one such chunk (for all_reduce, broadcast, reduce and the
point-to-point patterns the whole buffer). v-collectives take their element counts from --splits
(splits.py) and their size is the largest per-rank byte count.

Importing this package does not import torch: names, factors, placements and modes are what the command
line validates, and the file commands never need more. torch is imported where buffers are made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from commbench.core.splits import SizePlan, SplitSpec

if TYPE_CHECKING:
    import torch

    from commbench.backends.base import Backend, CollectiveArgs
    from commbench.measure.values import CheckValues

OUT_OF_PLACE = "out-of-place"
IN_PLACE = "in-place"
PLACEMENTS = (OUT_OF_PLACE, IN_PLACE)
MODES = ("sync", "async")


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
    # where an implementation's buffers come from (count, dtype, device) -> tensor; None: torch.empty
    allocate: Callable[[int, torch.dtype, torch.device], torch.Tensor] | None = None

    def empty(self, count: int) -> torch.Tensor:
        if self.allocate is not None:
            return self.allocate(count, self.dtype, self.device)
        import torch

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


@dataclass(frozen=True)
class Expected:
    """What one output view must hold after a checked op.

    ``source_rank`` None: the reduction over all ranks of the inputs at ``input_start`` onwards; else
    the values ``source_rank`` put at ``input_start`` onwards of its input. ``offset`` is the view's
    position in this rank's output, for reporting the index of a wrong element.
    """

    actual: torch.Tensor
    source_rank: int | None
    input_start: int
    offset: int


# --- the pieces descriptors share -------------------------------------------------------------------

def one_chunk_per_rank(n: int) -> int:
    return n


def one_chunk(n: int) -> int:
    return 1


def ring_factor(n: int) -> float:
    """(n-1)/n: each rank receives the n-1 chunks it does not hold (nccl-tests' reduce-scatter factor)."""
    return (n - 1) / n


def all_reduce_factor(n: int) -> float:
    """2(n-1)/n: a reduce-scatter followed by an all-gather."""
    return 2 * (n - 1) / n


def unit_factor(n: int) -> float:
    return 1.0


def unscaled(layout: Layout) -> float:
    return 1.0


def fill_flat(layout: Layout, buffers: Buffers, values: CheckValues) -> None:
    """--check: this rank's inputs as one flat index space (the usual case)."""
    from commbench.measure.values import fill_inputs

    fill_inputs(buffers.input_parts(), buffers.output_parts(), layout.rank, values)


def offsets(counts: list[int] | tuple[int, ...]) -> list[int]:
    """Where each of consecutive chunks of these lengths starts."""
    found, position = [], 0
    for count in counts:
        found.append(position)
        position += count
    return found


def views(flat: torch.Tensor, counts: list[int] | tuple[int, ...]) -> list[torch.Tensor]:
    return [flat[start:start + count] for start, count in zip(offsets(counts), counts, strict=True)]


def nothing_expected(layout: Layout, buffers: Buffers) -> list[Expected]:
    return []


# --- what torch allocates beside the buffers, per op in flight ----------------------------------------
# Measured on gloo (torch 2.13, peak resident memory) and read from ProcessGroupNCCL: the list forms copy
# through one flat tensor, gloo copies the flat forms too. An async window of k ops holds k of them.

def no_temporary(layout: Layout) -> int:
    return 0


def all_chunks(layout: Layout) -> int:
    """One flat copy of every rank's chunk: the larger buffer."""
    return layout.count_per_rank * layout.world_size * layout.dtype.itemsize


def all_chunks_on_cpu(layout: Layout) -> int:
    """gloo copies the flat forms through the larger buffer; NCCL works in place."""
    return all_chunks(layout) if layout.device.type == "cpu" else 0


@dataclass(frozen=True, kw_only=True)
class Collective:
    """One collective: how a size becomes buffers, how it is issued, what it must produce, its factor.

    ``issue`` calls the Backend method that runs it; ``expect`` says, for --check, which values each
    output view must hold; ``busbw_factor(n)`` turns algorithm bandwidth into bus bandwidth at n ranks;
    ``temporary(layout)`` is what torch allocates beside the buffers for one op in flight (--max-memory
    and the async window's cap count it).
    """

    name: str
    summary: str
    issue: Callable[[Backend, CollectiveArgs], None]
    build: Callable[[Layout], Buffers]
    expect: Callable[[Layout, Buffers], list[Expected]]
    busbw_factor: Callable[[int], float]
    shards: Callable[[int], int] = one_chunk  # per-rank chunks in the larger buffer
    fill: Callable[[Layout, Buffers, CheckValues], None] = fill_flat  # --check: this rank's inputs
    sized: bool = True  # barrier moves no data and runs once, at size 0
    reduces: bool = False  # takes a reduce op
    rooted: bool = False  # has a root rank
    placements: tuple[str, ...] = (OUT_OF_PLACE,)  # the layouts it has; the first is the default
    uneven: Callable[[SplitSpec, int, int, int], SizePlan] | None = None  # v-collectives: counts
    time_scale: Callable[[Layout], float] = unscaled  # reported time = measured time x this
    modes: tuple[str, ...] = MODES
    temporary: Callable[[Layout], int] = no_temporary  # bytes torch allocates per op in flight
    capturable: bool = True  # False: it blocks the host (barrier), so a CUDA graph cannot capture it

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

    @property
    def default_placement(self) -> str:
        return self.placements[0]


# Every descriptor by name, in the order they were registered (the order of `--collective all`).
REGISTRY: dict[str, Collective] = {}


def register(collective: Collective) -> Collective:
    """Add a descriptor to the registry (its name must be new) and return it."""
    if collective.name in REGISTRY:
        raise ValueError(f"collective {collective.name!r} is already registered")
    REGISTRY[collective.name] = collective
    return collective
