"""One rank's replay through the Backend: buffers once, then passes over the recorded operations.

Invariants: every buffer exists before the first pass, one set per row key and shape (the operations
that share both share it), shaped as recorded; nothing inside a pass allocates. Operations run in the
rank's recorded order. A collective is issued and completed before the next (sync); a run of consecutive
point-to-point operations is issued together (async) and completed together, so an order of sends and
receives that the job could run cannot deadlock here. A step (one collective, or one such run) is one
timer slot; a step's time is shared equally by its operations. Every pass starts at a barrier. With
--keep-gaps a step is not issued before its recorded offset from the pass's start (the idle time between
operations comes back).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.core.dtypes import known_dtypes
from commbench.core.sizes import format_size
from commbench.errors import RunError, Terminated, UsageError, brief
from commbench.measure.check import compare
from commbench.measure.collectives import REGISTRY, Buffers, Layout
from commbench.measure.planning import TENSOR_BYTES_LIMIT
from commbench.measure.timing import Timer, make_timer
from commbench.measure.values import CheckValues
from commbench.replay.mapping import ReplayOp, ReplayPlan
from commbench.replay.model import Shape

_NO_WORK = CollectiveArgs(input=None, output=None)


@dataclass
class Prepared:
    """An operation with its buffers: ``args`` as issued (tensors in the recorded shape), ``flat`` the
    descriptor's buffers they view (what --check fills and compares)."""

    op: ReplayOp
    call: Callable[[CollectiveArgs], None]
    args: CollectiveArgs
    layout: Layout
    flat: Buffers


@dataclass
class Step:
    ops: list[Prepared]
    waiter: CollectiveArgs  # what completing the step waits on
    offset_ns: int | None


@dataclass
class RankTimes:
    """What one rank measured, sent to every rank once the passes are over."""

    rank: int
    op_seconds: dict[tuple, list[float]] = field(default_factory=dict)  # key -> per op, pass after pass
    comm_seconds: list[float] = field(default_factory=list)  # per pass: the sum of its steps' times
    wall_seconds: list[float] = field(default_factory=list)  # per pass, from its barrier to its end
    wrong: dict[tuple, tuple[int, str]] = field(default_factory=dict)  # --check: wrong elements, first


def torch_dtype_of(name: str) -> torch.dtype:
    """A replayed dtype (a barrier has none: its empty buffers are float32)."""
    return {"int16": torch.int16, "bool": torch.bool, "": torch.float32}.get(name) or getattr(torch, name)


def gathered_shape(shape: Shape, group_size: int) -> Shape:
    """The shape of ``group_size`` per-rank tensors of ``shape`` laid end to end (dimension 0)."""
    return (group_size * shape[0], *shape[1:]) if shape else (group_size,)


def _shaped(op: ReplayOp, flat: Buffers) -> tuple:
    """(input, output) as the backend is handed them: views of the flat buffers in recorded shapes."""
    shape, big = op.shape, gathered_shape(op.shape, op.group_size)
    name = op.collective
    if name == "barrier":
        return None, None
    if name in ("all_reduce", "broadcast", "reduce", "all_to_all_single", "ping"):
        view = [part.view(shape) if part is not None else None for part in (flat.input, flat.output)]
        return view[0], view[1]
    if name == "all_gather_base":
        return flat.input.view(shape), flat.output.view(big)
    if name == "reduce_scatter_base":
        return flat.input.view(big), flat.output.view(shape)
    if name == "gather":
        return flat.input.view(shape), None if flat.output is None else [c.view(shape) for c in flat.output]
    return None if flat.input is None else [c.view(shape) for c in flat.input], flat.output.view(shape)


def _layout(op: ReplayOp, rank: int, members: tuple[int, ...], world_size: int, device: torch.device
            ) -> Layout:
    if op.collective == "ping":  # peers are global ranks on the default group
        return Layout(op.count_per_rank, world_size, rank, 0, torch_dtype_of(op.dtype), device)
    return Layout(op.count_per_rank, len(members), members.index(rank), op.root, torch_dtype_of(op.dtype),
                  device)


def _flat_buffers(op: ReplayOp, layout: Layout) -> Buffers:
    if op.collective == "ping":
        tensor = layout.empty(layout.count_per_rank)
        return Buffers(tensor, None, send_peer=op.peer) if op.sends else \
            Buffers(None, tensor, recv_peer=op.peer)
    return REGISTRY[op.collective].build(layout)


def buffer_need(plan: ReplayPlan, rank: int) -> int:
    """The bytes of the buffers ``prepare`` would allocate on ``rank`` (one set per row key, shape and
    side), from builds on torch's meta device: nothing is allocated to find out."""
    meta = torch.device("meta")
    seen: set[tuple] = set()
    total = 0
    for op in plan.ops[rank]:
        cache_key = (*op.key, op.shape, op.sends)
        if cache_key in seen:
            continue
        seen.add(cache_key)
        members = plan.group(op.group).members if op.group else ()
        layout = _layout(op, rank, members, plan.world_size, meta)
        try:
            total += sum(tensor.nbytes for tensor in _flat_buffers(op, layout).tensors())
        except RuntimeError:  # "Storage size calculation overflowed": more than a tensor can hold
            return TENSOR_BYTES_LIMIT
    return total


