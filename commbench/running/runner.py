"""The sweep: collectives x dtypes x ops x placements x sizes x modes -> rows.

The runner reads descriptors from the registry and issues each through its descriptor; it has no
per-collective branches. Buffers are allocated and filled once per size, before any timed region, and
released before the next size.

With sub-communicators every group runs the same collective at the same size at once; a rank's buffers,
root and peer are those of its group (n = the group size). Before each size every rank checks in
(Backend.check_in): a rank that does not arrive is named at the deadline instead of hanging a
collective, and a stop asked for by a signal on any rank is agreed on by all, between sizes.

Implementations that need torch's symmetric memory on another backend than this process's
(measure.impls.process_sets) are measured first, set by set, by rank processes of their own
(rank_sets.py, through ``Session.rank_sets``); their rows are then reported in their tables' places, so
the tables and their side-by-side comparisons come out in the same order either way.

Outside every timed region, and in this order for each size: every rank allocates its buffers and the
ranks agree that all of them could; per mode, one probe op is issued and completed and the ranks agree
that it ran everywhere (an op or dtype the backend rejects becomes a row with an ``error``, and the sweep
goes on); warm-up (--warmup ops; with adaptive counts until the op's time is steady, see
measure/sampling.py); the timed iterations, with --check a checked op after
them (and after every --check-every timed ops), its buffers refilled before and zeroed after. Between
sizes the allocator's cache goes back to the device.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from commbench.backends.base import Backend, CollectiveArgs
from commbench.config.sweep import RunConfig
from commbench.core.devices import MemoryBudget
from commbench.core.dtypes import torch_dtype
from commbench.core.groups import Membership, world_plan
from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.errors import Terminated, UsageError, failures_named
from commbench.measure.cache import Rotation, misaligned, then_meet
from commbench.measure.check import SizeChecker
from commbench.measure.collectives import Layout
from commbench.measure.impls import REFERENCE_IMPL, REGISTRY, process_sets
from commbench.measure.memory import SizeMemory
from commbench.measure.planning import PlannedSize, TablePlan, plan_tables
from commbench.measure.sampling import Interlude, Sampled, SamplingPolicy, collect, warm_up_for
from commbench.measure.timing import BoundOp, graph_replay_op
from commbench.measure.values import CheckValues
from commbench.provenance.verdicts import RowContext
from commbench.results.columns import values_of
from commbench.results.model import Row, describe_row
from commbench.results.passes import soak_lines
from commbench.results.rows import Measuring, make_row, utc_stamp
from commbench.running.agreement import agree, agree_with_time, attempt
from commbench.running.availability import settle
from commbench.running.buffers import SizeBuffers, account_memory, allocate_sets
from commbench.running.contention import measure_contending, open_contention
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

UNSTAMPED = Measuring()  # a row made without a probe: it began when it is made


def _no_stop() -> int:
    return 0


class SetRunner(Protocol):
    def run(self, config: RunConfig, session: "Session") -> list[Row]:
        """``config``'s rows, measured by rank processes of their own (raises with why they could not)."""


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
    # starts rank processes of their own for an implementation set (rank_sets.RankSets); None: cannot
    rank_sets: "SetRunner | None" = None
    contention: Any = None  # a sweep's racing communicators and compute (running/contention.py), or None

    @classmethod
    def world(cls, backend: Backend) -> "Session":
        return cls(Membership(world_plan(backend.world_size), None, backend.rank))


def sampling_policy(config: RunConfig) -> SamplingPolicy:
    return SamplingPolicy(fixed_iters=config.iters, time_per_size=config.time_per_size,
                          min_iters=config.min_iters, max_iters=config.max_iters,
                          precision=config.precision, barrier_per_iter=config.barrier == "per-iter",
                          cuda_graph_replays=config.cuda_graph, warmup=config.warmup)


def run_benchmarks(configs: list[RunConfig], backend: Backend, output: Output, session: Session) -> list[Row]:
    """A run: its benchmarks (one, or a sweep file's list) in order, in one process group; with
    --duration or --repeat, again and again (a soak), then what the passes show. First, once, what the
    backend cannot run here is found and left out (availability.py)."""
    setup = configs[0].launch
    configs = [settle(config, backend, output) for config in configs]

    def one_pass(into: Output) -> list[Row]:
        return [row for config in configs for row in run_sweep(config, backend, into, session)]

    if setup.duration_s is None and setup.passes is None:
        return one_pass(output)
    rows = list(repeat_until(setup.duration_s, one_pass, output, backend, passes=setup.passes))
    output.passes_done(rows)
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
    contention, membership = open_contention(config, backend, session.membership)
    session = replace(session, membership=membership, contention=contention)
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
    all_rows: list[Row] = []
    impls = ImplRun(backend, session.membership, session.hostnames)
    compared: list[Row] = []  # the rows of one collective, dtype, op and placement over implementations
    try:
        elsewhere = _measure_elsewhere(config, tables, impls, session, output)
        for table in tables:
            measured = elsewhere.get(_table_key(table))
            table_rows = _report_table(measured, output) if measured is not None else \
                _run_table(config, backend, table, session, impls, output)
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


