"""The FSDP pattern: the collectives of one training step of a model sharded by FSDP.

For one step, per unit (see sharding.py for the layout): the forward pass all-gathers the unit's
parameters (the next unit's all-gather is issued before this unit computes: FSDP's prefetch); the backward
pass, in reverse unit order, all-gathers them again (unless --no-reshard kept them) and reduce-scatters the
unit's gradients, each flattened and padded to a multiple of the world size, divided by the predivide
factor before the reduction and by the postdivide factor after it. How gradients are grouped into
reduce-scatters is the bucketing (sharding.Bucketing). The step issues every collective through the
Backend; nothing here calls torch.distributed.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.config import resolve_backend_and_device
from commbench.dtypes import canonical_dtype, torch_dtype
from commbench.errors import RunError, Terminated, UsageError
from commbench.patterns import overlap as overlap_math
from commbench.patterns.bucketing import ReduceScatterBucketer, scaled_copy
from commbench.patterns.models import load_model
from commbench.patterns.schedule import ASYNC, DRY, SYNC, Issuer, Label
from commbench.patterns.sharding import (
    Bucketing,
    ShardedParam,
    ShardedUnit,
    ShardPlan,
    divide_factors,
    is_power_of_two,
    parse_buckets,
    shard_model,
)
from commbench.results import Row
from commbench.stats import algbw_gbps, slowest_rank_per_iteration, summarize
from commbench.timing import make_timer

PATTERN = "fsdp"
GRADIENT_DTYPES = ("float32", "bfloat16", "float16", "float64")
FALLBACKS = ("none", "list")
_NO_WORK = CollectiveArgs(input=None, output=None)  # finishing a step's timer waits on nothing more


@dataclass
class FsdpConfig:
    """One `commbench pattern fsdp` run; the launcher reads the same fields as a sweep's RunConfig."""

    model: str = "gpt2-small"  # a preset name or a YAML file
    layers: int | None = None  # keep only the first N layer units
    buckets: list[str] = field(default_factory=lambda: ["unit"])  # 'unit' or sizes in MiB
    predivide: float | None = None  # None: FSDP's default split of the world size
    postdivide: float | None = None
    fallback: str = "none"  # 'list': list reduce_scatter / all_gather instead of the flat APIs
    reshard: bool = True  # re-gather parameters in the backward pass (FSDP's FULL_SHARD)
    overlap: bool = False
    compute_size: str = "auto"  # matmul size for --overlap, or 'auto': as long as the communication
    check: bool = False
    dtype: str = "float32"
    warmup: int = 0  # the dry step that sizes every buffer comes first; the median of 3 absorbs a cold step
    iters: int = 3
    backend: str | None = None
    device: str | None = None
    nproc: int = 2
    timeout_s: float = 300.0
    output_dir: str = "results"
    csv_path: str | None = None
    json_path: str | None = None
    quiet: bool = False
    argv: list[str] = field(default_factory=list)
    pattern: str = PATTERN


