"""The sweep: collectives x dtypes x ops x sizes x modes -> rows.

The runner reads descriptors from the registry and calls the backend method each names; it has no
per-collective branches. Buffers are allocated and filled once per size, before any timed region, and
released before the next size.

With sub-communicators every group runs the same collective at the same size at once; a rank's buffers,
root and peer are those of its group (n = the group size). Before each size every rank checks in
(Backend.check_in): a rank that does not arrive is named at the deadline instead of hanging a
collective, and a stop asked for by a signal on any rank is agreed on by all, between sizes.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.collectives import REGISTRY, Collective, Layout
from commbench.config import RunConfig
from commbench.dtypes import element_size, torch_dtype
from commbench.errors import RunError, Terminated, UsageError, brief
from commbench.groups import Membership, world_plan
from commbench.results import Row
from commbench.sampling import IterationBudget, Sampled, SamplingPolicy, collect
from commbench.sizes import format_size
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


def buffer_bytes(collective: Collective, count_per_rank: int, world_size: int, root: int,
                 dtype: str) -> int:
    """Bytes of the largest rank's buffers for a size, from a build on the meta device (no memory)."""
    layout = Layout(count_per_rank, world_size, root, root, torch_dtype(dtype), torch.device("meta"))
    return sum(tensor.nbytes for tensor in collective.build(layout).tensors())


def plan_sizes(collective: Collective, sizes: list[int], world_size: int, dtype: str,
               max_memory: int | None = None, root: int = 0) -> tuple[list[PlannedSize], list[str]]:
    """The sizes a collective can run for this world size and dtype, and notes on what changed.

    A size is rounded down to whole elements in each rank's chunk; one too small for a single element
    per rank is skipped; two requests that round to the same size run once; one whose buffers would
    exceed ``max_memory`` bytes on a rank is refused before anything is allocated.
    """
    if not collective.sized:
        return [PlannedSize(0, 0, 0)], []
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
    if refused:
        notes.append(f"{where}: refused by --max-memory {format_size(max_memory or 0)} of buffers per "
                     f"rank: {', '.join(refused)}")
    return planned, notes


def sampling_policy(config: RunConfig) -> SamplingPolicy:
    return SamplingPolicy(fixed_iters=config.iters, time_per_size=config.time_per_size,
                          min_iters=config.min_iters, max_iters=config.max_iters,
                          precision=config.precision, barrier_per_iter=config.barrier == "per-iter",
                          cuda_graph_replays=config.cuda_graph)


@dataclass(frozen=True)
class Group:
    """One table's worth of work: a collective, a dtype and an op over the planned sizes."""

    collective: Collective
    dtype: str
    op: str
    sizes: list[PlannedSize]


def plan_groups(config: RunConfig, world_size: int) -> tuple[list[Group], list[str]]:
    """The tables of the sweep; ``world_size`` is the ranks one collective spans (a group's size)."""
    groups: list[Group] = []
    notes: list[str] = []
    for name in config.collectives:
        collective = REGISTRY[name]
        # A collective that moves no data is timed once, not once per dtype.
        for dtype in config.dtypes if collective.sized else config.dtypes[:1]:
            planned, size_notes = plan_sizes(collective, config.sizes, world_size, dtype,
                                             config.max_memory, config.root)
            notes.extend(size_notes)
            for op in config.ops if collective.reduces else [""]:
                groups.append(Group(collective, dtype, op, planned))
    return groups, notes


def _no_stop() -> int:
    return 0