def _table_key(table: TablePlan) -> tuple:
    placement = table.placement or table.collective.default_placement
    return (table.collective.name, table.dtype, table.op, placement, table.impl)


def _row_key(row: Row) -> tuple:
    return (row.collective, row.dtype, row.op, row.placement, row.impl)


def _measure_elsewhere(config: RunConfig, tables: list[TablePlan], impls: ImplRun, session: Session,
                       output: Output) -> dict[tuple, list[Row]]:
    """The tables whose implementations need torch's symmetric memory on another backend than this
    process's (process_sets), measured first by rank processes of their own, set by set: their rows by
    table. A set every table of which is refused starts nothing, and a set whose processes failed leaves
    its tables failed (``impls`` says so): those make their rows here, as any refused table does."""
    found: dict[tuple, list[Row]] = {}
    for names in process_sets(config.impls)[1:]:
        runnable = [table for table in tables if table.impl in names and table.sizes
                    and impls.refusal(table) is None]
        if not runnable:
            continue
        listed = ", ".join(names)
        if session.rank_sets is None:
            for table in runnable:
                impls.refuse(table, NO_RANK_SETS)
            continue
        output.note(f"{listed}: measured first, in rank processes of their own (torch's "
                    f"{REGISTRY[names[0]].path.symmetric_backend} symmetric memory cannot share a process "
                    "with the others')")
        rows, error = attempt(lambda: session.rank_sets.run(replace(config, impls=names), session))  # noqa: B023
        error = _set_failure(impls.backend, error)
        for table in runnable:
            if error is not None:
                impls.fail(table, f"the rank processes of {listed} failed: {error}")
            else:
                found[_table_key(table)] = [row for row in rows if _row_key(row) == _table_key(table)]
    return found


ENDED = "its rank process ended"  # a set's process that died before it reported


def _set_failure(backend: Backend, error: str | None) -> str | None:
    """Every rank's account of its set's process, the same on every rank: a process that ended without
    a word first (the others' errors are mostly that peer's absence), then the lowest rank's."""
    accounts = [(rank, text) for rank, text in enumerate(backend.all_gather_object(error)) if text]
    if not accounts:
        return None
    accounts.sort(key=lambda account: (ENDED not in account[1], account[0]))
    first = f"rank {accounts[0][0]}: {accounts[0][1]}"
    return first + (f" (and {plural(len(accounts) - 1, 'other rank')})" if len(accounts) > 1 else "")


# Where no rank process can be started for a set (MPI started the ranks, and there is no store)
NO_RANK_SETS = ("needs rank processes of its own (torch holds one symmetric-memory backend per process), "
                "which this launch cannot start without a rendezvous store: run it in a run of its own")


def _report_table(rows: list[Row], output: Output) -> list[Row]:
    """A table its set's own rank processes measured, reported in its place."""
    for row in rows:
        _report(row, output)
    output.table_done(rows)
    return rows


def _run_table(config: RunConfig, backend: Backend, table: TablePlan, session: Session, impls: ImplRun,
               output: Output) -> list[Row]:
    """One table's rows, each reported as it is measured, then the table."""
    impl = impls.table(table)
    table_rows: list[Row] = []
    for size in table.sizes:
        point = SizePoint(config, backend, table, size, session.membership, session.row_context,
                          session.memory, impl, session.contention)
        _check_in(point, point.label(), session.stop_requested)
        for row in measure_size(point, output):
            _report(row, output)
            table_rows.append(row)
        backend.free_cached_memory()  # the size's buffers are gone: nothing cached for the next
    output.table_done(table_rows)
    return table_rows


def _report(row: Row, output: Output) -> None:
    output.row(row)
    if row.wrong:
        output.note(f"{describe_row(row)}: {plural(row.wrong, 'wrong element')}, first at {row.first_wrong}")


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
        return set(REGISTRY) <= set(config.impls)
    return config.all_collectives


def not_measured(unmeasured: list[str]) -> str | None:
    """Why a run that measured the rest exits 1: what was asked for and not measured; None when all was."""
    if not unmeasured:
        return None
    return f"asked for but not measured: {plural(len(unmeasured), 'point')} (first: {unmeasured[0]})"


