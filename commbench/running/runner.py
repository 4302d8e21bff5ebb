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
from dataclasses import dataclass, field
from typing import Any

from commbench.backends.base import Backend, CollectiveArgs
from commbench.config.sweep import RunConfig
from commbench.core.devices import MemoryBudget
from commbench.core.dtypes import torch_dtype
from commbench.core.groups import Membership, world_plan
from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.errors import Terminated, UsageError, failures_named
from commbench.measure.check import SizeChecker
from commbench.measure.collectives import Buffers, Layout
from commbench.measure.impls import REFERENCE_IMPL
from commbench.measure.impls import REGISTRY as IMPLS
from commbench.measure.planning import PlannedSize, TablePlan, plan_tables
from commbench.measure.sampling import Interlude, IterationBudget, Sampled, SamplingPolicy, collect
from commbench.measure.timing import BoundOp, graph_replay_op, warm_up, warm_up_count
from commbench.measure.values import CheckValues
from commbench.provenance.verdicts import RowContext
from commbench.results.model import Row, describe_row
from commbench.results.passes import soak_lines
from commbench.results.rows import make_row
from commbench.running.agreement import agree, agree_with_time, attempt
from commbench.running.availability import settle
from commbench.running.buffers import allocate
from commbench.running.implementations import (
    UNAVAILABLE,
    ImplFacts,
    ImplRun,
    ImplTable,
    register,
    row_fields,
    size_refusal,
)
from commbench.running.soak import repeat_until
from commbench.writers.output import Output

WARMUP_SHARE = 0.2  # adaptive counts: warm-up ops stop once they would take this share of --time-per-size


def _no_stop() -> int:
    return 0


@dataclass(frozen=True)
class Session:
    """What launch sets up once for a rank besides the backend: the sub-communicator it measures in,
    the stop requests (signals) that every rank agrees on between sizes, the memory budget the ranks
    agreed on and every rank's host name."""

    membership: Membership
    stop_requested: Callable[[], int] = _no_stop
    row_context: RowContext | None = None  # provenance columns and verdicts (commbench.provenance)
    memory: MemoryBudget | None = None  # what a rank may fill when --max-memory does not say
    hostnames: tuple[str, ...] = ()  # by rank (fabric groups ranks by host)
    # what was asked for and not measured (sizes the memory budget refused, an implementation named on
    # its own that cannot run here), each said once: the run then exits 1 (not_measured)
    unmeasured: list[str] = field(default_factory=list)

    def not_measured(self, what: str) -> None:
        if what not in self.unmeasured:
            self.unmeasured.append(what)

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
    --duration or --repeat, again and again (a soak), then what the passes show. First, once, what the
    backend cannot run here is found and left out (availability.py)."""
    setup = configs[0].launch
    configs = [settle(config, backend, output) for config in configs]

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
        raise UsageError(f"nothing to measure at {plural(plan.size, 'rank')}: "
                         f"{notes[0] if notes else 'no size fits'}")
    for text in notes:
        output.note(text)
    for table in tables:
        for refused in table.refused:
            session.not_measured(refused)
    output.plan(sum(table.step_count() for table in tables))
    policy = sampling_policy(config)
    all_rows: list[Row] = []
    impls = ImplRun(backend, session.membership)
    compared: list[Row] = []  # the rows of one collective, dtype, op and placement over implementations
    try:
        for table in tables:
            table_rows = _run_table(config, backend, table, session, impls, policy, output)
            if compared and _comparable(compared[0]) != _comparable(table_rows[0] if table_rows else None):
                _implementations_done(compared, output)
                compared = []
            compared.extend(table_rows)
            all_rows.extend(table_rows)
        _implementations_done(compared, output)
    finally:
        impls.close()
    for row in all_rows:
        if row.impl_status == UNAVAILABLE and not _left_out_by_a_wildcard(config, row):
            session.not_measured(f"{describe_row(row)}: unavailable: {row.error}")
    # Every rank has finished measuring: a stop asked for during the last size has nothing left to stop.
    if tables:
        _check_in(SizePoint(config, backend, tables[-1], PlannedSize(0, 0, 0), session.membership),
                  "the end of the sweep", _no_stop)
    return all_rows


def _run_table(config: RunConfig, backend: Backend, table: TablePlan, session: Session, impls: ImplRun,
               policy: SamplingPolicy, output: Output) -> list[Row]:
    """One table's rows, each reported as it is measured, then the table."""
    budgets = {mode: IterationBudget(policy) for mode in table.modes}
    impl = impls.table(table)
    table_rows: list[Row] = []
    for size in table.sizes:
        point = SizePoint(config, backend, table, size, session.membership, session.row_context,
                          session.memory, impl)
        _check_in(point, point.label(), session.stop_requested)
        for row in measure_size(point, budgets, output):
            output.row(row)
            if row.wrong:
                output.note(f"{describe_row(row)}: {plural(row.wrong, 'wrong element')}, first at "
                            f"{row.first_wrong}")
            table_rows.append(row)
        backend.free_cached_memory()  # the size's buffers are gone: nothing cached for the next
    output.table_done(table_rows)
    return table_rows