def resolve_fsdp(config: FsdpConfig) -> FsdpConfig:
    """A validated copy; UsageError (exit 2) on the first problem, before any process group starts."""
    load_model(config.model, config.layers)  # the spec's problems surface here, naming the file
    dtype = canonical_dtype(config.dtype)
    if dtype not in GRADIENT_DTYPES:
        raise UsageError(f"--dtype {dtype}: FSDP gradients are floating point; choose from "
                         f"{', '.join(GRADIENT_DTYPES)}")
    buckets = [bucketing.label for bucketing in parse_buckets(",".join(config.buckets))]
    for flag, value in (("--predivide", config.predivide), ("--postdivide", config.postdivide)):
        if value is not None and not value > 0:
            raise UsageError(f"{flag} {value:g} must be above 0")
    if config.check and config.predivide is not None and not is_power_of_two(config.predivide):
        raise UsageError(f"--check needs a power-of-two --predivide (got {config.predivide:g}) so that "
                         "every sum is exact whatever order the ranks add in")
    if config.fallback not in FALLBACKS:
        raise UsageError(f"--fallback {config.fallback!r}: choose none or list")
    compute_size = str(config.compute_size).strip().lower()
    if compute_size != "auto":
        if not compute_size.isdigit() or int(compute_size) < 1:
            raise UsageError(f"--compute-size {config.compute_size!r}: give a matrix size such as 1024, "
                             "or auto")
    for flag, value, minimum in (("--warmup", config.warmup, 0), ("--iters", config.iters, 1),
                                 ("--nproc", config.nproc, 1)):
        if value < minimum:
            raise UsageError(f"{flag} {value} must be at least {minimum}")
    if config.timeout_s <= 0:
        raise UsageError(f"--timeout {config.timeout_s:g} must be above 0 seconds")
    backend, device = resolve_backend_and_device(config.backend, config.device)
    return replace(config, dtype=dtype, buckets=buckets, compute_size=compute_size, backend=backend,
                   device=device)


# --- one rank's tensors -----------------------------------------------------------------------------

class ShardState:
    """What a rank keeps between steps: its shard of every parameter and of every gradient, and the
    gradients the backward pass produces, one unit at a time (a single buffer every unit reuses: FSDP
    frees a unit's full gradients once they are reduced)."""

    def __init__(self, plan: ShardPlan, dtype: torch.dtype, device: torch.device) -> None:
        self.plan = plan
        self.dtype = dtype
        self.device = device
        world = plan.world_size
        self.param_shards = torch.zeros(plan.shard_numel, dtype=dtype, device=device)
        self.grad_shards = torch.zeros(plan.shard_numel, dtype=dtype, device=device)
        # The value world_size stays exact through any power-of-two predivision and the postdivision.
        self.unit_grads = torch.full((world * plan.max_unit_shard,), float(world), dtype=dtype,
                                     device=device)

    def unit_params(self, unit: ShardedUnit) -> torch.Tensor:
        return self.param_shards[unit.offset: unit.offset + unit.shard_numel]

    def grad_shard(self, unit: ShardedUnit, param: ShardedParam) -> torch.Tensor:
        start = unit.offset + param.offset
        return self.grad_shards[start: start + param.chunk]

    def param_grad(self, param: ShardedParam) -> torch.Tensor:
        """The padded, flattened gradient of a parameter of the unit being reduced."""
        start = param.offset * self.plan.world_size
        return self.unit_grads[start: start + param.padded]


class StepHooks(Protocol):
    """What --check looks at inside a step."""

    def gathered(self, unit: ShardedUnit, rows: torch.Tensor) -> None: ...

    def backward(self, unit: ShardedUnit) -> None: ...


def deliver(target: torch.Tensor, postdivide: float, result: torch.Tensor) -> None:
    """A reduce-scatter result reaches its parameter's gradient shard, divided by the postdivide factor."""
    if result is target:
        if postdivide != 1:
            target.div_(postdivide)
    else:
        scaled_copy(target, result, postdivide)


