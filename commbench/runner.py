"""The sweep: collectives x dtypes x ops x placements x sizes x modes -> rows.

The runner reads descriptors from the registry and calls the backend method each names; it has no
per-collective branches. Buffers are allocated and filled once per size, before any timed region, and
released before the next size.

With sub-communicators every group runs the same collective at the same size at once; a rank's buffers,
root and peer are those of its group (n = the group size). Before each size every rank checks in
(Backend.check_in): a rank that does not arrive is named at the deadline instead of hanging a
collective, and a stop asked for by a signal on any rank is agreed on by all, between sizes.

Outside every timed region, and in this order for each size: every rank allocates its buffers and the
ranks agree that all of them could; per mode, one probe op is issued and completed and the ranks agree
that it ran everywhere (an op or dtype the backend rejects becomes a row with an ``error``, and the sweep
goes on); warm-up; the timed iterations, with --check a checked op after them (and after every
--check-every timed ops), its buffers refilled before and zeroed after.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.check import CheckResult, Pattern, compare
from commbench.collectives import REGISTRY, Buffers, Collective, Layout, placements_for
from commbench.config import RunConfig, split_spec
from commbench.dtypes import element_size, torch_dtype
from commbench.errors import RunError, Terminated, UsageError, brief
from commbench.groups import Membership, world_plan
from commbench.provenance.verdicts import RowContext, annotate_row
from commbench.results import Row
from commbench.sampling import Interlude, IterationBudget, Sampled, SamplingPolicy, collect
from commbench.sizes import format_size
from commbench.splits import DEFAULT_SPLITS, SplitSpec, check_world_size, parse_splits
from commbench.splits import describe as describe_splits
from commbench.stats import algbw_gbps, arrival_skews, last_to_arrive, summarize
from commbench.timing import warm_up


class Output(Protocol):
    """Where rows go as they are measured (rank 0); other ranks get NullOutput."""

    def note(self, text: str) -> None: ...

    def row(self, row: Row) -> None: ...

    def group_done(self, rows: list[Row]) -> None: ...

    def plan(self, steps: int) -> None:
        """The sweep will measure ``steps`` (size, mode) points."""

    def working(self, text: str) -> None:
        """Measuring the point described by ``text`` now."""


class NullOutput:
    def note(self, text: str) -> None:
        pass

    def plan(self, steps: int) -> None:
        pass

    def working(self, text: str) -> None:
        pass

    def row(self, row: Row) -> None:
        pass

    def group_done(self, rows: list[Row]) -> None:
        pass


@dataclass(frozen=True)
class PlannedSize:
    requested: int
    used: int
    count_per_rank: int
    chunk_counts: tuple[int, ...] = ()  # v-collectives (see splits.py)
    pair_counts: tuple[tuple[int, ...], ...] = ()


def buffer_bytes(collective: Collective, count_per_rank: int, world_size: int, root: int,
                 dtype: str, size: PlannedSize | None = None) -> int:
    """Bytes of the largest rank's buffers for a size, from a build on the meta device (no memory)."""
    if size is not None and (size.chunk_counts or size.pair_counts):  # uneven: every rank differs
        return max(buffer_bytes_of_rank(collective, size, world_size, rank, root, dtype)
                   for rank in range(world_size))
    layout = Layout(count_per_rank, world_size, root, root, torch_dtype(dtype), torch.device("meta"))
    return sum(tensor.nbytes for tensor in collective.build(layout).tensors())


def buffer_bytes_of_rank(collective: Collective, size: PlannedSize, world_size: int, rank: int, root: int,
                         dtype: str) -> int:
    layout = Layout(size.count_per_rank, world_size, rank, root, torch_dtype(dtype), torch.device("meta"),
                    chunk_counts=size.chunk_counts, pair_counts=size.pair_counts)
    return sum(tensor.nbytes for tensor in collective.build(layout).tensors())