def _comparable(row: Row | None) -> tuple | None:
    """What the tables of one comparison share: all but the implementation."""
    return None if row is None else (row.benchmark, row.collective, row.dtype, row.op, row.placement)


def _implementations_done(rows: list[Row], output: Output) -> None:
    """Implementations side by side, when at least two of them measured something."""
    measured = {row.impl for row in rows if row.impl_status != UNAVAILABLE}
    if len(measured) > 1:
        output.implementations_done(rows)


def _left_out_by_a_wildcard(config: RunConfig, row: Row) -> bool:
    """Whether an unavailable row came in through a wildcard, which may leave out, by name, what cannot
    run here: --impl all (an implementation's refusal) or --collective all (the collective's own)."""
    if row.impl and row.impl != REFERENCE_IMPL:
        return set(IMPLS) <= set(config.impls)
    return config.all_collectives


def not_measured(unmeasured: list[str]) -> str | None:
    """Why a run that measured the rest exits 1: what was asked for and not measured; None when all was."""
    if not unmeasured:
        return None
    return f"asked for but not measured: {plural(len(unmeasured), 'point')} (first: {unmeasured[0]})"


def sweep_failure(rows: list[Row]) -> str | None:
    """Why a finished sweep exits 1: rows that failed or held wrong values; None when all is well."""
    failed = [row for row in rows if row.error and row.impl_status != UNAVAILABLE]
    wrong = [row for row in rows if row.wrong]
    problems = []
    if failed:
        first = failed[0]
        problems.append(f"{plural(len(failed), 'row')} failed (first: {describe_row(first)}: "
                        f"{first.error})")
    if wrong:
        first = wrong[0]
        problems.append(f"{plural(len(wrong), 'row')} had wrong values (first: {describe_row(first)}: "
                        f"{plural(first.wrong or 0, 'wrong element')}, the first at {first.first_wrong})")
        if any(row.op == "premul_sum" and row.dtype == "bfloat16" and row.backend == "nccl" for row in wrong):
            problems.append(PREMUL_BFLOAT16_HINT)
    return "; ".join(problems) or None


# A fault of the stack, not of commbench: the GPU check found it on torch 2.11 with NCCL 2.28.9.
PREMUL_BFLOAT16_HINT = (
    "bfloat16 premul_sum: torch's NCCL backend may hand NCCL the factor as a 4-byte float that NCCL reads "
    "as 2 bytes, so a power of two reads as 0 (pytorch/pytorch#190745, seen in torch 2.11); "
    "scripts/premul_probe.py asks plain torch")


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
    impl: ImplTable | None = None  # the table's implementation as set up on this rank

    @property
    def placement(self) -> str:
        return self.table.placement or self.table.collective.default_placement

    @property
    def how(self) -> str:
        """' by symm-one-shot' for an implementation other than the reference, as messages name it."""
        return "" if self.table.impl == REFERENCE_IMPL else f" by {self.table.impl}"

    def layout(self, allocate: Any = None) -> Layout:
        size, config = self.size, self.config
        return Layout(size.count_per_rank, self.membership.plan.size, self.membership.group_rank, config.root,
                      torch_dtype(self.table.dtype), self.backend.device, self.placement, size.chunk_counts,
                      size.pair_counts, config.p2p_window, allocate)

    def label(self) -> str:
        """What is about to be measured, as messages and check-ins name it."""
        detail = ", ".join(part for part in (self.table.dtype, self.table.op, self.table.placement) if part)
        return f"{self.table.collective.name}{self.how} ({detail}) at size {format_size(self.size.used)}"

    def failed_in(self, mode: str) -> str:
        table = self.table
        detail = ", ".join(part for part in (table.dtype, table.op, self.placement, mode) if part)
        return (f"{table.collective.name}{self.how} ({detail}) failed at size {format_size(self.size.used)} "
                f"on rank {self.backend.rank}")

    def row(self, mode: str, sampled: Sampled | None, layout: Layout, checker: SizeChecker | None = None,
            error: str = "", facts: ImplFacts | None = None) -> Row:
        table, size, plan, backend = self.table, self.size, self.membership.plan, self.backend
        collective = table.collective
        impl = row_fields(self.impl, facts) if self.impl is not None else {}
        if facts is not None and facts.status == UNAVAILABLE:  # refused at this size: not a failure
            impl.update(impl_status=UNAVAILABLE, impl_note="")
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
            output_digest="" if checker is None else checker.digest, context=self.row_context, **impl)