def prepare(plan: ReplayPlan, rank: int, backend: Backend, handles: dict[str, object]) -> list[Step]:
    """This rank's steps, every buffer allocated (zeroed) once per row key, shape and side."""
    cache: dict[tuple, tuple[Layout, Buffers]] = {}
    steps: list[Step] = []
    for op in plan.ops[rank]:
        members = plan.group(op.group).members if op.group else ()
        cache_key = (*op.key, op.shape, op.sends)
        if cache_key not in cache:
            layout = _layout(op, rank, members, plan.world_size, backend.device)
            flat = _flat_buffers(op, layout)
            for tensor in flat.tensors():
                tensor.zero_()  # zeros: repeated in-place reductions stay finite in every dtype
            cache[cache_key] = (layout, flat)
        layout, flat = cache[cache_key]
        source, target = _shaped(op, flat)
        args = CollectiveArgs(input=source, output=target, process_group=handles.get(op.group), root=op.root,
                              send_peer=flat.send_peer, recv_peer=flat.recv_peer)
        prepared = Prepared(op, partial(REGISTRY[op.collective].issue, backend), args, layout, flat)
        _add_to_steps(steps, prepared)
    return steps


def _add_to_steps(steps: list[Step], prepared: Prepared) -> None:
    if prepared.op.collective != "ping":
        steps.append(Step([prepared], prepared.args, prepared.op.offset_ns))
        return
    if not steps or steps[-1].ops[0].op.collective != "ping":
        steps.append(Step([], CollectiveArgs(input=None, output=None), prepared.op.offset_ns))
    prepared.args.async_op = True
    prepared.args.wait_list = steps[-1].waiter.wait_list  # the run completes together
    steps[-1].ops.append(prepared)


def describe_op(op: ReplayOp) -> str:
    where = f"group {op.group}" if op.group else f"{'to' if op.sends else 'from'} rank {op.peer}"
    return f"{op.collective} ({op.dtype}, {format_size(op.size_bytes)}) in {where}"


class GapClock:
    """--keep-gaps: holds each step back until its recorded offset from the start of the pass."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.origin_ns = 0

    def start(self) -> None:
        self.origin_ns = time.perf_counter_ns()

    def wait(self, offset_ns: int | None) -> None:
        if self.enabled and offset_ns is not None:
            delay = self.origin_ns + offset_ns - time.perf_counter_ns()
            if delay > 0:
                time.sleep(delay * 1e-9)


def run_pass(steps: list[Step], timer: Timer, first_slot: int, gaps: GapClock, rank: int) -> None:
    """Every step once, each in its own timer slot; a failure names the operation and the rank."""
    index = 0
    try:
        for index, step in enumerate(steps):
            gaps.wait(step.offset_ns)
            timer.start(first_slot + index)
            for prepared in step.ops:
                prepared.call(prepared.args)
            timer.finish(first_slot + index, step.waiter)
    except (RunError, UsageError, Terminated):
        raise
    except Exception as exc:
        raise RunError(f"replay: {describe_op(steps[index].ops[0].op)} failed on rank {rank}: "
                       f"{brief(exc)}") from exc


def time_passes(steps: list[Step], backend: Backend, warmup: int, iters: int, keep_gaps: bool) -> RankTimes:
    """``warmup`` untimed passes, then ``iters`` timed ones; this rank's times."""
    gaps = GapClock(keep_gaps)
    spare = make_timer(backend, max(1, len(steps)))
    for _ in range(warmup):
        backend.barrier()
        gaps.start()
        run_pass(steps, spare, 0, gaps, backend.rank)
    timer = make_timer(backend, max(1, len(steps) * iters))
    walls = make_timer(backend, iters)
    for index in range(iters):
        backend.barrier()
        walls.start(index)
        gaps.start()
        run_pass(steps, timer, index * len(steps), gaps, backend.rank)
        walls.finish(index, _NO_WORK)
    return _rank_times(steps, timer.seconds(), walls.seconds(), iters, backend.rank)


def _rank_times(steps: list[Step], seconds: list[float], walls: list[float], iters: int, rank: int
                ) -> RankTimes:
    times = RankTimes(rank, wall_seconds=walls)
    for index in range(iters):
        per_step = seconds[index * len(steps): (index + 1) * len(steps)]
        times.comm_seconds.append(sum(per_step))
        for step, step_seconds in zip(steps, per_step, strict=True):
            for prepared in step.ops:
                times.op_seconds.setdefault(prepared.op.key, []).append(step_seconds / len(step.ops))
    return times


def checkable(op: ReplayOp) -> bool:
    return op.dtype in known_dtypes()


def check_pass(steps: list[Step], backend: Backend, world_size: int) -> dict[tuple, tuple[int, str]]:
    """--check: one pass with known values in every input and every output compared, per row key."""
    wrong: dict[tuple, tuple[int, str]] = {}
    timer = make_timer(backend, max(1, len(steps)))
    for index, step in enumerate(steps):
        values_of: list[CheckValues | None] = []
        for prepared in step.ops:
            values = CheckValues(prepared.layout.dtype, "sum", prepared.layout.world_size, backend.device) \
                if checkable(prepared.op) else None
            if values is not None:
                REGISTRY[prepared.op.collective].fill(prepared.layout, prepared.flat, values)
            values_of.append(values)
        backend.sync_device()
        run_pass([step], timer, index, GapClock(False), backend.rank)
        for prepared, values in zip(step.ops, values_of, strict=True):
            if values is None:
                continue
            result = compare(REGISTRY[prepared.op.collective].expect(prepared.layout, prepared.flat), values)
            count, first = wrong.get(prepared.op.key, (0, ""))
            wrong[prepared.op.key] = (count + result.wrong,
                                      first or (result.describe(backend.rank) if result.wrong else ""))
    return wrong