def plan_sizes(collective: Collective, sizes: list[int], world_size: int, dtype: str,
               max_memory: int | None = None, root: int = 0, splits: SplitSpec | None = None
               ) -> tuple[list[PlannedSize], list[str]]:
    """The sizes a collective can run for this world size and dtype, and notes on what changed.

    A size is rounded down to whole elements in each rank's chunk; one too small for a single element
    per rank is skipped; two requests that round to the same size run once; one whose buffers would
    exceed ``max_memory`` bytes on a rank is refused before anything is allocated. A v-collective's sizes
    come from its splits: a splits file fixes them (one size, whatever --sizes says).
    """
    if not collective.sized:
        return [PlannedSize(0, 0, 0)], []
    if collective.uneven is not None:
        return _plan_uneven(collective, sizes, world_size, dtype, splits or parse_splits(DEFAULT_SPLITS),
                            max_memory, root)
    elem = element_size(dtype)
    unit = elem * collective.shards(world_size)
    planned: list[PlannedSize] = []
    rounded: list[str] = []
    skipped: list[str] = []
    merged: list[str] = []
    refused: list[str] = []
    for requested in sizes:
        count, used = collective.plan(requested, world_size, elem)
        if count == 0:
            skipped.append(format_size(requested))
        elif any(p.used == used for p in planned):
            merged.append(format_size(requested))
        elif max_memory is not None and (
                needed := buffer_bytes(collective, count, world_size, root, dtype)) > max_memory:
            refused.append(f"{format_size(used)} needs {format_size(needed)} ({needed} B)")
        else:
            planned.append(PlannedSize(requested, used, count))
            if used != requested:
                rounded.append(f"{format_size(requested)} -> {format_size(used)}")
    where = f"{collective.name} {dtype} at {world_size} ranks"
    granularity = f"a multiple of {unit} B ({collective.shards(world_size)} x {elem} B)"
    notes = []
    if rounded:
        shown = ", ".join(rounded[:4]) + (f", ... ({len(rounded)} in all)" if len(rounded) > 4 else "")
        notes.append(f"{where}: sizes rounded down to {granularity}: {shown}")
    if skipped:
        notes.append(f"{where}: skipped sizes below {unit} B: {', '.join(skipped)}")
    if merged:
        notes.append(f"{where}: {', '.join(merged)} rounded onto a size already measured")
    notes.extend(_refusal_notes(where, max_memory, refused))
    return planned, notes


def _refusal_notes(where: str, max_memory: int | None, refused: list[str]) -> list[str]:
    """The note that names each size --max-memory refused, with what its buffers need."""
    if not refused:
        return []
    return [f"{where}: refused by --max-memory {format_size(max_memory or 0)} of buffers per rank: "
            f"{', '.join(refused)}"]


def _plan_uneven(collective: Collective, sizes: list[int], world_size: int, dtype: str, splits: SplitSpec,
                 max_memory: int | None, root: int) -> tuple[list[PlannedSize], list[str]]:
    elem = element_size(dtype)
    where = f"{collective.name} {dtype} at {world_size} ranks"
    planned: list[PlannedSize] = []
    skipped: list[str] = []
    refused: list[str] = []
    plans = []
    for requested in sizes[:1] if splits.from_file else sizes:
        plan = collective.plan_size(requested, world_size, elem, splits)
        plans.append(plan)
        size = PlannedSize(plan.size_bytes if splits.from_file else requested, plan.size_bytes,
                           plan.count_per_rank, plan.chunk_counts, plan.pair_counts)
        if plan.count_per_rank == 0:
            skipped.append(format_size(requested))
        elif any(p.used == plan.size_bytes for p in planned):
            continue
        elif max_memory is not None and (
                needed := buffer_bytes(collective, 0, world_size, root, dtype, size)) > max_memory:
            refused.append(f"{format_size(size.used)} needs {format_size(needed)} ({needed} B)")
        else:
            planned.append(size)
    notes = []
    if splits.from_file and planned:
        notes.append(f"{where}: splits from {splits.path} ({describe_splits(plans[0], elem)}); "
                     "--sizes does not apply")
    elif planned:
        notes.append(f"{where}: {splits.text} splits; a size is the largest per-rank byte count")
    if skipped:
        notes.append(f"{where}: skipped sizes too small for {splits.text}: {', '.join(skipped)}")
    notes.extend(_refusal_notes(where, max_memory, refused))
    return planned, notes


def sampling_policy(config: RunConfig) -> SamplingPolicy:
    return SamplingPolicy(fixed_iters=config.iters, time_per_size=config.time_per_size,
                          min_iters=config.min_iters, max_iters=config.max_iters,
                          precision=config.precision, barrier_per_iter=config.barrier == "per-iter",
                          cuda_graph_replays=config.cuda_graph)


@dataclass(frozen=True)
class Group:
    """One table's worth of work: a collective, a dtype, an op and a placement over the planned sizes,
    in the modes the collective runs."""

    collective: Collective
    dtype: str
    op: str
    sizes: list[PlannedSize]
    placement: str = ""
    modes: tuple[str, ...] = ("sync",)


