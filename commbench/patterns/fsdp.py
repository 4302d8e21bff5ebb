"""The FSDP pattern: the collectives of one training step of a model sharded by FSDP.

The step itself (what is issued, in which order, with which buffers) is fsdp_step.py; --check is
fsdp_check.py; timing it and its rows are measure.py. This module holds the pattern's configuration and
runs it: per bucketing, an untimed --check step, timed steps, rows as each bucketing finishes.
"""

from dataclasses import dataclass, field, replace

import torch

from commbench.backends.base import Backend
from commbench.config import LaunchConfig, resolve_launch
from commbench.dtypes import canonical_dtype, torch_dtype
from commbench.errors import UsageError, failures_named
from commbench.output import Output
from commbench.patterns.fsdp_check import FsdpChecker, run_check
from commbench.patterns.fsdp_step import FsdpStep, ShardState
from commbench.patterns.measure import StepRun, measure_breakdown, measure_overlap, step_dry
from commbench.patterns.models import load_model
from commbench.patterns.sharding import (
    Bucketing,
    ShardPlan,
    divide_factors,
    is_power_of_two,
    parse_buckets,
    shard_model,
)
from commbench.results import Row

PATTERN = "fsdp"
GRADIENT_DTYPES = ("float32", "bfloat16", "float16", "float64")
FALLBACKS = ("none", "list")


@dataclass(kw_only=True)
class FsdpConfig:
    """One `commbench pattern fsdp` run."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
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
    pattern: str = PATTERN

    def check_world(self, world_size: int) -> None:
        """Any world size shards the model (parameters are padded to a multiple of it)."""


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
    if compute_size != "auto" and (not compute_size.isdigit() or int(compute_size) < 1):
        raise UsageError(f"--compute-size {config.compute_size!r}: give a matrix size such as 1024, or auto")
    for flag, value, minimum in (("--warmup", config.warmup, 0), ("--iters", config.iters, 1)):
        if value < minimum:
            raise UsageError(f"{flag} {value} must be at least {minimum}")
    return replace(config, launch=resolve_launch(config.launch), dtype=dtype, buckets=buckets,
                   compute_size=compute_size)


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
    gathered = [torch.zeros(plan.max_unit_shard * world, dtype=dtype, device=backend.device)
                for _ in range(2 if config.overlap else 1)]
    output.note(_summary(plan, config, factors, state.param_shards.element_size()))
    if factors[0] * factors[1] != world:
        output.note(f"predivide {factors[0]:g} x postdivide {factors[1]:g} is not the world size {world}: "
                    "the reduced gradients are the sum over ranks divided by that product, not the average")

    def make_step(bucketing: Bucketing) -> FsdpStep:
        return FsdpStep(backend, state, bucketing, factors, gathered, reshard=config.reshard,
                        list_api=config.fallback == "list")

    checker = FsdpChecker(state, factors, backend.rank) if config.check else None
    if checker is not None:  # the unbucketed reference every bucketing must match element for element
        context = f"fsdp {model.label}, bucket 0 MiB (the unbucketed reference)"
        with failures_named(lambda: f"{context} failed on rank {backend.rank}"):
            direct = make_step(Bucketing("0", 0))
            step_dry(backend, direct, context)
            run_check(backend, checker, direct, context)
            checker.reference = state.grad_shards.clone()
    rows: list[Row] = []
    # One matmul size for every bucketing: the model's compute does not change with the bucketing.
    compute_size = None if config.compute_size == "auto" else int(config.compute_size)
    for bucketing in parse_buckets(",".join(config.buckets)):
        context = f"fsdp {model.label}, bucket {bucketing.describe()}"
        with failures_named(lambda: f"{context} failed on rank {backend.rank}"):  # noqa: B023 - used at once
            step = make_step(bucketing)
            labels = step_dry(backend, step, context)
            if checker is not None:
                run_check(backend, checker, step, context)
            shared = dict(pattern=PATTERN, model=model.label, dtype=config.dtype, bucket_mb=bucketing.label,
                          predivide=factors[0], postdivide=factors[1])
            run = StepRun(backend, step, labels, context, config.iters, config.warmup, shared)
            measured = measure_breakdown(run)
            if config.overlap:
                compute_size, overlap_rows = measure_overlap(run, compute_size)
                measured += overlap_rows
        for row in measured:
            output.row(row)
        rows.extend(measured)
        step_row = next(row for row in measured if row.phase == "step")
        output.note(f"bucket {bucketing.describe()}: {len(labels)} collectives per step, "
                    f"step p50 {step_row.time_us_p50 / 1e3:.2f} ms{', checked' if checker else ''}")
    output.table_done(rows)
    return rows


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