class FsdpStep:
    """One training step's collectives for one bucketing; run() issues them through an Issuer."""

    def __init__(self, backend: Backend, state: ShardState, bucketing: Bucketing,
                 factors: tuple[float, float], gathered: list[torch.Tensor], *, reshard: bool,
                 list_api: bool) -> None:
        plan = state.plan
        self.backend = backend
        self.state = state
        self.plan = plan
        self.bucketing = bucketing
        self.predivide, self.postdivide = factors
        self.reshard = reshard
        self.list_api = list_api
        self.gathered = gathered  # full-parameter buffers used in turn: a prefetch needs a second one
        element_size = state.param_shards.element_size()
        capacity = bucketing.capacity_elements(plan, element_size)
        direct = [param.padded for param in plan.params() if param.chunk > capacity]
        self.bucketer = ReduceScatterBucketer(
            backend, plan.world_size, capacity, state.dtype, state.device, depth=len(gathered),
            list_api=list_api, direct_numel=max(direct) if direct and self.predivide != 1 else 0,
            reserved=bucketing.per_unit)
        self._element_size = element_size
        self._issuer: Issuer | None = None

    def run(self, issuer: Issuer, compute: Callable[[], None] | None = None,
            hooks: StepHooks | None = None) -> None:
        self._issuer = issuer
        self.bucketer.issuer = issuer
        units = self.plan.units
        self._pass(units, "forward", compute, hooks, gather=True, reduce=False)
        self._pass(units[::-1], "backward", compute, hooks, gather=self.reshard, reduce=True)
        self.bucketer.flush_all(unit="", phase="flush")
        self.bucketer.complete_all()

    def _pass(self, order: tuple[ShardedUnit, ...], phase: str, compute: Callable[[], None] | None,
              hooks: StepHooks | None, *, gather: bool, reduce: bool) -> None:
        pending = self._all_gather(order[0], phase, 0) if gather else None
        for index, unit in enumerate(order):
            if pending is not None:
                self.backend.wait(pending)  # this unit's parameters are complete
                if hooks is not None:
                    hooks.gathered(unit, self._rows(unit, index))
                # prefetch: the next unit's all-gather runs while this unit computes
                pending = self._all_gather(order[index + 1], phase, index + 1) if index + 1 < len(order) \
                    else None
            if compute is not None:
                compute()
            if reduce:
                if hooks is not None:
                    hooks.backward(unit)
                self._reduce_scatter(unit)

    def _rows(self, unit: ShardedUnit, index: int) -> torch.Tensor:
        buffer = self.gathered[index % len(self.gathered)]
        return buffer[: unit.full_numel].view(self.plan.world_size, unit.shard_numel)

    def _all_gather(self, unit: ShardedUnit, phase: str, index: int) -> CollectiveArgs:
        rows = self._rows(unit, index)
        if self.list_api:
            method, output = "all_gather", list(rows.unbind(0))
        else:
            method, output = "all_gather_base", rows.view(-1)
        args = CollectiveArgs(input=self.state.unit_params(unit), output=output)
        label = Label(method, unit.name, phase, unit.full_numel * self._element_size, unit.shard_numel)
        self._issuer.issue(method, args, label)
        return args

    def _reduce_scatter(self, unit: ShardedUnit) -> None:
        if self.bucketing.per_unit:
            self.bucketer.reserve(unit.shard_numel)
        for param in unit.params:
            target = self.state.grad_shard(unit, param)
            self.bucketer.reduce_scatter(self.state.param_grad(param),
                                         partial(deliver, target, self.postdivide), output=target,
                                         predivide=self.predivide, unit=unit.name)
        if self.bucketing.per_unit:
            self.bucketer.flush(unit=unit.name, phase="backward")


# --- --check ------------------------------------------------------------------------------------