def plan_groups(config: RunConfig, world_size: int) -> tuple[list[Group], list[str]]:
    """The tables of the sweep; ``world_size`` is the ranks one collective spans (a group's size)."""
    groups: list[Group] = []
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
            planned, size_notes = plan_sizes(collective, config.sizes, world_size, dtype,
                                             config.max_memory, config.root, splits)
            notes.extend(size_notes)
            for op in config.ops if collective.reduces else [""]:
                for placement in placements_for(collective, config.placements):
                    groups.append(Group(collective, dtype, op, planned, placement, modes))
    return groups, notes


def _no_stop() -> int:
    return 0


@dataclass(frozen=True)
class Session:
    """What launch sets up once for a rank besides the backend: the sub-communicator it measures in,
    and the stop requests (signals) that every rank agrees on between sizes."""

    membership: Membership
    stop_requested: Callable[[], int] = _no_stop
    row_context: RowContext | None = None  # provenance columns and verdicts (commbench.provenance)


def run_benchmarks(configs: list[RunConfig], backend: Backend, output: Output,
                   session: Session | None = None) -> list[Row]:
    """A run: its benchmarks (one, or a sweep file's list) in order, in one process group."""
    rows: list[Row] = []
    for config in configs:
        rows.extend(run_sweep(config, backend, output, session))
    return rows


def run_sweep(config: RunConfig, backend: Backend, output: Output, session: Session | None = None
              ) -> list[Row]:
    """Every row of the sweep, reported to ``output`` as each finishes.

    ``session.stop_requested`` returns the signal number a user sent this rank (0: none); the sweep stops
    at the next size boundary that every rank reaches, raising Terminated on all of them.
    """
    session = session or Session(Membership(world_plan(backend.world_size), None, backend.rank))
    membership = session.membership
    group_size = membership.plan.size
    if config.root >= group_size:
        where = f"the world of {group_size} ranks" if membership.plan.is_world \
            else f"a group of {group_size} ranks"
        raise UsageError(f"--root {config.root} is outside {where}")
    check_world_size(split_spec(config), group_size)
    groups, notes = plan_groups(config, group_size)
    for text in notes:
        output.note(text)
    output.plan(sum(len(group.sizes) * len(group.modes) for group in groups))
    policy = sampling_policy(config)
    all_rows: list[Row] = []
    for group in groups:
        budgets = {mode: IterationBudget(policy) for mode in group.modes}
        group_rows: list[Row] = []
        for size in group.sizes:
            _check_in(config, backend, membership, _step_label(group, size), session.stop_requested)
            for measured in measure_size(config, backend, group, size, policy, budgets, output, membership):
                row = annotate_row(measured, session.row_context)
                output.row(row)
                if row.wrong:
                    output.note(f"{describe_row(row)}: {row.wrong} wrong elements, first at "
                                f"{row.first_wrong}")
                group_rows.append(row)
        output.group_done(group_rows)
        all_rows.extend(group_rows)
    # Every rank has finished measuring: a stop asked for during the last size has nothing left to stop.
    _check_in(config, backend, membership, "the end of the sweep", _no_stop)
    return all_rows


def _step_label(group: Group, size: PlannedSize) -> str:
    """What is about to be measured, as messages name it."""
    detail = ", ".join(part for part in (group.dtype, group.op, group.placement) if part)
    return f"{group.collective.name} ({detail}) at size {format_size(size.used)}"


def describe_row(row: Row) -> str:
    """'all_reduce (float32, sum, in-place, sync) at 64 KiB', as messages name a row."""
    detail = ", ".join(part for part in (row.dtype, row.op, row.placement, row.mode) if part)
    return f"{row.collective} ({detail}) at {format_size(row.size_bytes)}"


def sweep_failure(rows: list[Row]) -> str | None:
    """Why a finished sweep exits 1: rows that failed or held wrong values; None when all is well."""
    failed = [row for row in rows if row.error]
    wrong = [row for row in rows if row.wrong]
    problems = []
    if failed:
        first = failed[0]
        problems.append(f"{_count(len(failed), 'row')} failed (first: {describe_row(first)}: {first.error})")
    if wrong:
        first = wrong[0]
        problems.append(f"{_count(len(wrong), 'row')} had wrong values (first: {describe_row(first)}: "
                        f"{_count(first.wrong or 0, 'wrong element')}, the first at {first.first_wrong})")
    return "; ".join(problems) or None


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _attempt(action: Callable[[], Any]) -> tuple[Any, str | None]:
    """``action()``'s value, or the first line of the error it raised."""
    try:
        return action(), None
    except (RunError, UsageError, Terminated):
        raise
    except Exception as exc:
        return None, brief(exc)


