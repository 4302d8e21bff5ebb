"""The FSDP pattern: the collectives of one training step of a model sharded by FSDP2 or FSDP1.

The step itself (what is issued, in which order, with which buffers) is fsdp_step.py; --check is
fsdp_check.py; timing it and its rows are measure.py. This module holds the pattern's configuration and
runs it: per bucketing, an untimed --check step, timed steps, rows as each bucketing finishes.
``fsdp_schedule`` gives a step's collectives without running anything (on the meta device: no memory).
"""

from dataclasses import dataclass

import torch

from commbench.backends.base import Backend
from commbench.backends.torch_dist import TorchDistBackend
from commbench.core.dtypes import torch_dtype
from commbench.core.sizes import approximate_size
from commbench.core.words import plural
from commbench.errors import failures_named
from commbench.patterns.config import FSDP, FsdpConfig, resolve_fsdp  # noqa: F401 (the pattern's names)
from commbench.patterns.estimate import (
    StepCost,
    StepProgress,
    budget_of,
    fsdp_check_values,
    fsdp_hint,
    fsdp_memory,
    fsdp_steps,
    refuse_past_budget,
    time_text,
)
from commbench.patterns.fsdp_check import FsdpChecker, run_check, seconds_per_value
from commbench.patterns.fsdp_step import FsdpStep, ShardState, StepOptions
from commbench.patterns.measure import StepRun, measure_breakdown, measure_overlap, probe_alpha_beta, step_dry
from commbench.patterns.models import load_model
from commbench.patterns.schedule import Label
from commbench.patterns.sharding import (
    Bucketing,
    Reduction,
    ShardPlan,
    fsdp_reduction,
    parse_buckets,
    shard_model,
)
from commbench.results.model import Row
from commbench.running.runner import Session
from commbench.writers.output import Output


@dataclass(frozen=True)
class FsdpSetup:
    """What every bucketing of a run shares: the layout, the reduction, the buffers and how to issue."""

    plan: ShardPlan
    reduction: Reduction
    state: ShardState
    gathered: list[torch.Tensor]
    options: StepOptions

    def step(self, backend: Backend, bucketing: Bucketing) -> FsdpStep:
        return FsdpStep(backend, self.state, bucketing, self.gathered, self.options)


def fsdp_setup(config: FsdpConfig, world_size: int, device: torch.device, device_type: str | None = None
               ) -> FsdpSetup:
    """The run's layout, reduction and buffers on ``device``; ``device_type`` is where the run's
    parameters live (the device's own type unless a schedule is computed on the meta device)."""
    plan = shard_model(load_model(config.model, config.layers), world_size, config.fsdp_version)
    param_dtype, reduce_dtype = config.dtypes()
    reduction = fsdp_reduction(config.fsdp_version, reduce_dtype, world_size,
                               (config.predivide, config.postdivide))
    state = ShardState(plan, (torch_dtype(param_dtype), torch_dtype(reduce_dtype)), device)
    gathered = [torch.zeros(plan.max_unit_shard * world_size, dtype=state.param_dtype, device=device)
                for _ in range(2 if config.overlap else 1)]
    # FSDP1 gathers CPU flat parameters with the list all_gather (its flat API is for accelerators)
    gather_list = config.fallback == "list" or (config.fsdp_version == 1 and
                                                (device_type or device.type) == "cpu")
    options = StepOptions(reduction, config.reshard, gather_list, config.fallback == "list")
    return FsdpSetup(plan, reduction, state, gathered, options)


def fsdp_schedule(config: FsdpConfig, world_size: int, bucket: str = "unit", device: str = "cpu"
                  ) -> list[Label]:
    """One step's collectives in order, computed without communicating or allocating (meta tensors);
    ``device`` is the one the run would use (FSDP1 gathers differently on CPU)."""
    meta = torch.device("meta")
    setup = fsdp_setup(config, world_size, meta, device_type=device)
    backend = TorchDistBackend("gloo", meta)  # a dry issuer never calls the backend
    return step_dry(backend, setup.step(backend, parse_buckets(bucket)[0]), f"fsdp {config.model} schedule")


def measure_fsdp(config: FsdpConfig, backend: Backend, output: Output, session: Session) -> list[Row]:
    """Every bucketing of the config's buckets: an untimed --check step, timed steps, rows as each
    finishes. (A pattern runs on the world: of the ``session`` it takes the memory budget and the rows'
    provenance context.)"""
    with _estimate(config, backend, output, session) as progress:  # refused here when it would not fit
        return _run_bucketings(config, backend, output, session, progress)


