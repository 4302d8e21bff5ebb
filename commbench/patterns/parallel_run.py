"""Running an activation pattern (tp, moe, pp, 3d): build its step on the mesh, check it, time it, rows.

Per run: a note summing up the pattern and its sizes, one dry step (buffers, schedule), with --check one
untimed step whose every collective is verified (verify.py), then timed steps measured as for FSDP
(measure.py: a row per collective, unit, phase and group, and the whole step), and the pattern's own
rows and notes (MoE's imbalance, the pipeline's bubble, 3D's per-group times and critical path).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from commbench.backends.base import Backend
from commbench.core.dtypes import torch_dtype
from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.errors import failures_named
from commbench.patterns.config import ParallelConfig
from commbench.patterns.estimate import StepCost, StepProgress, time_text
from commbench.patterns.measure import Breakdown, Step, StepRun, measure_breakdown, probe_alpha_beta, step_dry
from commbench.patterns.models import ModelSpec, load_model
from commbench.patterns.moe import MoeStep, Router, imbalance_rows
from commbench.patterns.parallel import GroupInfo, make_groups
from commbench.patterns.pp import PipelineLink, PpStep, TimedCompute, bubble_rows, one_f_one_b
from commbench.patterns.schedule import SYNC, Issuer, Label
from commbench.patterns.threed import (
    DataParallel,
    ThreeDStep,
    critical_path_rows,
    stage_layers,
    tensor_parallel_shard,
)
from commbench.patterns.tp import TensorParallel, TpShape, TpStep
from commbench.patterns.verify import CollectiveChecker, agree_on_check
from commbench.results.model import Row
from commbench.running.runner import Session
from commbench.writers.output import Output

Extras = Callable[[StepRun, Breakdown], tuple[list[Row], list[str]]]
Build = Callable[[ParallelConfig, ModelSpec, dict[str, GroupInfo], Backend], "Workload"]


@dataclass
class Workload:
    """A pattern's step on this rank, what tells its runs apart, its summary, its own rows, and what its
    step found wrong under --check beyond the collectives' outputs (filled while the step runs)."""

    step: Step
    variant: str
    summary: str
    extras: Extras | None = None
    mismatches: list[str] = field(default_factory=list)


def layer_names(model: ModelSpec, pattern: str) -> list[str]:
    named = [unit.name for unit in model.units if unit.layer]
    return named or [f"layer{index}" for index in range(model.require_dims(pattern).layers)]


def _activation(config: ParallelConfig, model: ModelSpec) -> tuple[int, str]:
    """One micro-batch's activation: elements, and a description of where they come from."""
    dims = model.require_dims(config.pattern)
    elements = config.tokens(model) * dims.hidden
    size = format_size(elements * torch_dtype(config.dtype).itemsize)
    return elements, (f"sequence {config.seq_len_of(model)} x micro-batch {config.micro_batch_size} x hidden "
                      f"{dims.hidden} = {elements:,} elements ({size} {config.dtype})")


def _groups(count: int) -> str:
    return plural(count, "group") + ("" if count == 1 else " at once")


def build_tp(config: ParallelConfig, model: ModelSpec, groups: dict[str, GroupInfo], backend: Backend
             ) -> Workload:
    elements, described = _activation(config, model)
    group = groups["tp"]
    tensor = TensorParallel(group, TpShape(elements, torch_dtype(config.dtype), config.sequence_parallel),
                            backend.device)
    layers = layer_names(model, config.pattern)
    forward, backward = (", ".join(tensor.per_block(phase)) for phase in ("forward", "backward"))
    summary = (f"tp {model.label}: {plural(len(layers), 'layer')} on {group.size} tensor-parallel ranks "
               f"({_groups(backend.world_size // group.size)}); activation {described}; per attention and "
               f"MLP block forward: {forward}; backward: {backward}")
    return Workload(TpStep(tensor, layers), "sp" if config.sequence_parallel else "no-sp", summary)


def build_moe(config: ParallelConfig, model: ModelSpec, groups: dict[str, GroupInfo], backend: Backend
              ) -> Workload:
    dims = model.require_dims("moe")
    group = groups["ep"]
    router = Router(dims.experts, dims.top_k, config.tokens(model), group.size, config.routing_skew,
                    config.seed)
    layers = layer_names(model, config.pattern)
    step = MoeStep(router, group, layers, config.warmup + config.iters + 2,
                   (dims.hidden, torch_dtype(config.dtype), backend.device))
    summary = (f"moe {model.label}: {plural(len(layers), 'MoE layer')}, {dims.experts} experts over "
               f"{group.size} ranks, top-{dims.top_k}, {router.tokens:,} tokens per rank "
               f"({config.seq_len_of(model)} x {config.micro_batch_size}) of {dims.hidden} elements, Zipf "
               f"skew {config.routing_skew:g}, seed {config.seed}; per layer a count exchange, dispatch and "
               "combine forward, two all-to-alls backward")
    return Workload(step, f"top{dims.top_k}-zipf{config.routing_skew:g}", summary,
                    lambda run, breakdown: imbalance_rows(step, breakdown.rows, run.iters), step.mismatches)