def sweep_failure(rows: Sequence[Row]) -> str | None:
    """Why a finished sweep exits 1: rows that failed or held wrong values; None when all is well.
    Read a column at a time (values_of), so a fabric pass's two million rows are not each built."""
    errors, statuses, wrongs = (values_of(rows, name) for name in ("error", "impl_status", "wrong"))
    failed = [rows[index] for index in np.flatnonzero((errors != "") & (statuses != UNAVAILABLE)).tolist()]
    wrong = [rows[index] for index in np.flatnonzero(np.nan_to_num(wrongs.astype(np.float64)) != 0).tolist()]
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
    contention: Any = None  # --concurrent, --with-compute: running/contention.py's Contention

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
            error: str = "", facts: ImplFacts | None = None, how: Measuring = UNSTAMPED,
            **extra: Any) -> Row:
        """The row of one mode; ``how`` it was measured; ``extra``: contention's columns."""
        table, size, plan, backend = self.table, self.size, self.membership.plan, self.backend
        config = self.config
        collective = table.collective
        impl = row_fields(self.impl, facts) if self.impl is not None else {}
        if facts is not None and facts.status == UNAVAILABLE:  # refused at this size: not a failure
            impl.update(impl_status=UNAVAILABLE, impl_note="")
        scale = collective.time_scale(layout)
        measured_to = utc_stamp()
        return make_row(
            sampled, time_scale=scale, per_iteration=config.per_iteration,
            measured_from=how.measured_from or measured_to, measured_to=measured_to,
            first_op_us=None if how.first_op_s is None else round(how.first_op_s * scale * 1e6, 3),
            misalign=config.misalign, buffer_sets=config.buffer_sets, flush_bytes=how.flush_bytes,
            members=[list(ranks) for ranks in plan.members],
            collective=collective.name, backend=backend.name, device=backend.device.type,
            world_size=backend.world_size, dtype=table.dtype, mode=mode, op=table.op, size_bytes=size.used,
            requested_bytes=size.requested, count_per_rank=size.count_per_rank,
            warmup=self.config.warmup if how.warmup is None else how.warmup,
            busbw_factor=collective.busbw_factor(plan.size), group_size=plan.size, group_layout=plan.layout,
            group_count=plan.count, placement=self.placement,
            wrong=None if checker is None else checker.wrong,
            first_wrong="" if checker is None else checker.first_wrong, error=error,
            benchmark=self.config.name, root=self.config.root if collective.rooted else -1,
            output_digest="" if checker is None else checker.digest, context=self.row_context, **impl,
            **extra)


def _check_in(point: SizePoint, label: str, stop_requested: Callable[[], int]) -> None:
    # The signature holds what every rank must agree on for the step to be the same collective work.
    config, plan = point.config, point.membership.plan
    signature = (f"{label}|{'+'.join(config.modes)}|{config.warmup}|{config.iters}|{config.barrier}|"
                 f"{config.cuda_graph}|{plan.layout}:{plan.count}x{plan.size}")
    stop = point.backend.check_in(label, signature, stop_requested())
    if stop:
        raise Terminated(stop, agreed=True)  # every rank got the same answer at this check-in


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


def measure_size(point: SizePoint, output: Output) -> list[Row]:
    """One row per mode for one size (contention: one per communicator); the buffers are this call's
    locals, released when it returns. With --memory the size's memory is read from before its buffers
    exist to after its last op."""
    backend, table = point.backend, point.table
    if point.impl is not None and point.impl.failure is not None:  # its own rank processes failed
        return [point.row(mode, None, point.layout(), error=point.impl.failure) for mode in table.modes]
    refused = _refusal(point)
    if refused is not None:
        return [point.row(mode, None, point.layout(), error=refused, facts=ImplFacts(UNAVAILABLE))
                for mode in table.modes]
    memory = SizeMemory(backend.device) if point.config.memory else None
    if point.contention is not None:
        return measure_contending(point, output, memory)
    state = point.impl.state if point.impl is not None else None
    scope, error = attempt(state.size_scope) if state is not None else (None, None)
    error = agree(backend, error) if state is not None else None
    if error is not None:
        return [point.row(mode, None, point.layout(), error=f"set-up failed: {error}",
                          facts=ImplFacts(UNAVAILABLE)) for mode in table.modes]
    try:
        return _measure_buffers(point, output, scope, memory)
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


@dataclass(frozen=True)
class SizeOps:
    """A size's buffers as its modes time them: the op (rotating through --buffers' sets, with
    --flush-cache's write before each sample) and the op --check runs (always on the first set)."""

    layout: Layout
    buffers: SizeBuffers
    op: BoundOp
    checked: BoundOp


