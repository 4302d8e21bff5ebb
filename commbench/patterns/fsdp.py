"""The FSDP pattern: the collectives of one training step of a model sharded by FSDP2 or FSDP1.

The step itself (what is issued, in which order, with which buffers) is fsdp_step.py; --check is
fsdp_check.py; timing it and its rows are measure.py. This module holds the pattern's configuration and
runs it: per bucketing, an untimed --check step, timed steps, rows as each bucketing finishes.
``fsdp_schedule`` gives a step's collectives without running anything (on the meta device: no memory).
"""

from dataclasses import dataclass, field, replace

import torch

from commbench.backends.base import Backend
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config import LaunchConfig, resolve_launch
from commbench.dtypes import canonical_dtype, torch_dtype
from commbench.errors import UsageError, failures_named
from commbench.output import Output
from commbench.patterns.fsdp_check import FsdpChecker, run_check
from commbench.patterns.fsdp_step import FsdpStep, ShardState, StepOptions
from commbench.patterns.measure import StepRun, measure_breakdown, measure_overlap, step_dry
from commbench.patterns.models import load_model
from commbench.patterns.schedule import Label
from commbench.patterns.sharding import (
    FSDP_VERSIONS,
    Bucketing,
    Reduction,
    ShardPlan,
    fsdp_reduction,
    is_power_of_two,
    parse_buckets,
    shard_model,
)
from commbench.results import Row
from commbench.runner import Session

PATTERN = "fsdp"
GRADIENT_DTYPES = ("float32", "bfloat16", "float16", "float64")
FALLBACKS = ("none", "list")


@dataclass(kw_only=True)
class FsdpConfig:
    """One `commbench pattern fsdp` run."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
    model: str = "gpt2-small"  # a preset name or a YAML file
    layers: int | None = None  # keep only the first N layer units
    fsdp_version: int = 2  # 2: fully_shard (per-parameter dim-0 shards); 1: FullyShardedDataParallel
    buckets: list[str] = field(default_factory=lambda: ["unit"])  # 'unit' or sizes in MiB
    predivide: float | None = None  # None: FSDP's own reduction (AVG, or a split division for float16)
    postdivide: float | None = None
    fallback: str = "none"  # 'list': list reduce_scatter / all_gather instead of the flat APIs
    reshard: bool = True  # re-gather non-root parameters in the backward pass (FSDP's FULL_SHARD)
    overlap: bool = False
    compute_size: str = "auto"  # matmul size for --overlap, or 'auto': as long as the communication
    check: bool = False
    dtype: str = "float32"  # the model's dtype: all-gathers and reduce-scatters unless set apart below
    param_dtype: str | None = None  # mixed precision: the all-gathers' dtype
    reduce_dtype: str | None = None  # mixed precision: the reduce-scatters' dtype [default: param_dtype]
    warmup: int = 0  # the dry step that sizes every buffer comes first; the median of 3 absorbs a cold step
    iters: int = 3
    pattern: str = PATTERN

    def check_world(self, world_size: int) -> None:
        """Any world size shards the model (parameters are padded to a multiple of it)."""

    @property
    def variant(self) -> str:
        return f"fsdp{self.fsdp_version}"

    def dtypes(self) -> tuple[str, str]:
        """(all-gather dtype, reduce-scatter dtype): FSDP's reduce_dtype defaults to param_dtype."""
        param = self.param_dtype or self.dtype
        return param, self.reduce_dtype or param


def resolve_fsdp(config: FsdpConfig) -> FsdpConfig:
    """A validated copy; UsageError (exit 2) on the first problem, before any process group starts."""
    load_model(config.model, config.layers)  # the spec's problems surface here, naming the file
    if config.fsdp_version not in FSDP_VERSIONS:
        raise UsageError(f"--fsdp-version {config.fsdp_version}: choose 2 (fully_shard) or 1 "
                         "(FullyShardedDataParallel)")
    names = {}
    for flag, value in (("--dtype", config.dtype), ("--param-dtype", config.param_dtype),
                        ("--reduce-dtype", config.reduce_dtype)):
        names[flag] = None if value is None else canonical_dtype(value)
        if names[flag] is not None and names[flag] not in GRADIENT_DTYPES:
            raise UsageError(f"{flag} {names[flag]}: FSDP parameters and gradients are floating point; "
                             f"choose from {', '.join(GRADIENT_DTYPES)}")
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
    return replace(config, launch=resolve_launch(config.launch), dtype=names["--dtype"],
                   param_dtype=names["--param-dtype"], reduce_dtype=names["--reduce-dtype"], buckets=buckets,
                   compute_size=compute_size)


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


def run_fsdp(configs: list[FsdpConfig], backend: Backend, output: Output, session: Session | None = None
             ) -> list[Row]:
    """Every bucketing of the (one) config's buckets: an untimed --check step, timed steps, rows as each
    finishes. (A pattern runs on the world: of the ``session`` it takes the rows' provenance context.)"""
    (config,) = configs
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
            run_check(backend, checker, direct, context)
            checker.reference = setup.state.grad_shards.clone()
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
            if checker is not None:
                run_check(backend, checker, step, context)
            shared = dict(pattern=PATTERN, variant=config.variant, model=model.label, dtype=step_dtype,
                          bucket_mb=bucketing.label, predivide=reduction.predivide,
                          postdivide=reduction.postdivide)
            run = StepRun(backend, step, labels, context, config.iters, config.warmup, shared,
                          row_context=session.row_context if session else None)
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


def _summary(setup: FsdpSetup, config: FsdpConfig) -> str:
    plan, reduction = setup.plan, setup.reduction
    model = plan.model
    mib = model.numel * setup.state.param_shards.element_size() / 2**20
    cut = f" (first {model.layers_kept} of {model.layer_count} layers)" if model.layers_kept else ""
    regather = "re-gathered in backward" if config.reshard else "kept from forward (--no-reshard)"
    api = "list all_gather" if setup.options.gather_list else "flat APIs"
    divide = "" if reduction.op == "avg" else \
        f", predivide {reduction.predivide:g}, postdivide {reduction.postdivide:g}"
    param_dtype, reduce_dtype = config.dtypes()
    return (f"fsdp{config.fsdp_version} {model.name}{cut}: {len(plan.units)} units, {model.param_count} "
            f"parameters, {model.numel:,} elements ({mib:,.1f} MiB {param_dtype}); at {plan.world_size} "
            f"ranks {plan.shard_numel:,} elements per rank, {plan.padding:,} of padding; all-gathers in "
            f"{param_dtype}, reduce-scatters in {reduce_dtype} ({reduction.op}{divide}); parameters "
            f"{regather} (the root's always kept); {api}")