def agree(backend: Backend, error: str | None) -> str | None:
    """Every rank learns whether any rank failed, and the first failure: ranks then act alike."""
    flags = backend.all_gather_floats([0.0 if error is None else 1.0])
    if not any(flag for (flag,) in flags):
        return None
    texts = backend.all_gather_object(error)
    failing = [rank for rank, text in enumerate(texts) if text is not None]
    if len(failing) == len(texts) and len(set(texts)) == 1:
        return f"{texts[0]} (on every rank)"
    others = len(failing) - 1
    return f"rank {failing[0]}: {texts[failing[0]]}" + (f" (and {_count(others, 'other rank')})"
                                                         if others else "")


def _allocate(collective: Collective, layout: Layout) -> Buffers:
    buffers = collective.build(layout)
    for tensor in buffers.tensors():
        tensor.zero_()  # zeros: repeated in-place reductions stay finite in every dtype
    return buffers


def _probe(call: Callable[[CollectiveArgs], None], backend: Backend, args: CollectiveArgs, mode: str) -> None:
    """One untimed op, issued as ``mode`` issues them and completed."""
    args.async_op = mode == "async"
    try:
        call(args)
        backend.complete(args)
    finally:
        args.async_op = False
        args.wait_list.clear()


class Checker:
    """--check for one size and mode: fill, run one op, compare on every rank, total over ranks."""

    def __init__(self, collective: Collective, layout: Layout, buffers: Buffers, pattern: Pattern,
                 backend: Backend, call: Callable[[CollectiveArgs], None], args: CollectiveArgs,
                 mode: str) -> None:
        self.collective, self.layout, self.buffers, self.pattern = collective, layout, buffers, pattern
        self.backend, self.call, self.args, self.mode = backend, call, args, mode
        self.wrong = 0
        self.first_wrong = ""

    def run(self) -> None:
        self.collective.fill(self.layout, self.buffers, self.pattern)
        self.backend.sync_device()
        was_async = self.args.async_op
        self.args.async_op = self.mode == "async"  # in async mode the checked op is issued async too
        self.call(self.args)
        self.backend.complete(self.args)
        self.args.async_op = was_async
        local = compare(self.collective.expect(self.layout, self.buffers), self.pattern)
        # every rank of every group: the groups check at the same time, wrong counts add up
        results = [CheckResult.from_floats(values)
                   for values in self.backend.all_gather_floats(local.floats())]
        self.wrong += sum(result.wrong for result in results)
        if not self.first_wrong:
            self.first_wrong = next((result.describe(rank) for rank, result in enumerate(results)
                                     if result.wrong), "")
        for tensor in self.buffers.tensors():
            tensor.zero_()  # back to zeros before timing resumes


def _check_in(config: RunConfig, backend: Backend, membership: Membership, label: str,
              stop_requested: Callable[[], int]) -> None:
    # The signature holds what every rank must agree on for the step to be the same collective work.
    plan = membership.plan
    signature = (f"{label}|{'+'.join(config.modes)}|{config.warmup}|{config.iters}|{config.barrier}|"
                 f"{config.cuda_graph}|{plan.layout}:{plan.count}x{plan.size}")
    stop = backend.check_in(label, signature, stop_requested())
    if stop:
        raise Terminated(stop)


def measure_size(config: RunConfig, backend: Backend, group: Group, size: PlannedSize,
                 policy: SamplingPolicy, budgets: dict[str, IterationBudget], output: Output,
                 membership: Membership | None = None) -> list[Row]:
    """One row per mode for one size; the buffers are this call's locals, released when it returns."""
    collective, dtype, op = group.collective, group.dtype, group.op
    placement = group.placement or collective.placements[0]
    membership = membership or Membership(world_plan(backend.world_size), None, backend.rank)
    rank = backend.rank
    layout = Layout(size.count_per_rank, membership.plan.size, membership.group_rank, config.root,
                    torch_dtype(dtype), backend.device, placement, size.chunk_counts, size.pair_counts,
                    config.p2p_window)
    current = [group.modes[0]]  # the mode being measured, for the message
    try:
        return _measure_modes(config, backend, group, size, policy, budgets, output, membership, layout,
                              current)
    except (RunError, UsageError, Terminated):
        raise
    except Exception as exc:  # a backend error (or a timeout) past the probe: name what failed, where
        detail = ", ".join(part for part in (dtype, op, placement, current[0]) if part)
        raise RunError(f"{collective.name} ({detail}) failed at size {format_size(size.used)} on rank "
                       f"{rank}: {brief(exc)}") from exc