def param_values(param: ShardedParam, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A parameter's full, padded value: small integers (exact in every dtype), zero in the padding."""
    index = torch.arange(param.padded, device=device)
    values = ((index + 2 * param.index) % 16 + 1).to(dtype)
    values[param.numel:] = 0
    return values


def grad_values(param: ShardedParam, rank: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Rank ``rank``'s padded gradient: world_size x (1..4), so that a power-of-two predivision, every
    partial sum and the postdivision are exact whatever order the ranks are added in."""
    index = torch.arange(param.padded, device=device)
    values = (((index + rank + param.index) % 4 + 1) * param.world_size).to(dtype)
    values[param.numel:] = 0
    return values


class Checker:
    """--check: deterministic parameters and gradients, the gathered parameters compared on arrival, the
    reduced gradient shards compared with their expected values and with the unbucketed results."""

    def __init__(self, state: ShardState, factors: tuple[float, float], rank: int) -> None:
        self.state = state
        self.plan = state.plan
        self.rank = rank
        self.predivide, self.postdivide = factors
        self.mismatches: list[str] = []
        self.reference: torch.Tensor | None = None  # the unbucketed (one collective per parameter) result
        for unit in self.plan.units:
            for param in unit.params:
                full = param_values(param, state.dtype, state.device)
                start = unit.offset + param.offset
                chunk = full[rank * param.chunk: (rank + 1) * param.chunk]
                state.param_shards[start: start + param.chunk].copy_(chunk)

    # StepHooks
    def gathered(self, unit: ShardedUnit, rows: torch.Tensor) -> None:
        for param in unit.params:
            got = rows[:, param.offset: param.offset + param.chunk].reshape(-1)
            self._compare(got, param_values(param, self.state.dtype, self.state.device),
                          f"all-gathered parameter {unit.name}.{param.name}")

    def backward(self, unit: ShardedUnit) -> None:
        for param in unit.params:
            self.state.param_grad(param).copy_(grad_values(param, self.rank, self.state.dtype,
                                                           self.state.device))

    def expected_shard(self, param: ShardedParam) -> torch.Tensor:
        """This rank's reduced chunk, computed locally with the same divisions in the same dtype."""
        dtype, device = self.state.dtype, self.state.device
        total = torch.zeros(param.chunk, dtype=dtype, device=device)
        window = slice(self.rank * param.chunk, (self.rank + 1) * param.chunk)
        for rank in range(param.world_size):
            total += torch.div(grad_values(param, rank, dtype, device)[window], self.predivide)
        return torch.div(total, self.postdivide)

    def verify(self, bucketing: Bucketing) -> None:
        for unit in self.plan.units:
            for param in unit.params:
                self._compare(self.state.grad_shard(unit, param), self.expected_shard(param),
                              f"reduced gradient {unit.name}.{param.name} (bucket {bucketing.describe()})")
        if self.reference is None:
            return
        for unit in self.plan.units:
            for param in unit.params:
                start = unit.offset + param.offset
                self._compare(self.state.grad_shard(unit, param), self.reference[start: start + param.chunk],
                              f"reduced gradient {unit.name}.{param.name} (bucket {bucketing.describe()}) "
                              "against the unbucketed result")

    def _compare(self, got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
        if self.mismatches or torch.equal(got, expected):
            return  # the first mismatch is the one worth reading
        index = int((got != expected).nonzero()[0].item())
        self.mismatches.append(f"{what}: element {index} is {got[index].item():g}, "
                               f"expected {expected[index].item():g}")


def run_check(backend: Backend, checker: Checker, step: FsdpStep, context: str) -> None:
    """One untimed step with --check's values; every rank raises if any rank found a mismatch."""
    checker.state.grad_shards.fill_(float("nan"))  # a gradient no callback delivered cannot pass
    step.run(Issuer(backend, SYNC, context), hooks=checker)
    checker.verify(step.bucketing)
    found = backend.all_gather_object(checker.mismatches[:1])
    for rank, mismatches in enumerate(found):
        if mismatches:
            raise RunError(f"{context}: check failed on rank {rank}: {mismatches[0]}")


# --- measuring ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RowContext:
    backend: str
    device: str
    world_size: int
    dtype: str
    model: str
    bucket: str
    predivide: float
    postdivide: float
    iters: int
    warmup: int

    def row(self, *, collective: str, unit: str, phase: str, mode: str, op: str, size_bytes: int,
            count_per_rank: int, calls: int | None, seconds: list[float], busbw_factor: float,
            overlap_pct: float | None = None, compute_size: int | None = None) -> Row:
        samples_us = [round(value * 1e6, 3) for value in seconds]
        summary = summarize(samples_us)
        algbw = algbw_gbps(size_bytes, summary.p50 * 1e-6)
        return Row(
            collective=collective, backend=self.backend, device=self.device, world_size=self.world_size,
            dtype=self.dtype, mode=mode, op=op, size_bytes=size_bytes, requested_bytes=size_bytes,
            count_per_rank=count_per_rank, iters=self.iters, warmup=self.warmup,
            time_us_p50=summary.p50, time_us_p95=summary.p95, time_us_min=summary.min,
            time_us_max=summary.max, time_us_mean=summary.mean, algbw_gbps=algbw,
            busbw_gbps=None if algbw is None else algbw * busbw_factor, busbw_factor=busbw_factor,
            samples_us=samples_us, pattern=PATTERN, model=self.model, unit=unit, phase=phase,
            bucket_mb=self.bucket, predivide=self.predivide, postdivide=self.postdivide,
            calls_per_step=calls, overlap_pct=overlap_pct, compute_size=compute_size)


def slowest_ranks(backend: Backend, series: list[list[float]]) -> list[list[float]]:
    """Each series (same lengths on every rank) with every iteration's value the max over ranks."""
    lengths = [len(values) for values in series]
    per_rank = backend.all_gather_floats([value for values in series for value in values])
    slowest = slowest_rank_per_iteration(per_rank)
    result, start = [], 0
    for length in lengths:
        result.append(slowest[start: start + length])
        start += length
    return result


def time_steps(backend: Backend, steps: list[Callable[[], None]], iters: int, warmup: int
               ) -> list[list[float]]:
    """Seconds per run of each step on this rank, the steps taking turns (so that a machine getting
    slower or faster shifts them all alike); every timed run starts at a barrier."""
    for _ in range(warmup):
        for run_step in steps:
            run_step()
    backend.sync_device()
    timers = [make_timer(backend, iters) for _ in steps]
    for index in range(iters):
        for run_step, timer in zip(steps, timers, strict=True):
            backend.barrier()
            timer.start(index)
            run_step()
            timer.finish(index, _NO_WORK)
    return [timer.seconds() for timer in timers]


def measure_breakdown(backend: Backend, step: FsdpStep, labels: list[Label], ctx: RowContext,
                      config: FsdpConfig, context: str) -> list[Row]:
    """Steps whose collectives are issued and completed one by one, each timed: rows per collective,
    unit and phase, and one for the whole step (which adds the local work: divisions, copies, callbacks)."""
    for _ in range(config.warmup):
        step.run(Issuer(backend, SYNC, context))
    slots = len(labels) * config.iters
    slot_timer = make_timer(backend, slots)
    issuer = Issuer(backend, SYNC, context, timer=slot_timer, slots=slots)
    (step_seconds,) = time_steps(backend, [lambda: step.run(issuer)], config.iters, warmup=0)
    if issuer.issued != slots:
        raise RunError(f"{context}: the step issued {issuer.issued} collectives in {config.iters} steps, "
                       f"not {slots}, on rank {backend.rank}")
    per_slot = slot_timer.seconds()
    groups: dict[tuple[str, str, str], list[int]] = {}
    for index, label in enumerate(labels):
        groups.setdefault((label.collective, label.unit, label.phase), []).append(index)
    per_step = [per_slot[index * len(labels): (index + 1) * len(labels)] for index in range(config.iters)]
    local = [step_seconds, [sum(step_slots) for step_slots in per_step]]
    for indices in groups.values():  # a group's time in a step is the sum of its collectives
        local.append([sum(step_slots[i] for i in indices) for step_slots in per_step])
    slowest = slowest_ranks(backend, local)
    factor = (ctx.world_size - 1) / ctx.world_size
    rows = []
    for (collective, unit, phase), indices, seconds in zip(groups, groups.values(), slowest[2:], strict=True):
        members = [labels[i] for i in indices]
        rows.append(ctx.row(collective=collective, unit=unit, phase=phase, mode="sync",
                            op="sum" if collective.startswith("reduce_scatter") else "",
                            size_bytes=sum(m.size_bytes for m in members),
                            count_per_rank=sum(m.count_per_rank for m in members), calls=len(members),
                            seconds=seconds, busbw_factor=factor))
    total_bytes = sum(label.size_bytes for label in labels)
    total_count = sum(label.count_per_rank for label in labels)
    for phase, seconds in (("collectives", slowest[1]), ("step", slowest[0])):
        rows.append(ctx.row(collective="step", unit="", phase=phase, mode="sync", op="",
                            size_bytes=total_bytes, count_per_rank=total_count, calls=len(labels),
                            seconds=seconds, busbw_factor=factor))
    return rows


def measure_overlap(backend: Backend, step: FsdpStep, labels: list[Label], ctx: RowContext,
                    config: FsdpConfig, context: str, size: int | None) -> tuple[int, list[Row]]:
    """The step with asynchronous collectives: communication alone, a matmul per unit and pass alone,
    and both together (the matmul runs while the prefetched all-gather and the reduce-scatters are in
    flight); rows for the three and the overlap percentage, and the matmul size used. ``size`` None
    calibrates it to this step's communication (--compute-size auto, the first bucketing)."""
    kernels = 2 * len(step.plan.units)  # one per unit in the forward pass, one in the backward pass
    issuer = Issuer(backend, ASYNC, context)
    device, dtype = step.state.device, step.state.dtype
    if size is None:  # OSU's way: the compute lasts as long as the communication
        (probe,) = time_steps(backend, [lambda: step.run(issuer)], config.iters, config.warmup)
        (probe,) = slowest_ranks(backend, [probe])
        target = summarize(probe).p50 / kernels
        size = overlap_math.calibrate_size(
            lambda n: overlap_math.time_kernel(n, dtype, device, backend.sync_device), target)
        size = int(backend.broadcast_object(size, root=0))  # every rank computes the same matmul
    kernel = overlap_math.MatmulKernel(size, dtype, device)

    def compute_only() -> None:
        for _ in range(kernels):
            kernel()

    timed = time_steps(backend, [lambda: step.run(issuer), compute_only,
                                 lambda: step.run(issuer, compute=kernel)], config.iters, config.warmup)
    comm, compute, both = slowest_ranks(backend, timed)
    percent = overlap_math.overlap_percent(summarize(comm).p50, summarize(compute).p50, summarize(both).p50)
    total_bytes = sum(label.size_bytes for label in labels)
    total_count = sum(label.count_per_rank for label in labels)
    factor = (ctx.world_size - 1) / ctx.world_size
    common = dict(unit="", mode="async", op="", compute_size=size)
    return size, [
        ctx.row(collective="step", phase="comm", size_bytes=total_bytes, count_per_rank=total_count,
                calls=len(labels), seconds=comm, busbw_factor=factor, **common),
        ctx.row(collective="step", phase="compute", size_bytes=0, count_per_rank=0, calls=kernels,
                seconds=compute, busbw_factor=1.0, **common),
        ctx.row(collective="step", phase="comm+compute", size_bytes=total_bytes, count_per_rank=total_count,
                calls=len(labels), seconds=both, busbw_factor=factor, overlap_pct=percent, **common),
    ]


class Output(Protocol):
    def note(self, text: str) -> None: ...

    def row(self, row: Row) -> None: ...

    def group_done(self, rows: list[Row]) -> None: ...


def run_fsdp(configs: list[FsdpConfig], backend: Backend, output: Output, session: object = None
             ) -> list[Row]:
    """Every bucketing of the (one) config's buckets: an untimed --check step, timed steps, rows as each
    finishes. (``session`` carries sub-communicators and agreed stops for sweeps; a pattern runs on the
    world.)"""
    (config,) = configs
    model = load_model(config.model, config.layers)
    world = backend.world_size
    plan = shard_model(model, world)
    factors = divide_factors(world, config.predivide, config.postdivide)
    dtype = torch_dtype(config.dtype)
    state = ShardState(plan, dtype, backend.device)
    depth = 2 if config.overlap else 1
    gathered = [torch.zeros(plan.max_unit_shard * world, dtype=dtype, device=backend.device)
                for _ in range(depth)]
    output.note(_summary(plan, config, factors, state.param_shards.element_size()))
    if factors[0] * factors[1] != world:
        output.note(f"predivide {factors[0]:g} x postdivide {factors[1]:g} is not the world size {world}: "
                    "the reduced gradients are the sum over ranks divided by that product, not the average")
    buckets = parse_buckets(",".join(config.buckets))
    list_api = config.fallback == "list"
    checker = Checker(state, factors, backend.rank) if config.check else None
    if checker is not None:  # the unbucketed reference every bucketing must match element for element
        context = f"fsdp {model.label}, bucket 0 MiB (the unbucketed reference)"
        with named_failures(context, backend.rank):
            direct = FsdpStep(backend, state, Bucketing("0", 0), factors, gathered, reshard=config.reshard,
                              list_api=list_api)
            step_dry(backend, direct, context)
            run_check(backend, checker, direct, context)
            checker.reference = state.grad_shards.clone()
            del direct
    rows: list[Row] = []
    # One matmul size for every bucketing: the model's compute does not change with the bucketing.
    compute_size = None if config.compute_size == "auto" else int(config.compute_size)
    for bucketing in buckets:
        context = f"fsdp {model.label}, bucket {bucketing.describe()}"
        with named_failures(context, backend.rank):
            step = FsdpStep(backend, state, bucketing, factors, gathered, reshard=config.reshard,
                            list_api=list_api)
            labels = step_dry(backend, step, context)
            if checker is not None:
                run_check(backend, checker, step, context)
            ctx = RowContext(backend.name, backend.device.type, world, config.dtype, model.label,
                             bucketing.label, factors[0], factors[1], config.iters, config.warmup)
            measured = measure_breakdown(backend, step, labels, ctx, config, context)
            if config.overlap:
                compute_size, overlap_rows = measure_overlap(backend, step, labels, ctx, config, context,
                                                             compute_size)
                measured += overlap_rows
        for row in measured:
            output.row(row)
        rows.extend(measured)
        step_row = next(row for row in measured if row.phase == "step")
        checked = ", checked" if checker is not None else ""
        output.note(f"bucket {bucketing.describe()}: {len(labels)} collectives per step, "
                    f"step p50 {step_row.time_us_p50 / 1e3:.2f} ms{checked}")
        del step
    output.group_done(rows)
    return rows


@contextmanager
def named_failures(context: str, rank: int) -> Iterator[None]:
    """A failure outside a single named collective (an asynchronous wait, an allocation) still says
    which run and rank; the Issuer names the collective when it can."""
    try:
        yield
    except (RunError, UsageError, Terminated):
        raise
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunError(f"{context} failed on rank {rank}: {detail}") from exc


def step_dry(backend: Backend, step: FsdpStep, context: str) -> list[Label]:
    """Run the step without communicating: every buffer exists afterwards and the schedule is known."""
    issuer = Issuer(backend, DRY, context)
    step.run(issuer)
    return issuer.labels


def _summary(plan: ShardPlan, config: FsdpConfig, factors: tuple[float, float], element_size: int) -> str:
    model = plan.model
    mib = model.numel * element_size / 2**20
    cut = f" (first {model.layers_kept} of {model.layer_count} layers)" if model.layers_kept else ""
    regather = "re-gathered in backward" if config.reshard else "kept from forward (--no-reshard)"
    api = "list APIs (--fallback list)" if config.fallback == "list" else "flat APIs"
    return (f"fsdp {model.name}{cut}: {len(plan.units)} units, {model.param_count} parameters, "
            f"{model.numel:,} elements ({mib:,.1f} MiB {config.dtype}); at {plan.world_size} ranks "
            f"{plan.shard_numel:,} elements per rank, {plan.padding:,} of padding; predivide "
            f"{factors[0]:g}, postdivide {factors[1]:g}; parameters {regather}; {api}")