def _check_in(point: SizePoint, label: str, stop_requested: Callable[[], int]) -> None:
    # The signature holds what every rank must agree on for the step to be the same collective work.
    config, plan = point.config, point.membership.plan
    signature = (f"{label}|{'+'.join(config.modes)}|{config.warmup}|{config.iters}|{config.barrier}|"
                 f"{config.cuda_graph}|{plan.layout}:{plan.count}x{plan.size}")
    stop = point.backend.check_in(label, signature, stop_requested())
    if stop:
        raise Terminated(stop)


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
    refused = _refusal(point)
    if refused is not None:
        return [point.row(mode, None, point.layout(), error=refused, facts=ImplFacts(UNAVAILABLE))
                for mode in table.modes]
    state = point.impl.state if point.impl is not None else None
    scope, error = attempt(state.size_scope) if state is not None else (None, None)
    error = agree(backend, error) if state is not None else None
    if error is not None:
        return [point.row(mode, None, point.layout(), error=f"set-up failed: {error}",
                          facts=ImplFacts(UNAVAILABLE)) for mode in table.modes]
    try:
        return _measure_buffers(point, budgets, output, scope)
    finally:
        if scope is not None:
            attempt(scope.release)


def _refusal(point: SizePoint) -> str | None:
    """Why this size runs nothing: a CUDA graph cannot hold the collective, the implementation
    cannot run here, or not at this size."""
    table = point.table
    if point.config.cuda_graph and not table.collective.capturable:
        return (f"{table.collective.name} blocks the host until every rank arrives: a CUDA graph cannot "
                "hold it")
    if point.impl is None:
        return None
    if point.impl.refusal is not None:
        return point.impl.refusal
    return size_refusal(point.impl, table, point.size, point.membership.plan.size)


def _measure_buffers(point: SizePoint, budgets: dict[str, IterationBudget], output: Output,
                     scope: Any) -> list[Row]:
    backend, table = point.backend, point.table
    layout = point.layout(None if scope is None else scope.allocate)
    # All ranks agree before the first collective: a rank that cannot allocate (out of memory), or
    # register its buffers, makes an error row on every rank instead of leaving the others waiting.
    with failures_named(lambda: point.failed_in(table.modes[0])):
        buffers, error = attempt(lambda: allocate(point, layout))
        error = agree(backend, error)
        if error is None and scope is not None:
            splits = buffers.input_splits or [layout.count_per_rank] * layout.world_size
            registered, error = attempt(lambda: register(backend, scope, buffers.tensors(), splits))
            error = agree(backend, error)
    if error is not None:
        return [point.row(mode, None, layout, error=error) for mode in table.modes]
    facts = ImplFacts() if scope is None else ImplFacts(register_ms=round(registered.seconds * 1e3, 3),
                                                        setup_bytes=registered.bytes_taken)
    args = CollectiveArgs(process_group=point.membership.process_group, op=table.op or "sum",
                          root=point.config.root, premul_factor=point.config.premul_factor,
                          **buffers.call_options())
    if scope is not None:
        args.process_group, args.path = point.impl.state.group, registered.binding
    issue = point.impl.impl.issue_for(table.collective.name, table.collective.issue) if point.impl \
        else table.collective.issue
    op = BoundOp(backend, args, issue)
    rows = []
    for mode in table.modes:
        output.working(f"{table.collective.name}{point.how} {table.dtype} {format_size(point.size.used)} "
                       f"{mode}")
        with failures_named(lambda: point.failed_in(mode)):  # noqa: B023 - used before the loop moves on
            seconds, error = attempt(lambda: _probe(op, mode))  # noqa: B023 - called at once
            error, slowest = agree_with_time(backend, error, seconds or 0.0)
            if error is not None:
                rows.append(point.row(mode, None, layout, error=error))
                continue
            if point.config.profile_kernels and not facts.profiled:  # once per size, on every rank
                _profile(point, op, facts)
            rows.append(_measure_mode(point, op, (layout, buffers), mode, budgets[mode], slowest, facts))
    return rows


def _profile(point: SizePoint, op: BoundOp, facts: ImplFacts) -> None:
    """--profile-kernels: one more op, sync, under the profiler; its names judge the path."""
    facts.kernels, facts.profiled = point.backend.kernel_names(lambda: _probe(op, "sync")), True
    if point.impl is not None:
        facts.judge(point.impl, point.membership.plan.size)


def _measure_mode(point: SizePoint, op: BoundOp, built: tuple[Layout, Buffers], mode: str,
                  budget: IterationBudget, probe_seconds: float, facts: ImplFacts | None = None) -> Row:
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
    return point.row(mode, sampled, layout, checker=checker, facts=facts)
