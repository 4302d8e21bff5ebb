"""Planning a sweep before anything is allocated: which sizes each collective runs at this group size and
dtype, what their buffers need, and the tables (collective x dtype x op x placement over sizes, in the
modes it runs) the runner measures one after the other.

Nothing here allocates memory: buffer sizes come from building a rank's buffers on torch's meta device.
"""

from dataclasses import dataclass

from commbench.collectives import REGISTRY, Collective, Layout, placements_for
from commbench.config import RunConfig, split_spec
from commbench.dtypes import element_size, torch_dtype
from commbench.sizes import format_size
from commbench.splits import DEFAULT_SPLITS, SplitSpec, parse_splits
from commbench.splits import describe as describe_splits


@dataclass(frozen=True)
class PlannedSize:
    requested: int
    used: int
    count_per_rank: int
    chunk_counts: tuple[int, ...] = ()  # v-collectives (see splits.py)
    pair_counts: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class SizeLimits:
    """What bounds the sizes of a table: the group size, the dtype, the root, --splits, --max-memory."""

    world_size: int
    dtype: str
    root: int = 0
    splits: SplitSpec | None = None
    max_memory: int | None = None


def buffer_bytes(collective: Collective, size: PlannedSize, world_size: int, root: int, dtype: str) -> int:
    """Bytes of the largest rank's buffers for a size, from builds on the meta device (no memory)."""
    import torch

    uneven = bool(size.chunk_counts or size.pair_counts)
    ranks = range(world_size) if uneven else [root]  # even sizes: every rank's buffers are alike

    def rank_bytes(rank: int) -> int:
        layout = Layout(size.count_per_rank, world_size, rank, root, torch_dtype(dtype), torch.device("meta"),
                        chunk_counts=size.chunk_counts, pair_counts=size.pair_counts)
        return sum(tensor.nbytes for tensor in collective.build(layout).tensors())

    return max(rank_bytes(rank) for rank in ranks)


def plan_sizes(collective: Collective, sizes: list[int], limits: SizeLimits
               ) -> tuple[list[PlannedSize], list[str]]:
    """The sizes a collective can run within ``limits``, and notes on what changed.

    A size is rounded down to whole elements in each rank's chunk; one too small for a single element
    per rank is skipped; two requests that round to the same size run once; one whose buffers would
    exceed ``max_memory`` bytes on a rank is refused before anything is allocated. A v-collective's sizes
    come from its splits: a splits file fixes them (one size, whatever --sizes says).
    """
    if not collective.sized:
        return [PlannedSize(0, 0, 0)], []
    if collective.uneven is not None:
        return _plan_uneven(collective, sizes, limits)
    elem = element_size(limits.dtype)
    unit = elem * collective.shards(limits.world_size)
    planned: list[PlannedSize] = []
    rounded, skipped, merged, refused = [], [], [], []
    for requested in sizes:
        count, used = collective.plan(requested, limits.world_size, elem)
        size = PlannedSize(requested, used, count)
        if count == 0:
            skipped.append(format_size(requested))
        elif any(p.used == used for p in planned):
            merged.append(format_size(requested))
        elif (refusal := _refusal(collective, size, limits)) is not None:
            refused.append(refusal)
        else:
            planned.append(size)
            if used != requested:
                rounded.append(f"{format_size(requested)} -> {format_size(used)}")
    where = _where(collective, limits)
    notes = []
    if rounded:
        shown = ", ".join(rounded[:4]) + (f", ... ({len(rounded)} in all)" if len(rounded) > 4 else "")
        granularity = f"a multiple of {unit} B ({collective.shards(limits.world_size)} x {elem} B)"
        notes.append(f"{where}: sizes rounded down to {granularity}: {shown}")
    if skipped:
        notes.append(f"{where}: skipped sizes below {unit} B: {', '.join(skipped)}")
    if merged:
        notes.append(f"{where}: {', '.join(merged)} rounded onto a size already measured")
    notes.extend(_refusal_notes(where, limits.max_memory, refused))
    return planned, notes


