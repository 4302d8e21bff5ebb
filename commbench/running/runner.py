"""The sweep: collectives x dtypes x ops x placements x sizes x modes -> rows.

The runner reads descriptors from the registry and issues each through its descriptor; it has no
per-collective branches. Buffers are allocated and filled once per size, before any timed region, and
released before the next size.

With sub-communicators every group runs the same collective at the same size at once; a rank's buffers,
root and peer are those of its group (n = the group size). Before each size every rank checks in
(Backend.check_in): a rank that does not arrive is named at the deadline instead of hanging a
collective, and a stop asked for by a signal on any rank is agreed on by all, between sizes.

Outside every timed region, and in this order for each size: every rank allocates its buffers and the
ranks agree that all of them could; per mode, one probe op is issued and completed and the ranks agree
that it ran everywhere (an op or dtype the backend rejects becomes a row with an ``error``, and the sweep
goes on); warm-up (--warmup ops; with adaptive counts no more than fit WARMUP_SHARE of --time-per-size
at the probe's time, the probe being the first); the timed iterations, with --check a checked op after
them (and after every --check-every timed ops), its buffers refilled before and zeroed after. Between
sizes the allocator's cache goes back to the device.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from commbench.backends.base import Backend, CollectiveArgs
from commbench.config.sweep import RunConfig
from commbench.core.devices import MemoryBudget
from commbench.core.dtypes import torch_dtype
from commbench.core.groups import Membership, world_plan
from commbench.core.sizes import format_size
from commbench.errors import RunError, Terminated, UsageError, brief, failures_named
from commbench.measure.check import SizeChecker
from commbench.measure.collectives import Buffers, Layout
from commbench.measure.planning import PlannedSize, SizeLimits, TablePlan, memory_need, plan_tables
from commbench.measure.sampling import Interlude, IterationBudget, Sampled, SamplingPolicy, collect
from commbench.measure.timing import BoundOp, graph_replay_op, warm_up, warm_up_count
from commbench.measure.values import CheckValues
from commbench.provenance.verdicts import RowContext
from commbench.results.model import Row, describe_row
from commbench.results.passes import soak_lines
from commbench.results.rows import make_row
from commbench.running.soak import repeat_until
from commbench.writers.output import Output

WARMUP_SHARE = 0.2  # adaptive counts: warm-up ops stop once they would take this share of --time-per-size


def _no_stop() -> int:
    return 0


@dataclass(frozen=True)
class Session:
    """What launch sets up once for a rank besides the backend: the sub-communicator it measures in,
    the stop requests (signals) that every rank agrees on between sizes, the memory budget the ranks
    agreed on, every rank's host name, and (tests only) a size this rank leaves out of its sweeps, as a
    rank whose sweep diverged would."""

    membership: Membership
    stop_requested: Callable[[], int] = _no_stop
    skipped_size: int | None = None
    row_context: RowContext | None = None  # provenance columns and verdicts (commbench.provenance)
    memory: MemoryBudget | None = None  # what a rank may fill when --max-memory does not say
    hostnames: tuple[str, ...] = ()  # by rank (fabric groups ranks by host)

    @classmethod
    def world(cls, backend: Backend) -> "Session":
        return cls(Membership(world_plan(backend.world_size), None, backend.rank))


def sampling_policy(config: RunConfig) -> SamplingPolicy:
    return SamplingPolicy(fixed_iters=config.iters, time_per_size=config.time_per_size,
                          min_iters=config.min_iters, max_iters=config.max_iters,
                          precision=config.precision, barrier_per_iter=config.barrier == "per-iter",
                          cuda_graph_replays=config.cuda_graph)


def run_benchmarks(configs: list[RunConfig], backend: Backend, output: Output,
                   session: Session | None = None) -> list[Row]:
    """A run: its benchmarks (one, or a sweep file's list) in order, in one process group; with
    --duration or --repeat, again and again (a soak), then what the passes show."""
    setup = configs[0].launch

    def one_pass(into: Output) -> list[Row]:
        return [row for config in configs for row in run_sweep(config, backend, into, session)]

    if setup.duration_s is None and setup.passes is None:
        return one_pass(output)
    rows = repeat_until(setup.duration_s, one_pass, output, backend, passes=setup.passes)
    for line in soak_lines(rows):
        output.note(line)
    return rows


def run_sweep(config: RunConfig, backend: Backend, output: Output, session: Session | None = None
              ) -> list[Row]:
    """Every row of the sweep, reported to ``output`` as each finishes.

    ``session.stop_requested`` returns the signal number a user sent this rank (0: none); the sweep stops
    at the next size boundary that every rank reaches, raising Terminated on all of them.
    """
    session = session or Session.world(backend)
    plan = session.membership.plan
    config.check_span(plan.size, whole_world=plan.is_world)
    tables, notes = plan_tables(config, plan.size, session.memory)
    if not any(table.sizes for table in tables):  # the ranks' memory refused every size
        raise UsageError(f"nothing to measure at {plan.size} ranks: {notes[0] if notes else 'no size fits'}")
    for text in notes:
        output.note(text)
    output.plan(sum(table.step_count() for table in tables))
    policy = sampling_policy(config)
    all_rows: list[Row] = []
    for table in tables:
        budgets = {mode: IterationBudget(policy) for mode in table.modes}
        table_rows: list[Row] = []
        for size in table.sizes:
            if size.requested == session.skipped_size:
                continue
            point = SizePoint(config, backend, table, size, session.membership, session.row_context,
                              session.memory)
            _check_in(point, point.label(), session.stop_requested)
            for row in measure_size(point, budgets, output):
                output.row(row)
                if row.wrong:
                    output.note(f"{describe_row(row)}: {row.wrong} wrong elements, first at "
                                f"{row.first_wrong}")
                table_rows.append(row)
            backend.free_cached_memory()  # the size's buffers are gone: nothing cached for the next
        output.table_done(table_rows)
        all_rows.extend(table_rows)
    # Every rank has finished measuring: a stop asked for during the last size has nothing left to stop.
    if tables:
        _check_in(SizePoint(config, backend, tables[-1], PlannedSize(0, 0, 0), session.membership),
                  "the end of the sweep", _no_stop)
    return all_rows


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
        if any(row.op == "premul_sum" and row.dtype == "bfloat16" and row.backend == "nccl" for row in wrong):
            problems.append(PREMUL_BFLOAT16_HINT)
    return "; ".join(problems) or None


# A fault of the stack, not of commbench: the GPU check found it on torch 2.11 with NCCL 2.28.9.
PREMUL_BFLOAT16_HINT = (
    "bfloat16 premul_sum: torch's NCCL backend may hand NCCL the factor as a 4-byte float that NCCL reads "
    "as 2 bytes, so a power of two reads as 0 (pytorch/pytorch#190745, seen in torch 2.11); "
    "scripts/premul_probe.py asks plain torch")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


@dataclass(frozen=True)
class SizePoint:
    """One size of one table, as this rank measures it: the run's settings, the backend, what is
    measured and the sub-communicator it is measured in."""

    config: RunConfig
    backend: Backend
    table: TablePlan
    size: PlannedSize
    membership: Membership
    row_context: RowContext | None = None
    memory: MemoryBudget | None = None  # the default budget (--max-memory, when given, comes first)

    @property
    def placement(self) -> str:
        return self.table.placement or self.table.collective.default_placement

    def layout(self) -> Layout:
        size, config = self.size, self.config
        return Layout(size.count_per_rank, self.membership.plan.size, self.membership.group_rank, config.root,
                      torch_dtype(self.table.dtype), self.backend.device, self.placement, size.chunk_counts,
                      size.pair_counts, config.p2p_window)

    def label(self) -> str:
        """What is about to be measured, as messages and check-ins name it."""
        detail = ", ".join(part for part in (self.table.dtype, self.table.op, self.table.placement) if part)
        return f"{self.table.collective.name} ({detail}) at size {format_size(self.size.used)}"

    def failed_in(self, mode: str) -> str:
        table = self.table
        detail = ", ".join(part for part in (table.dtype, table.op, self.placement, mode) if part)
        return (f"{table.collective.name} ({detail}) failed at size {format_size(self.size.used)} "
                f"on rank {self.backend.rank}")

    def row(self, mode: str, sampled: Sampled | None, layout: Layout, checker: SizeChecker | None = None,
            error: str = "") -> Row:
        table, size, plan, backend = self.table, self.size, self.membership.plan, self.backend
        collective = table.collective
        return make_row(
            sampled, time_scale=collective.time_scale(layout),
            members=[list(ranks) for ranks in plan.members],
            collective=collective.name, backend=backend.name, device=backend.device.type,
            world_size=backend.world_size, dtype=table.dtype, mode=mode, op=table.op, size_bytes=size.used,
            requested_bytes=size.requested, count_per_rank=size.count_per_rank, warmup=self.config.warmup,
            busbw_factor=collective.busbw_factor(plan.size), group_size=plan.size, group_layout=plan.layout,
            group_count=plan.count, placement=self.placement,
            wrong=None if checker is None else checker.wrong,
            first_wrong="" if checker is None else checker.first_wrong, error=error,
            benchmark=self.config.name, root=self.config.root if collective.rooted else -1,
            context=self.row_context)


def _check_in(point: SizePoint, label: str, stop_requested: Callable[[], int]) -> None:
    # The signature holds what every rank must agree on for the step to be the same collective work.
    config, plan = point.config, point.membership.plan
    signature = (f"{label}|{'+'.join(config.modes)}|{config.warmup}|{config.iters}|{config.barrier}|"
                 f"{config.cuda_graph}|{plan.layout}:{plan.count}x{plan.size}")
    stop = point.backend.check_in(label, signature, stop_requested())
    if stop:
        raise Terminated(stop)


def _attempt(action: Callable[[], Any]) -> tuple[Any, str | None]:
    """``action()``'s value, or the first line of the error it raised."""
    try:
        return action(), None
    except (RunError, UsageError, Terminated):
        raise
    except AllocationFailed as exc:  # already one line, naming what a reader needs
        return None, str(exc)
    except Exception as exc:
        return None, brief(exc)


def agree(backend: Backend, error: str | None) -> str | None:
    """Every rank learns whether any rank failed, and the first failure: ranks then act alike."""
    return agree_with_time(backend, error, 0.0)[0]


def agree_with_time(backend: Backend, error: str | None, seconds: float) -> tuple[str | None, float]:
    """``agree``, and the largest of the ranks' ``seconds``, in the same gather."""
    flags = backend.all_gather_floats([0.0 if error is None else 1.0, seconds])
    slowest = max(value for _, value in flags)
    if not any(flag for flag, _ in flags):
        return None, slowest
    texts = backend.all_gather_object(error)
    failing = [rank for rank, text in enumerate(texts) if text is not None]
    if len(failing) == len(texts) and len(set(texts)) == 1:
        return f"{texts[0]} (on every rank)", slowest
    others = len(failing) - 1
    return f"rank {failing[0]}: {texts[failing[0]]}" + (f" (and {_count(others, 'other rank')})"
                                                         if others else ""), slowest


def _allocate(point: SizePoint, layout: Layout) -> Buffers:
    try:
        buffers = point.table.collective.build(layout)
    except (RuntimeError, MemoryError) as exc:  # torch's out-of-memory errors are RuntimeErrors
        raise AllocationFailed(out_of_memory(point, exc)) from exc
    for tensor in buffers.tensors():
        tensor.zero_()  # zeros: repeated in-place reductions stay finite in every dtype
    return buffers


class AllocationFailed(Exception):
    """A size's buffers could not be allocated; the message names the size, the need and the budget."""


def out_of_memory(point: SizePoint, exc: BaseException) -> str:
    """'could not allocate 1 GiB: needs 1.5 GiB per rank (...); 1.2 GiB per rank, 90% of ...;
    --max-memory not set'."""
    config, table = point.config, point.table
    limits = SizeLimits(point.membership.plan.size, table.dtype, config.root, None, None,
                        point.backend.device.type)
    need = memory_need(table.collective, point.size, limits)
    if config.max_memory is not None:
        within = f"within --max-memory {format_size(config.max_memory)}"
    elif point.memory is not None:
        within = f"{point.memory.describe()}; --max-memory not set"
    else:
        within = "available memory unknown; --max-memory not set"
    return (f"out of memory allocating size {format_size(point.size.used)}: it needs {need.describe()}; "
            f"{within} ({type(exc).__name__})")


def _probe(op: BoundOp, mode: str) -> float:
    """One untimed op, issued as ``mode`` issues them and completed; its seconds on the host."""
    op.args.async_op = mode == "async"
    started = time.perf_counter()
    try:
        op()
        op.backend.complete(op.args)
    finally:
        op.args.async_op = False
        op.args.wait_list.clear()
    return time.perf_counter() - started


def measure_size(point: SizePoint, budgets: dict[str, IterationBudget], output: Output) -> list[Row]:
    """One row per mode for one size; the buffers are this call's locals, released when it returns."""
    backend, table = point.backend, point.table
    layout = point.layout()
    if point.config.cuda_graph and not table.collective.capturable:
        why = f"{table.collective.name} blocks the host until every rank arrives: a CUDA graph cannot hold it"
        return [point.row(mode, None, layout, error=why) for mode in table.modes]
    # All ranks agree before the first collective: a rank that cannot allocate (out of memory) makes
    # an error row on every rank instead of leaving the others waiting inside a collective.
    with failures_named(lambda: point.failed_in(table.modes[0])):
        buffers, error = _attempt(lambda: _allocate(point, layout))
        error = agree(backend, error)
    if error is not None:
        return [point.row(mode, None, layout, error=error) for mode in table.modes]
    args = CollectiveArgs(process_group=point.membership.process_group, op=table.op or "sum",
                          root=point.config.root, premul_factor=point.config.premul_factor,
                          **buffers.call_options())
    op = BoundOp(backend, args, table.collective.issue)
    rows = []
    for mode in table.modes:
        output.working(f"{table.collective.name} {table.dtype} {format_size(point.size.used)} {mode}")
        with failures_named(lambda: point.failed_in(mode)):  # noqa: B023 - used before the loop moves on
            seconds, error = _attempt(lambda: _probe(op, mode))  # noqa: B023 - called at once
            error, slowest = agree_with_time(backend, error, seconds or 0.0)
            if error is not None:
                rows.append(point.row(mode, None, layout, error=error))
                continue
            rows.append(_measure_mode(point, op, (layout, buffers), mode, budgets[mode], slowest))
    return rows


def _measure_mode(point: SizePoint, op: BoundOp, built: tuple[Layout, Buffers], mode: str,
                  budget: IterationBudget, probe_seconds: float) -> Row:
    """Warm-up, the timed ops (with --check, checked ops between and after them) and the row."""
    config = point.config
    layout, buffers = built
    checker = interlude = None
    op.args.async_op = mode == "async"
    share = None if config.iters is not None else WARMUP_SHARE * config.time_per_size
    warm_up(op, warm_up_count(config.warmup, probe_seconds, share))
    if config.check:
        values = CheckValues(layout.dtype, point.table.op, layout.world_size, point.backend.device,
                             config.premul_factor)
        # with CUDA graphs the checked op is a replay of a captured one, as the timed ops are
        checked_op = graph_replay_op(op) if config.cuda_graph else op
        checker = SizeChecker(checked_op, mode, point.table.collective, layout, buffers, values)
        interlude = Interlude(config.check_every or 1 << 62, checker.run)
        op.args.async_op = mode == "async"
    sampled = collect(op, mode, budget, point.size.used, interlude, point.size.window)
    if interlude is not None:
        interlude.finish()  # the checked op after timing
    return point.row(mode, sampled, layout, checker=checker)