def build_pp(config: ParallelConfig, model: ModelSpec, groups: dict[str, GroupInfo], backend: Backend
             ) -> Workload:
    elements, described = _activation(config, model)
    group = groups["pp"]
    layers = stage_layers(layer_names(model, config.pattern), group.size, group.rank)
    compute = TimedCompute(backend, config.compute_size, len(layers), torch_dtype(config.dtype))
    link = PipelineLink(group, elements, torch_dtype(config.dtype), backend.device)
    step = PpStep(link, one_f_one_b(group.rank, group.size, config.micro_batches), compute)
    size = config.compute_size
    compute_text = f"a {size}x{size} matmul per layer forward, two backward" if size else "none"
    summary = (f"pp {model.label}: {group.size} stages, {plural(config.micro_batches, 'micro-batch')}, "
               f"1F1B; each message one activation: {described}; compute {compute_text}")
    return Workload(step, f"1f1b-m{config.micro_batches}", summary,
                    lambda run, breakdown: bubble_rows(compute, breakdown, group.size, config.micro_batches,
                                                       run.iters))


def build_3d(config: ParallelConfig, model: ModelSpec, groups: dict[str, GroupInfo], backend: Backend
             ) -> Workload:
    elements, described = _activation(config, model)
    dtype, device = torch_dtype(config.dtype), backend.device
    tp, pp, dp = groups["tp"], groups["pp"], groups["dp"]
    layers = stage_layers(layer_names(model, config.pattern), pp.size, pp.rank)
    tensor = TensorParallel(tp, TpShape(elements, dtype, config.sequence_parallel), device)
    link = PipelineLink(pp, elements // tp.size if config.sequence_parallel else elements, dtype, device)
    data = DataParallel(dp, tensor_parallel_shard(model, tp.size, dp.size), dtype, device)
    compute = TimedCompute(backend, config.compute_size, 1, dtype)
    actions = one_f_one_b(pp.rank, pp.size, config.micro_batches)
    step = ThreeDStep((tensor, link, data), layers, actions, compute)
    summary = (f"3d {model.label}: tp {tp.size} x pp {pp.size} x dp {dp.size}, "
               f"{plural(len(layers), 'layer')} on this rank's stage, "
               f"{plural(config.micro_batches, 'micro-batch')} (1F1B), sequence parallel "
               f"{'on' if config.sequence_parallel else 'off'}; activation {described}; data-parallel shard "
               f"{data.shard.numel():,} elements per layer")
    return Workload(step, f"tp{tp.size}-pp{pp.size}-dp{dp.size}{'-sp' if config.sequence_parallel else ''}",
                    summary, lambda run, breakdown: critical_path_rows(run, breakdown, compute))


def check_step(backend: Backend, workload: Workload, groups: dict[str, GroupInfo], context: str) -> None:
    """One untimed step with every collective verified; every rank raises if any rank found a mismatch."""
    ranks = tuple(range(backend.world_size))
    world = GroupInfo("world", None, backend.rank, backend.world_size, ranks, "world")
    checker = CollectiveChecker(groups, world)
    workload.step.run(Issuer(backend, SYNC, context, checker=checker))
    agree_on_check(backend, checker.mismatches + workload.mismatches, context)


def _estimate(config: ParallelConfig, backend: Backend, labels: list[Label], output: Output) -> StepProgress:
    """The run's steps and their time, from this rank's schedule and a probe (patterns/estimate.py)."""
    steps = (1 if config.check else 0) + config.warmup + config.iters
    cost = StepCost([label.size_bytes for label in labels])
    alpha_beta = probe_alpha_beta(backend, torch_dtype(config.dtype))
    output.note(f"estimate: {time_text(steps, cost, alpha_beta)}")
    return StepProgress(output.note, steps)


def measure_parallel(given: ParallelConfig, build: Build, backend: Backend, output: Output, session: Session
                     ) -> list[Row]:
    """The config's pattern, its step made by ``build``: a dry step, --check, timed steps, rows."""
    model = load_model(given.model, given.layers)
    config = given.for_world(model, backend.world_size)
    groups = make_groups(backend, config.mesh(backend.world_size))
    workload = build(config, model, groups, backend)
    output.note(workload.summary)
    if config.seq_len_of(model) != given.seq_len_of(model):
        output.note(f"sequence length {config.seq_len} (the model's {given.seq_len_of(model)} shortened so "
                    f"that sequence parallelism splits it over {groups['tp'].size} tensor-parallel ranks; "
                    "--seq-len sets it)")
    context = f"{config.pattern} {model.label}"
    with failures_named(lambda: f"{context} failed on rank {backend.rank}"):
        labels = step_dry(backend, workload.step, context)
        shared = dict(pattern=config.pattern, variant=workload.variant, model=model.label, dtype=config.dtype)
        layouts = {name: group.layout for name, group in groups.items()}
        with _estimate(config, backend, labels, output) as progress:
            progress.working(context)
            if config.check:
                check_step(backend, workload, groups, context)
                progress.step_done()
            run = StepRun(backend, workload.step, labels, context, config.iters, config.warmup, shared,
                          layouts, row_context=session.row_context,
                          step_done=progress.step_done)
            breakdown = measure_breakdown(run)
        rows, notes = workload.extras(run, breakdown) if workload.extras else (breakdown.rows, [])
    for row in rows:
        output.row(row)
    step_row = next(row for row in rows if row.phase == "step")
    output.note(f"{len(labels)} collectives per step on rank 0, step p50 {step_row.time_us_p50 / 1e3:.2f} ms"
                f"{', checked' if config.check else ''}")
    for note in notes:
        output.note(note)
    output.table_done(rows)
    return rows