@dataclass(frozen=True)
class Session:
    """What launch sets up once for a rank besides the backend: the sub-communicator it measures in,
    and the stop requests (signals) that every rank agrees on between sizes."""

    membership: Membership
    stop_requested: Callable[[], int] = _no_stop


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
    groups, notes = plan_groups(config, group_size)
    for text in notes:
        output.note(text)
    output.plan(sum(len(group.sizes) for group in groups) * len(config.modes))
    policy = sampling_policy(config)
    all_rows: list[Row] = []
    for group in groups:
        budgets = {mode: IterationBudget(policy) for mode in config.modes}
        group_rows: list[Row] = []
        for size in group.sizes:
            _check_in(config, backend, membership, _step_label(group, size), session.stop_requested)
            for row in measure_size(config, backend, group, size, policy, budgets, output, membership):
                output.row(row)
                group_rows.append(row)
        output.group_done(group_rows)
        all_rows.extend(group_rows)
    # Every rank has finished measuring: a stop asked for during the last size has nothing left to stop.
    _check_in(config, backend, membership, "the end of the sweep", _no_stop)
    return all_rows


def _step_label(group: Group, size: PlannedSize) -> str:
    """What is about to be measured, as messages name it."""
    detail = f"{group.dtype}, {group.op}" if group.op else group.dtype
    return f"{group.collective.name} ({detail}) at size {format_size(size.used)}"


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
    membership = membership or Membership(world_plan(backend.world_size), None, backend.rank)
    rank = backend.rank
    mode = config.modes[0]
    try:
        layout = Layout(size.count_per_rank, membership.plan.size, membership.group_rank, config.root,
                        torch_dtype(dtype), backend.device)
        buffers = collective.build(layout)
        for tensor in buffers.tensors():
            tensor.zero_()  # zeros: repeated in-place reductions stay finite in every dtype
        args = CollectiveArgs(input=buffers.input, output=buffers.output, group=membership.handle,
                              op=op or "sum", root=config.root, peer=buffers.peer)
        call = getattr(backend, collective.method)
        rows = []
        for mode in config.modes:
            output.working(f"{collective.name} {dtype} {format_size(size.used)} {mode}")
            args.async_op = mode == "async"
            warm_up(call, backend, args, config.warmup)
            sampled = collect(call, backend, args, mode, policy, budgets[mode], size.used)
            rows.append(_make_row(config, backend, collective, dtype, op, mode, size, sampled, membership))
        return rows
    except (RunError, UsageError):
        raise
    except Exception as exc:  # a backend error: name what failed, where
        raise RunError(f"{collective.name} ({dtype}{', ' + op if op else ''}, {mode}) failed at size "
                       f"{format_size(size.used)} on rank {rank}: {brief(exc)}") from exc


def _microseconds(seconds: list[float]) -> list[float]:
    return [round(value * 1e6, 3) for value in seconds]  # the clocks resolve nanoseconds


def _make_row(config: RunConfig, backend: Backend, collective: Collective, dtype: str, op: str,
              mode: str, size: PlannedSize, sampled: Sampled, membership: Membership) -> Row:
    samples_us = _microseconds(sampled.slowest)
    summary = summarize(samples_us)
    plan = membership.plan
    factor = collective.busbw_factor(plan.size)
    algbw = algbw_gbps(size.used, summary.p50 * 1e-6)
    members = [list(ranks) for ranks in plan.members]
    skews = arrival_skews(sampled.per_rank_arrivals, members) if sampled.per_rank_arrivals else []
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
        iters=sampled.ops,
        samples=len(samples_us),
        warmup=config.warmup,
        time_us_p50=summary.p50,
        time_us_p95=summary.p95,
        time_us_p99=summary.p99,
        time_us_min=summary.min,
        time_us_max=summary.max,
        time_us_mean=summary.mean,
        time_us_stdev=summary.stdev,
        time_us_cv=summary.cv,
        ci95_rel=summary.ci95_rel,
        algbw_gbps=algbw,
        busbw_gbps=None if algbw is None else algbw * factor,
        busbw_factor=factor,
        group_size=plan.size,
        group_layout=plan.layout,
        group_count=plan.count,
        skew_us_max=_microseconds([max(skews)])[0] if skews else None,
        slowest_rank=last_to_arrive(skews, members) if skews else None,
        samples_us=samples_us,
        rank_mean_us=[sum(values) / len(values) for values in map(_microseconds, sampled.per_rank_seconds)],
        rank_skew_us=_microseconds(skews),
        benchmark=config.name,
        root=config.root if collective.rooted else -1,
    )