def _where(collective: Collective, limits: SizeLimits) -> str:
    return f"{collective.name} {limits.dtype} at {limits.world_size} ranks"


def _refusal(collective: Collective, size: PlannedSize, limits: SizeLimits) -> str | None:
    """Why --max-memory refuses this size ('4 MiB needs 8 MiB (8388608 B)'), or None."""
    if limits.max_memory is None:
        return None
    needed = buffer_bytes(collective, size, limits.world_size, limits.root, limits.dtype)
    if needed <= limits.max_memory:
        return None
    return f"{format_size(size.used)} needs {format_size(needed)} ({needed} B)"


def _refusal_notes(where: str, max_memory: int | None, refused: list[str]) -> list[str]:
    """The note that names each size --max-memory refused, with what its buffers need."""
    if not refused:
        return []
    return [f"{where}: refused by --max-memory {format_size(max_memory or 0)} of buffers per rank: "
            f"{', '.join(refused)}"]


def _plan_uneven(collective: Collective, sizes: list[int], limits: SizeLimits
                 ) -> tuple[list[PlannedSize], list[str]]:
    elem = element_size(limits.dtype)
    splits = limits.splits or parse_splits(DEFAULT_SPLITS)
    planned: list[PlannedSize] = []
    skipped, refused = [], []
    plans = []
    for requested in sizes[:1] if splits.from_file else sizes:
        plan = collective.plan_size(requested, limits.world_size, elem, splits)
        plans.append(plan)
        size = PlannedSize(plan.size_bytes if splits.from_file else requested, plan.size_bytes,
                           plan.count_per_rank, plan.chunk_counts, plan.pair_counts)
        if plan.count_per_rank == 0:
            skipped.append(format_size(requested))
        elif any(p.used == plan.size_bytes for p in planned):
            continue
        elif (refusal := _refusal(collective, size, limits)) is not None:
            refused.append(refusal)
        else:
            planned.append(size)
    where = _where(collective, limits)
    notes = []
    if splits.from_file and planned:
        notes.append(f"{where}: splits from {splits.path} ({describe_splits(plans[0], elem)}); "
                     "--sizes does not apply")
    elif planned:
        notes.append(f"{where}: {splits.text} splits; a size is the largest per-rank byte count")
    if skipped:
        notes.append(f"{where}: skipped sizes too small for {splits.text}: {', '.join(skipped)}")
    notes.extend(_refusal_notes(where, limits.max_memory, refused))
    return planned, notes


@dataclass(frozen=True)
class TablePlan:
    """One table's worth of work: a collective, a dtype, an op and a placement over the planned sizes,
    in the modes the collective runs."""

    collective: Collective
    dtype: str
    op: str
    sizes: list[PlannedSize]
    placement: str = ""
    modes: tuple[str, ...] = ("sync",)

    def step_count(self) -> int:
        """The (size, mode) points this table measures."""
        return len(self.sizes) * len(self.modes)


def plan_tables(config: RunConfig, world_size: int) -> tuple[list[TablePlan], list[str]]:
    """The tables of the sweep; ``world_size`` is the ranks one collective spans (a group's size)."""
    tables: list[TablePlan] = []
    notes: list[str] = []
    splits = split_spec(config)
    for name in config.collectives:
        collective = REGISTRY[name]
        modes = tuple(mode for mode in config.modes if mode in collective.modes)
        if len(modes) != len(config.modes):
            notes.append(f"{name} runs in {' and '.join(collective.modes)} mode only"
                         + ("" if modes else "; skipped"))
        if not modes:
            continue
        # A collective that moves no data is timed once, not once per dtype.
        for dtype in config.dtypes if collective.sized else config.dtypes[:1]:
            limits = SizeLimits(world_size, dtype, config.root, splits, config.max_memory)
            planned, size_notes = plan_sizes(collective, config.sizes, limits)
            notes.extend(size_notes)
            for op in config.ops if collective.reduces else [""]:
                for placement in placements_for(collective, config.placements):
                    tables.append(TablePlan(collective, dtype, op, planned, placement, modes))
    return tables, notes