def _run_bucketings(config: FsdpConfig, backend: Backend, output: Output, session: Session,
                    progress: StepProgress) -> list[Row]:
    setup = fsdp_setup(config, backend.world_size, backend.device)
    plan, reduction = setup.plan, setup.reduction
    model = plan.model
    output.note(_summary(setup, config))
    if reduction.op == "sum" and reduction.predivide * reduction.postdivide != backend.world_size:
        output.note(f"predivide {reduction.predivide:g} x postdivide {reduction.postdivide:g} is not the "
                    f"world size {backend.world_size}: the reduced gradients are the sum over ranks divided "
                    "by that product, not the average")
    checker = FsdpChecker(setup.state, reduction, backend.rank) if config.check else None
    if checker is not None:  # the unbucketed reference every bucketing must match element for element
        context = f"fsdp {model.label}, bucket 0 MiB (the unbucketed reference)"
        with failures_named(lambda: f"{context} failed on rank {backend.rank}"):
            direct = setup.step(backend, Bucketing("0", 0))
            step_dry(backend, direct, context)
            progress.working(f"--check, {context}")
            run_check(backend, checker, direct, context)
            progress.step_done()
            checker.reference = setup.state.grad_shards.clone()
            del direct  # its buffers (a divided copy of the largest gradient) are not needed again
    rows: list[Row] = []
    # One matmul size for every bucketing: the model's compute does not change with the bucketing.
    compute_size = None if config.compute_size == "auto" else int(config.compute_size)
    param_dtype, reduce_dtype = config.dtypes()
    step_dtype = param_dtype if param_dtype == reduce_dtype else f"{param_dtype}+{reduce_dtype}"
    for bucketing in parse_buckets(",".join(config.buckets)):
        context = f"fsdp {model.label}, bucket {bucketing.describe()}"
        with failures_named(lambda: f"{context} failed on rank {backend.rank}"):  # noqa: B023 - used at once
            step = setup.step(backend, bucketing)
            labels = step_dry(backend, step, context)
            progress.working(context)
            if checker is not None:
                run_check(backend, checker, step, context)
                progress.step_done()
            shared = dict(pattern=FSDP, variant=config.variant, model=model.label, dtype=step_dtype,
                          bucket_mb=bucketing.label, predivide=reduction.predivide,
                          postdivide=reduction.postdivide)
            run = StepRun(backend, step, labels, context, config.iters, config.warmup, shared,
                          row_context=session.row_context, step_done=progress.step_done)
            measured = measure_breakdown(run).rows
            if config.overlap:
                compute_size, overlap_rows = measure_overlap(run, compute_size, setup.state.param_dtype)
                measured += overlap_rows
        for row in measured:
            output.row(row)
        rows.extend(measured)
        step_row = next(row for row in measured if row.phase == "step")
        output.note(f"bucket {bucketing.describe()}: {len(labels)} collectives per step, "
                    f"step p50 {step_row.time_us_p50 / 1e3:.2f} ms{', checked' if checker else ''}")
    output.table_done(rows)
    return rows


def _estimate(config: FsdpConfig, backend: Backend, output: Output, session: Session) -> StepProgress:
    """Say what the run will hold and take before allocating anything; refuse it past the budget."""
    device, world = backend.device.type, backend.world_size
    memory = fsdp_memory(config, world, device)
    budget = budget_of(config.max_memory, session.memory)
    if budget is not None:
        refuse_past_budget(memory, budget, fsdp_hint(config, world, device, budget.limit))
    labels = fsdp_schedule(config, world, config.buckets[0], device)  # on the meta device: nothing held
    cost = StepCost([label.size_bytes for label in labels])
    param_dtype = torch_dtype(config.dtypes()[0])
    alpha_beta = probe_alpha_beta(backend, param_dtype)
    check_seconds = 0.0
    if config.check:
        plan = shard_model(load_model(config.model, config.layers), world, config.fsdp_version)
        per_value = seconds_per_value(plan, param_dtype, backend.device)
        check_seconds = fsdp_check_values(config, world) * per_value
    within = f" (budget {budget.describe()})" if budget is not None else ""
    timing = time_text(fsdp_steps(config), cost, alpha_beta, check_seconds)
    output.note(f"estimate: {memory.describe()}{within}; {timing}")
    return StepProgress(output.note, fsdp_steps(config))


def _summary(setup: FsdpSetup, config: FsdpConfig) -> str:
    plan, reduction = setup.plan, setup.reduction
    model = plan.model
    model_bytes = model.numel * setup.state.param_shards.element_size()
    cut = f" (first {model.layers_kept} of {model.layer_count} layers)" if model.layers_kept else ""
    regather = "re-gathered in backward" if config.reshard else "kept from forward (--no-reshard)"
    api = "list all_gather" if setup.options.gather_list else "flat APIs"
    divide = "" if reduction.op == "avg" else \
        f", predivide {reduction.predivide:g}, postdivide {reduction.postdivide:g}"
    param_dtype, reduce_dtype = config.dtypes()
    return (f"fsdp{config.fsdp_version} {model.name}{cut}: {plural(len(plan.units), 'unit')}, "
            f"{model.param_count} parameters, {model.numel:,} elements "
            f"({approximate_size(model_bytes)} {param_dtype}); at "
            f"{plural(plan.world_size, 'rank')} {plan.shard_numel:,} elements per rank, {plan.padding:,} of "
            f"padding; all-gathers in {param_dtype}, reduce-scatters in {reduce_dtype} "
            f"({reduction.op}{divide}); parameters {regather} (the root's always kept); {api}")
