"""--concurrent and --with-compute on a rank: the communicators that race, and a size measured on them
(``point`` is a runner.SizePoint).

Communicators, made once per benchmark by every rank in the same order:

- ``--concurrent N`` (``--concurrent-groups same``): N new process groups over the ranks of each
  collective (the world, or each group of --group-size); every rank runs an op on each, on buffers of
  its own.
- ``--concurrent-groups disjoint``: the world cut into N contiguous groups of world / N ranks, one
  process group each; every rank runs its own group's op, and the sweep's sizes are planned for a group.
- ``--with-compute`` alone: the communicator the sweep measures in, beside a matmul.

Each group is described as 'commbench concurrent K' where torch takes a description (Flight Recorder
and profiler traces name groups by it).

A size, once its buffers are allocated and every rank agrees they are: a probe (one untimed iteration
of every op together, agreed), warm-up (--warmup iterations of the race), then phases of the same count
of iterations (--iters, or as many as fit --time-per-size at the probe's time, between --min-iters and
--max-iters): each communicator alone (the others idle), the matmul alone, then everything together
(measure/contention.py times them). Every rank's seconds are gathered at once. A communicator's row
holds its together samples, each the max over its ranks, and its p50 alone beside them: ``slowdown`` is
time_us_p50 / alone_us_p50; with --with-compute the matmul's p50 alone and beside the collectives
(each sample the max over ranks) and their ratio. With --check one op is checked after the phases, on
each rank's first communicator.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from commbench.backends.base import Backend, CollectiveArgs
from commbench.config.sweep import RunConfig
from commbench.core.groups import Membership, split_world
from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.errors import RunError, brief, failures_named
from commbench.measure.cache import Rotation, misaligned
from commbench.measure.check import SizeChecker
from commbench.measure.compute import MatmulKernel
from commbench.measure.contention import Race, compute_timer, time_race
from commbench.measure.memory import SizeMemory
from commbench.measure.sampling import Sampled
from commbench.measure.stats import summarize
from commbench.measure.timing import BoundOp
from commbench.measure.values import CheckValues
from commbench.results.model import Row
from commbench.results.rows import Measuring, utc_stamp
from commbench.running.agreement import agree, agree_with_time, attempt
from commbench.running.buffers import SizeBuffers, account_memory, allocate_sets
from commbench.writers.output import Output

COMPUTE_PHASE = "comm+compute"  # the phase of a row measured beside a matmul (as a pattern's overlap row)


@dataclass(frozen=True)
class Contention:
    """A sweep's racing communicators on this rank, and the matmul beside them."""

    count: int  # communicators racing (1: --with-compute beside the sweep's own)
    mine: tuple[tuple[int, Any], ...]  # (communicator, this rank's process group on it), each it runs on
    compute_size: int  # --with-compute's N (0: no matmul)


def _description(index: int) -> str:
    return f"commbench concurrent {index}"