def _measure_buffers(point: SizePoint, output: Output, scope: Any, memory: SizeMemory | None) -> list[Row]:
    backend, table, config = point.backend, point.table, point.config
    layout = point.layout(misaligned(None if scope is None else scope.allocate, config.misalign))
    # All ranks agree before the first collective: a rank that cannot allocate (out of memory), or
    # register its buffers, makes an error row on every rank instead of leaving the others waiting.
    with failures_named(lambda: point.failed_in(table.modes[0])):
        built, error = attempt(lambda: allocate_sets(point, layout, config.buffer_sets, config.flush_cache))
        error = agree(backend, error)
        if error is None and scope is not None:
            buffers = built.sets[0]
            splits = buffers.input_splits or [layout.count_per_rank] * layout.world_size
            registered, error = attempt(lambda: register(backend, scope, buffers.tensors(), splits))
            error = agree(backend, error)
    if error is not None:
        return [point.row(mode, None, layout, error=error) for mode in table.modes]
    facts = ImplFacts() if scope is None else ImplFacts(register_ms=round(registered.seconds * 1e3, 3),
                                                        setup_bytes=registered.bytes_taken)
    args = CollectiveArgs(process_group=point.membership.process_group, op=table.op or "sum",
                          root=config.root, premul_factor=config.premul_factor,
                          **built.sets[0].call_options())
    if scope is not None:
        args.process_group, args.path = point.impl.state.group, registered.binding
    issue = point.impl.impl.issue_for(table.collective.name, table.collective.issue) if point.impl \
        else table.collective.issue
    rotation = Rotation(built.sets, issue) if len(built.sets) > 1 else None
    op = BoundOp(backend, args, rotation or issue, before=then_meet(built.flush, backend))
    ops = SizeOps(layout, built, op, BoundOp(backend, args, rotation.pinned(0)) if rotation else op)
    rows = []
    for mode in table.modes:
        output.working(f"{table.collective.name}{point.how} {table.dtype} {format_size(point.size.used)} "
                       f"{mode}")
        measured_from = utc_stamp()
        with failures_named(lambda: point.failed_in(mode)):  # noqa: B023 - used before the loop moves on
            seconds, error = attempt(lambda: _probe(op, mode))  # noqa: B023 - called at once
            error, slowest = agree_with_time(backend, error, seconds or 0.0)
            if error is not None:
                rows.append(point.row(mode, None, layout, error=error, how=Measuring(measured_from)))
                continue
            if config.profile_kernels and not facts.profiled:  # once per size, on every rank
                _profile(point, op, facts)
            rows.append(_measure_mode(point, ops, mode, (measured_from, slowest), facts))
    if memory is not None:
        account_memory(backend, memory, built.nbytes(), rows)
    return rows


def _profile(point: SizePoint, op: BoundOp, facts: ImplFacts) -> None:
    """--profile-kernels: one more op, sync, under the profiler; its names judge the path."""
    facts.kernels, facts.profiled = point.backend.kernel_names(lambda: _probe(op, "sync")), True
    if point.impl is not None:
        facts.judge(point.impl, point.membership.plan.size)


def _measure_mode(point: SizePoint, ops: SizeOps, mode: str, probe: tuple[str, float],
                  facts: ImplFacts | None = None) -> Row:
    """Warm-up, the timed ops (with --check, checked ops between and after them) and the row;
    ``probe``: when this rank began the mode (its probe op) and the probe's seconds, max over ranks."""
    config, policy, op, layout = point.config, sampling_policy(point.config), ops.op, ops.layout
    measured_from, probe_seconds = probe
    checker = interlude = None
    op.args.async_op = mode == "async"
    warmed, per_op_seconds = warm_up_for(op, policy, probe_seconds)
    if config.check:
        values = CheckValues(layout.dtype, point.table.op, layout.world_size, point.backend.device,
                             config.premul_factor)
        # with CUDA graphs the checked op is a replay of a captured one, as the timed ops are
        checked_op = graph_replay_op(ops.checked) if config.cuda_graph else ops.checked
        checker = SizeChecker(checked_op, mode, point.table.collective, layout, ops.buffers.sets[0], values)
        interlude = Interlude(config.check_every or 1 << 62, checker.run)
        op.args.async_op = mode == "async"
    sampled = collect(op, mode, policy, per_op_seconds, interlude, point.size.window)
    if interlude is not None:
        interlude.finish()  # the checked op after timing
    return point.row(mode, sampled, layout, checker=checker, facts=facts,
                     how=Measuring(measured_from, probe_seconds, ops.buffers.flush_bytes(), warmed))
