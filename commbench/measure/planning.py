"""Planning a sweep before anything is allocated: which sizes each collective runs at this group size and
dtype, what their buffers need, and the tables (collective x dtype x op x placement over sizes, in the
modes it runs) the runner measures one after the other.

Nothing here allocates memory: buffer sizes come from building a rank's buffers on torch's meta device,
and what torch allocates beside them (a descriptor's ``temporary``, per op in flight) from arithmetic.
A size is refused when its buffers and one op's temporaries exceed the memory budget (--max-memory, or
by default what the device or host has free); an async window holds no more ops than the budget has
room for temporaries.
"""

from dataclasses import dataclass, replace
from typing import Protocol

from commbench.core.devices import MemoryBudget, approximate_bytes, explicit_budget
from commbench.core.dtypes import element_size, matmul_dtype, torch_dtype
from commbench.core.sizes import format_size
from commbench.core.splits import DEFAULT_SPLITS, SplitSpec, parse_splits
from commbench.core.splits import describe as describe_splits
from commbench.core.words import plural
from commbench.measure.collectives import REGISTRY, Collective, Layout, placements_for
from commbench.measure.impls import REFERENCE_IMPL, impls_for

TENSOR_BYTES_LIMIT = 2**63  # what torch counts a tensor's bytes in: a need this large is refused


class DeviceChoice(Protocol):
    device: str | None


class SweepRequest(Protocol):
    """What planning reads of a sweep's configuration (config.sweep.RunConfig has all of it)."""

    collectives: list[str]
    sizes: list[int]
    dtypes: list[str]
    modes: list[str]
    ops: list[str]
    placements: list[str]
    root: int
    impls: list[str]
    max_memory: int | None
    iters: int | None
    max_iters: int
    with_compute: int
    launch: DeviceChoice

    def split_spec(self) -> SplitSpec: ...

    def buffer_copies(self) -> int: ...


@dataclass(frozen=True)
class PlannedSize:
    requested: int
    used: int
    count_per_rank: int
    chunk_counts: tuple[int, ...] = ()  # v-collectives (see splits.py)
    pair_counts: tuple[tuple[int, ...], ...] = ()
    window: int | None = None  # the most async ops in flight at once that the memory budget holds


@dataclass(frozen=True)
class SizeLimits:
    """What bounds the sizes of a table: the group size, the dtype, the root, --splits, the memory
    budget and the device type (torch's temporaries differ between gloo on CPU and NCCL)."""

    world_size: int
    dtype: str
    root: int = 0
    splits: SplitSpec | None = None
    budget: MemoryBudget | None = None
    device: str = "cpu"
    copies: int = 1  # sets of buffers a rank holds (--buffers, --concurrent over the same ranks)
    beside: int = 0  # bytes held beside them for the whole size (--with-compute's matrices)


@dataclass(frozen=True)
class MemoryNeed:
    """One rank's bytes for one size: its buffers (every set of them, and what is held beside them), and
    torch's temporaries for one op in flight."""

    buffers: int
    temporary: int

    @property
    def total(self) -> int:
        return self.buffers + self.temporary

    def describe(self) -> str:
        extra = f" + {approximate_bytes(self.temporary)} of torch temporaries" if self.temporary else ""
        buffers = approximate_bytes(self.buffers)
        return f"{approximate_bytes(self.total)} per rank ({buffers} of buffers{extra})"


def memory_need(collective: Collective, size: PlannedSize, limits: SizeLimits) -> MemoryNeed:
    """The largest rank's need for a size: buffers from builds on the meta device (no memory), torch's
    temporaries from the descriptor."""
    import torch

    uneven = bool(size.chunk_counts or size.pair_counts)
    ranks = range(limits.world_size) if uneven else [limits.root]  # even sizes: every rank is alike

    def rank_need(rank: int) -> MemoryNeed:
        def layout(device: str) -> Layout:
            return Layout(size.count_per_rank, limits.world_size, rank, limits.root,
                          torch_dtype(limits.dtype), torch.device(device), chunk_counts=size.chunk_counts,
                          pair_counts=size.pair_counts)

        try:
            buffers = sum(tensor.nbytes for tensor in collective.build(layout("meta")).tensors())
        except RuntimeError:  # "Storage size calculation overflowed": more bytes than a tensor holds
            return MemoryNeed(TENSOR_BYTES_LIMIT, 0)
        temporary = collective.temporary(layout(limits.device))
        return MemoryNeed(buffers * limits.copies + limits.beside, temporary)

    return max((rank_need(rank) for rank in ranks), key=lambda need: need.total)


def matmul_bytes(size: int, dtype: str) -> int:
    """--with-compute's three size x size matrices, in the dtype its matmul runs in (core/dtypes.py)."""
    return 3 * size * size * element_size(matmul_dtype(dtype))


def buffer_bytes(collective: Collective, size: PlannedSize, world_size: int, root: int, dtype: str) -> int:
    """Bytes of the largest rank's buffers for a size (no memory is allocated to find out)."""
    return memory_need(collective, size, SizeLimits(world_size, dtype, root)).buffers


@dataclass(frozen=True)
class SizesPlanned:
    """A collective's sizes within its limits: those it runs, the notes on what changed, and the sizes
    the memory budget refused, each with what it needs ('64 GiB needs 64 GiB per rank (...)')."""

    planned: list[PlannedSize]
    notes: list[str]
    refused: list[str]