def open_contention(config: RunConfig, backend: Backend, membership: Membership
                    ) -> tuple[Contention | None, Membership]:
    """The benchmark's communicators, and the membership its sizes are planned for (a disjoint group's);
    (None, ``membership``) without --concurrent or --with-compute."""
    count = config.concurrent
    if count <= 1 and not config.with_compute:
        return None, membership
    try:
        if config.disjoint_groups:
            plan = split_world(backend.world_size, backend.world_size // count, "contiguous")
            handles = backend.new_group_handles([list(ranks) for ranks in plan.members],
                                                [_description(index) for index in range(count)])
            index = plan.group_of(backend.rank)
            mine: tuple[tuple[int, Any], ...] = ((index, handles[index]),)
            membership = Membership(plan, handles[index], plan.group_rank(backend.rank))
        elif count > 1:
            members = [list(ranks) for ranks in membership.plan.members]
            descriptions = [_description(index) for index in range(count) for _ in members]
            handles = backend.new_group_handles(members * count, descriptions)
            group = membership.plan.group_of(backend.rank)
            mine = tuple((index, handles[index * len(members) + group]) for index in range(count))
        else:
            mine = ((0, membership.process_group),)
    except Exception as exc:
        raise RunError(f"rank {backend.rank} could not create the communicators of --concurrent {count}: "
                       f"{brief(exc)}") from exc
    return Contention(count, mine, config.with_compute), membership


@dataclass(frozen=True)
class Racing:
    """A size's ops on this rank, one per communicator it runs on, with their buffers."""

    indices: list[int]  # the communicator of each op
    ops: list[BoundOp]
    buffers: list[SizeBuffers]
    kernel: MatmulKernel | None
    checked: BoundOp  # --check's op: the first op, on its first set of buffers

    def on(self, communicator: int) -> list[BoundOp]:
        return [op for index, op in zip(self.indices, self.ops, strict=True) if index == communicator]

    def nbytes(self) -> int:
        return sum(built.nbytes() for built in self.buffers) + (self.kernel.nbytes if self.kernel else 0)


def _build(point: Any, contention: Contention, layout: Any) -> Racing:
    """Every op's buffers (--buffers' sets each; the flush buffer once, before the first op) and the
    matmul."""
    config, table, backend = point.config, point.table, point.backend
    indices, ops, buffers, checked = [], [], [], []
    for position, (index, group) in enumerate(contention.mine):
        built = allocate_sets(point, layout, config.buffer_sets, config.flush_cache and position == 0)
        args = CollectiveArgs(process_group=group, op=table.op or "sum", root=config.root,
                              premul_factor=config.premul_factor, **built.sets[0].call_options())
        issue = table.collective.issue
        rotation = Rotation(built.sets, issue) if len(built.sets) > 1 else None
        indices.append(index)
        ops.append(BoundOp(backend, args, rotation or issue, before=built.flush))
        checked.append(BoundOp(backend, args, rotation.pinned(0)) if rotation else ops[-1])
        buffers.append(built)
    kernel = MatmulKernel(contention.compute_size, layout.dtype, backend.device) if contention.compute_size \
        else None
    return Racing(indices, ops, buffers, kernel, checked[0])


def measure_contending(point: Any, output: Output, memory: SizeMemory | None) -> list[Row]:
    """The size's rows: one per communicator (module docstring)."""
    backend, table, config = point.backend, point.table, point.config
    contention: Contention = point.contention
    layout = point.layout(misaligned(None, config.misalign))
    measured_from = utc_stamp()
    with failures_named(lambda: point.failed_in("sync")):
        racing, error = attempt(lambda: _build(point, contention, layout))
        error = agree(backend, error)
        if error is not None:
            return [point.row("sync", None, layout, error=error, how=Measuring(measured_from))]
        beside = f" beside a {contention.compute_size}^2 matmul" if contention.compute_size else ""
        output.working(f"{table.collective.name} {table.dtype} {format_size(point.size.used)} on "
                       f"{plural(contention.count, 'communicator')}{beside}")
        probe, error = attempt(lambda: _slowest(time_race(backend, racing.ops, None, 1)))
        error, slowest = agree_with_time(backend, error, probe or 0.0)
        if error is not None:
            return [point.row("sync", None, layout, error=error, how=Measuring(measured_from))]
        compute = compute_timer(racing.kernel, backend, backend.device) if racing.kernel else None
        time_race(backend, racing.ops, compute, config.warmup)
        iters = _iterations(config, slowest)
        phases = [time_race(backend, racing.on(index), None, iters) for index in range(contention.count)]
        compute_alone = time_race(backend, [], compute, iters) if compute is not None else Race()
        together = time_race(backend, racing.ops, compute, iters)
        checker = _check(point, racing, layout) if config.check else None
    every = backend.all_gather_array(_flat(contention.count, racing.indices, phases, compute_alone, together,
                                           iters))
    rows = _rows(point, layout, every, contention, iters,
                 (Measuring(measured_from, slowest, racing.buffers[0].flush_bytes()), checker))
    if memory is not None:
        account_memory(backend, memory, racing.nbytes(), rows)
    return rows


def _slowest(race: Race) -> float:
    return max((max(seconds) for seconds in race.op_seconds), default=0.0)


def _iterations(config: RunConfig, probe_seconds: float) -> int:
    """Iterations per phase: --iters, or those that fit --time-per-size at the probe's time (every rank
    computes the same from the agreed probe)."""
    if config.iters is not None:
        return config.iters
    fitting = config.max_iters if probe_seconds <= 0 else int(config.time_per_size / probe_seconds)
    return max(config.min_iters, min(config.max_iters, fitting))


def _check(point: Any, racing: Racing, layout: Any) -> SizeChecker:
    """One checked op on this rank's first communicator, its first set of buffers."""
    values = CheckValues(layout.dtype, point.table.op, layout.world_size, point.backend.device,
                         point.config.premul_factor)
    checker = SizeChecker(racing.checked, "sync", point.table.collective, layout, racing.buffers[0].sets[0],
                          values)
    checker.run()
    return checker


def _flat(count: int, indices: list[int], phases: list[Race], compute_alone: Race, together: Race,
          iters: int) -> list[float]:
    """This rank's seconds for the gather: each communicator alone, each together (NaN where this rank
    does not run it), the matmul alone and together (NaN without one)."""
    missing = [float("nan")] * iters
    alone = [missing] * count
    beside = [missing] * count
    for position, index in enumerate(indices):
        alone[index] = phases[index].op_seconds[0]  # a rank runs one op on each of its communicators
        beside[index] = together.op_seconds[position]
    compute = [compute_alone.compute_seconds or missing, together.compute_seconds or missing]
    return [value for series in (*alone, *beside, *compute) for value in series]


def _rows(point: Any, layout: Any, every: np.ndarray, contention: Contention, iters: int,
          measured: tuple[Measuring, SizeChecker | None]) -> list[Row]:
    """A row per communicator from every rank's gathered seconds (``measured``: how the size was
    measured, and the checker)."""
    how, checker = measured
    count = contention.count
    scale = point.table.collective.time_scale(layout)
    alone = every[:, :count * iters].reshape(len(every), count, iters)
    together = every[:, count * iters:2 * count * iters].reshape(len(every), count, iters)
    compute = every[:, 2 * count * iters:].reshape(len(every), 2, iters)
    compute_fields: dict[str, Any] = {}
    if contention.compute_size:
        compute_alone_us, compute_us = (_p50_us(compute[:, phase, :]) for phase in (0, 1))
        compute_fields = dict(compute_size=contention.compute_size, compute_alone_us=compute_alone_us,
                              compute_us=compute_us, compute_slowdown=_ratio(compute_us, compute_alone_us),
                              phase=COMPUTE_PHASE)
    rows = []
    for index in range(count):
        members = np.flatnonzero(~np.isnan(together[:, index, 0]))
        alone_us = _p50_us(alone[members, index, :], scale)
        row = point.row("sync", Sampled(together[members, index, :], iters), layout, checker=checker,
                        how=how, concurrent=count if count > 1 else None,
                        communicator=index if count > 1 else None, alone_us_p50=alone_us, **compute_fields)
        row.slowdown = _ratio(row.time_us_p50, alone_us)
        rows.append(row)
    return rows


def _p50_us(seconds: np.ndarray, scale: float = 1.0) -> float | None:
    """The p50 over iterations of the max over ranks, µs; None when no rank measured it."""
    if seconds.size == 0 or np.isnan(seconds).all():
        return None
    return round(summarize(np.nanmax(seconds, axis=0).tolist()).p50 * scale * 1e6, 3)


def _ratio(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else round(value / reference, 4)