def _measure_modes(config: RunConfig, backend: Backend, group: Group, size: PlannedSize,
                   policy: SamplingPolicy, budgets: dict[str, IterationBudget], output: Output,
                   membership: Membership, layout: Layout, current: list[str]) -> list[Row]:
    collective, dtype, op, placement = group.collective, group.dtype, group.op, layout.placement
    # All ranks agree before the first collective: a rank that cannot allocate (out of memory) makes
    # an error row on every rank instead of leaving the others waiting inside a collective.
    buffers, error = _attempt(lambda: _allocate(collective, layout))
    error = agree(backend, error)
    if error is not None:
        return [_make_row(config, backend, collective, dtype, op, placement, mode, size, None, membership,
                          layout, error=error) for mode in group.modes]
    args = CollectiveArgs(group=membership.handle, op=op or "sum", root=config.root,
                          premul_factor=config.premul_factor, **buffers.call_options())
    call = getattr(backend, collective.method)
    rows = []
    for mode in group.modes:
        current[0] = mode
        output.working(f"{collective.name} {dtype} {format_size(size.used)} {mode}")
        _, error = _attempt(lambda: _probe(call, backend, args, mode))  # noqa: B023 - called at once
        error = agree(backend, error)
        if error is not None:
            rows.append(_make_row(config, backend, collective, dtype, op, placement, mode, size, None,
                                  membership, layout, error=error))
            continue
        checker = interlude = None
        if config.check:
            pattern = Pattern(layout.dtype, op, layout.world_size, backend.device, config.premul_factor)
            checker = Checker(collective, layout, buffers, pattern, backend, call, args, mode)
            interlude = Interlude(config.check_every or 1 << 62, checker.run)
        args.async_op = mode == "async"
        warm_up(call, backend, args, config.warmup)
        sampled = collect(call, backend, args, mode, policy, budgets[mode], size.used, interlude)
        if interlude is not None:
            interlude.finish()  # the checked op after timing
        rows.append(_make_row(config, backend, collective, dtype, op, placement, mode, size, sampled,
                              membership, layout, checker=checker))
    return rows


def _microseconds(seconds: list[float]) -> list[float]:
    return [round(value * 1e6, 3) for value in seconds]  # the clocks resolve nanoseconds


def _make_row(config: RunConfig, backend: Backend, collective: Collective, dtype: str, op: str,
              placement: str, mode: str, size: PlannedSize, sampled: Sampled | None, membership: Membership,
              layout: Layout, checker: Checker | None = None, error: str = "") -> Row:
    plan = membership.plan
    factor = collective.busbw_factor(plan.size)
    measured: dict[str, Any] = dict.fromkeys(("time_us_p50", "time_us_p95", "time_us_min", "time_us_max",
                                              "time_us_mean", "algbw_gbps", "busbw_gbps"))
    measured.update(iters=0, samples=0)
    if sampled is not None:
        scale = collective.time_scale(layout)  # ping_pong: half a round trip; windows: per message
        samples_us = _microseconds([value * scale for value in sampled.slowest])
        summary = summarize(samples_us)
        algbw = algbw_gbps(size.used, summary.p50 * 1e-6)
        members = [list(ranks) for ranks in plan.members]
        skews = arrival_skews(sampled.per_rank_arrivals, members) if sampled.per_rank_arrivals else []
        rank_means = [sum(values) / len(values) * scale
                      for values in map(_microseconds, sampled.per_rank_seconds)]
        measured.update(
            iters=sampled.ops, samples=len(samples_us), time_us_p50=summary.p50, time_us_p95=summary.p95,
            time_us_p99=summary.p99, time_us_min=summary.min, time_us_max=summary.max,
            time_us_mean=summary.mean, time_us_stdev=summary.stdev, time_us_cv=summary.cv,
            ci95_rel=summary.ci95_rel, algbw_gbps=algbw, busbw_gbps=None if algbw is None else algbw * factor,
            skew_us_max=_microseconds([max(skews)])[0] if skews else None,
            slowest_rank=last_to_arrive(skews, members) if skews else None,
            samples_us=samples_us, rank_mean_us=rank_means, rank_skew_us=_microseconds(skews))
    return Row(
        collective=collective.name,
        backend=backend.name,
        device=backend.device.type,
        world_size=backend.world_size,
        dtype=dtype,
        mode=mode,
        op=op,
        size_bytes=size.used,
        requested_bytes=size.requested,
        count_per_rank=size.count_per_rank,
        warmup=config.warmup,
        busbw_factor=factor,
        group_size=plan.size,
        group_layout=plan.layout,
        group_count=plan.count,
        placement=placement,
        wrong=None if checker is None else checker.wrong,
        first_wrong="" if checker is None else checker.first_wrong,
        error=error,
        benchmark=config.name,
        root=config.root if collective.rooted else -1,
        **measured,
    )