def plan_sizes(collective: Collective, sizes: list[int], limits: SizeLimits
               ) -> tuple[list[PlannedSize], list[str]]:
    """The sizes a collective can run within ``limits``, and notes on what changed (size_plan)."""
    found = size_plan(collective, sizes, limits)
    return found.planned, found.notes


def size_plan(collective: Collective, sizes: list[int], limits: SizeLimits) -> SizesPlanned:
    """The sizes a collective can run within ``limits``, notes on what changed, and what was refused.

    A size is rounded down to whole elements in each rank's chunk; one too small for a single element
    per rank is skipped; two requests that round to the same size run once; one whose buffers and
    temporaries would exceed the budget on a rank is refused before anything is allocated, and the others
    get the async window the budget holds. A v-collective's sizes
    come from its splits: a splits file fixes them (one size, whatever --sizes says).
    """
    if not collective.sized:
        return SizesPlanned([PlannedSize(0, 0, 0)], [], [])
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
            planned.append(_with_window(collective, size, limits))
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
    notes.extend(_refusal_notes(where, limits.budget, refused))
    return SizesPlanned(planned, notes, refused)


def _where(collective: Collective, limits: SizeLimits) -> str:
    return f"{collective.name} {limits.dtype} at {plural(limits.world_size, 'rank')}"


def _refusal(collective: Collective, size: PlannedSize, limits: SizeLimits) -> str | None:
    """Why the memory budget refuses this size ('4 MiB needs 8 MiB per rank (...)'), or None."""
    if limits.budget is None:
        return None
    need = memory_need(collective, size, limits)
    if need.total <= limits.budget.limit:
        return None
    return f"{format_size(size.used)} needs {need.describe()}"


def _with_window(collective: Collective, size: PlannedSize, limits: SizeLimits) -> PlannedSize:
    """The size with the most async ops its budget has room for (each holds its own temporaries)."""
    if limits.budget is None or not collective.sized:
        return size
    need = memory_need(collective, size, limits)
    if not need.temporary:
        return size
    return replace(size, window=max(1, (limits.budget.limit - need.buffers) // need.temporary))


def _refusal_notes(where: str, budget: MemoryBudget | None, refused: list[str]) -> list[str]:
    """The note that names each size the budget refused, with what it needs and what there is."""
    if not refused or budget is None:
        return []
    hint = "" if budget.explicit else "; --max-memory sets another budget"
    return [f"{where}: refused, not enough memory ({budget.describe()}{hint}): {', '.join(refused)}"]


def _plan_uneven(collective: Collective, sizes: list[int], limits: SizeLimits) -> SizesPlanned:
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
            planned.append(_with_window(collective, size, limits))
    where = _where(collective, limits)
    notes = []
    if splits.from_file and planned:
        notes.append(f"{where}: splits from {splits.path} ({describe_splits(plans[0], elem)}); "
                     "--sizes does not apply")
    elif planned:
        notes.append(f"{where}: {splits.text} splits; a size is the largest per-rank byte count")
    if skipped:
        notes.append(f"{where}: skipped sizes too small for {splits.text}: {', '.join(skipped)}")
    notes.extend(_refusal_notes(where, limits.budget, refused))
    return SizesPlanned(planned, notes, refused)


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
    impl: str = REFERENCE_IMPL  # the implementation (measure.impls) the table's ops run by
    refused: tuple[str, ...] = ()  # sizes the memory budget refused: 'all_reduce float32 at 2 ranks: 64
    # GiB needs 64 GiB per rank (64 GiB of buffers)'

    def step_count(self) -> int:
        """The (size, mode) points this table measures."""
        return len(self.sizes) * len(self.modes)


def plan_tables(config: SweepRequest, world_size: int, available: MemoryBudget | None = None
                ) -> tuple[list[TablePlan], list[str]]:
    """The tables of the sweep; ``world_size`` is the ranks one collective spans (a group's size),
    ``available`` the memory budget when --max-memory does not set one. Each collective, dtype, op and
    placement has a table per implementation that runs the collective, one after the other."""
    tables: list[TablePlan] = []
    notes: list[str] = []
    splits = config.split_spec()
    budget = explicit_budget(config.max_memory) if config.max_memory is not None else available
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
            limits = SizeLimits(world_size, dtype, config.root, splits, budget,
                                config.launch.device or "cpu", copies=config.buffer_copies(),
                                beside=matmul_bytes(config.with_compute, dtype))
            found = size_plan(collective, config.sizes, limits)
            planned = found.planned
            notes.extend(found.notes)
            refused = tuple(f"{_where(collective, limits)}: {refusal}, beyond the memory budget "
                            f"({budget.describe() if budget else ''})" for refusal in found.refused)
            if "async" in modes:
                notes.extend(_window_notes(_where(collective, limits), planned, config, budget))
            for op in config.ops if collective.reduces else [""]:
                for placement in placements_for(collective, config.placements):
                    tables.extend(TablePlan(collective, dtype, op, planned, placement, modes, impl, refused)
                                  for impl in impls_for(name, config.impls))
    return tables, notes


def _window_notes(where: str, planned: list[PlannedSize], config: SweepRequest, budget: MemoryBudget | None
                  ) -> list[str]:
    """A note naming the sizes whose async windows the memory budget holds to fewer ops than asked."""
    widest = config.iters or config.max_iters
    capped = [f"{format_size(size.used)}: {size.window}" for size in planned
              if size.window is not None and size.window < widest]
    if not capped or budget is None:
        return []
    return [f"{where}: async windows hold at most this many ops, each with its own temporaries, within "
            f"{budget.describe()}: {', '.join(capped)}"]
