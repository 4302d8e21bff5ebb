"""3D parallelism: tensor, pipeline and data parallel groups on one world, each running its pattern while
the others run theirs, as one training step does.

The world is a mesh pp x dp x tp (tensor innermost, Megatron-LM's order). A rank is stage s of its
pipeline and holds 1/p of the layers. It runs its stage's 1F1B schedule (pp.py); each forward (backward)
pass of a micro-batch goes through its layers issuing their tensor-parallel collectives (tp.py) in its
tensor-parallel group, with one --compute-size matmul per layer forward and two backward. Its data-
parallel group shards each layer's tensor-parallel slice FSDP2's way, without resharding between
micro-batches (as torchtitan runs FSDP under pipelining): the layer's all-gather before its first
micro-batch's forward, its reduce-scatter after its last micro-batch's backward. Under sequence
parallelism the messages between stages are the sequence-sharded activations (tokens x hidden / t).

Per step, each group's time is the sum of its collectives on a rank (the largest over ranks), and the
step's critical path is the slowest rank's step split into its time in each group's collectives, in
compute, and the rest.
"""

from collections.abc import Callable

import torch

from commbench.backends.base import CollectiveArgs
from commbench.measure.sampling import Sampled
from commbench.patterns.measure import Breakdown, StepRun, step_totals
from commbench.patterns.models import ModelSpec
from commbench.patterns.parallel import GroupInfo
from commbench.patterns.pp import BACKWARD, FORWARD, Action, PipelineLink, TimedCompute
from commbench.patterns.schedule import Issuer, Label, dtype_name
from commbench.patterns.sharding import dim0_chunk, fsdp_reduction
from commbench.patterns.tp import TensorParallel
from commbench.results.model import Row

GROUPS = ("tp", "pp", "dp")


def stage_layers(layers: list[str], stages: int, stage: int) -> list[str]:
    """Stage ``stage``'s consecutive share of the layers (the first stages take one more when uneven)."""
    base, extra = divmod(len(layers), stages)
    start = stage * base + min(stage, extra)
    return layers[start: start + base + (stage < extra)]


def tensor_parallel_shard(model: ModelSpec, tp: int, dp: int) -> int:
    """A layer's elements on one data-parallel rank: each matrix split t ways (1-D parameters kept
    whole), then FSDP2's dim-0 chunk of that slice over the d data-parallel ranks."""
    block = next(unit for unit in model.units if unit.layer)
    total = 0
    for param in block.params:
        shape = (-(-param.shape[0] // tp), *param.shape[1:]) if len(param.shape) > 1 else param.shape
        total += dim0_chunk(shape, dp)
    return total


class DataParallel:
    """A layer's FSDP all-gather and reduce-scatter over the data-parallel group."""

    def __init__(self, group: GroupInfo, shard: int, dtype: torch.dtype, device: torch.device) -> None:
        self.group = group
        self.shard = torch.zeros(shard, dtype=dtype, device=device)
        self.full = torch.zeros(shard * group.size, dtype=dtype, device=device)
        self.op = fsdp_reduction(2, dtype_name(dtype), group.size).op

    def _issue(self, issuer: Issuer, unit: str, phase: str, collective: str) -> None:
        if self.group.size == 1:
            return
        gather = collective == "all_gather_base"
        source, target = (self.shard, self.full) if gather else (self.full, self.shard)
        args = CollectiveArgs(input=source, output=target, op=self.op, process_group=self.group.process_group)
        issuer.issue(Label(collective, unit, phase, self.full.numel() * self.full.element_size(),
                           self.shard.numel(), dtype_name(self.full.dtype), "" if gather else self.op, "dp",
                           self.group.size), args)

    def gather(self, issuer: Issuer, unit: str) -> None:
        self._issue(issuer, unit, FORWARD, "all_gather_base")

    def reduce(self, issuer: Issuer, unit: str) -> None:
        self._issue(issuer, unit, BACKWARD, "reduce_scatter_base")


class ThreeDStep:
    """One rank's step: its stage's 1F1B schedule, its layers' tensor-parallel collectives per
    micro-batch, and their data-parallel all-gathers and reduce-scatters."""

    compute_kernels = 0

    def __init__(self, parts: tuple[TensorParallel, PipelineLink, DataParallel], layers: list[str],
                 actions: list[Action], compute: TimedCompute) -> None:
        self.tensor, self.link, self.data = parts
        self.layers = layers
        self.actions = actions
        self.compute = compute
        self.last = max(action.micro_batch for action in actions)

    def run(self, issuer: Issuer, compute: Callable[[], None] | None = None) -> None:
        for action in self.actions:
            if action.kind == FORWARD:
                for unit in self.layers:
                    if action.micro_batch == 0:
                        self.data.gather(issuer, unit)
                    self.tensor.forward(issuer, unit)
                    self.compute(1)
            elif action.kind == BACKWARD:
                for unit in reversed(self.layers):
                    self.tensor.backward(issuer, unit)
                    self.compute(2)
                    if action.micro_batch == self.last:
                        self.data.reduce(issuer, unit)
            else:
                self.link.issue(issuer, action)
        self.compute.end_step()


def critical_path_rows(run: StepRun, breakdown: Breakdown, compute: TimedCompute
                       ) -> tuple[list[Row], list[str]]:
    """Per group, its collectives' time per step (the largest over ranks: phase 'comm'); and the step's
    critical path: the slowest rank's step split into each group's collectives, its compute and the rest
    (phase 'critical path')."""
    iters, steps = run.iters, breakdown.step.per_rank_seconds
    ranks = range(len(steps))
    computes = compute.backend.all_gather_floats(compute.per_step[-iters:])
    keys = {group: [key for key in breakdown.keys if key[3] == group] for group in GROUPS}
    totals = {group: [[sum(breakdown.parts[key].per_rank_seconds[rank][index] for key in keys[group])
                       for index in range(iters)] for rank in ranks] for group in GROUPS}
    critical = [max(ranks, key=lambda rank: steps[rank][index]) for index in range(iters)]  # noqa: B023
    path = {group: [totals[group][rank][index] for index, rank in enumerate(critical)] for group in GROUPS}
    path["compute"] = [computes[rank][index] for index, rank in enumerate(critical)]
    path["other"] = [steps[rank][index] - sum(path[name][index] for name in (*GROUPS, "compute"))
                     for index, rank in enumerate(critical)]
    common = dict(collective="step", mode="sync", op="", busbw_factor=1.0)
    rows = list(breakdown.rows)
    for group in (group for group in GROUPS if keys[group]):
        sizes = step_totals(breakdown, keys[group])
        rows.append(run.row(Sampled(totals[group], iters), unit="", phase="comm", parallel=group, **common,
                            **sizes))
        rows.append(run.row(Sampled([path[group]], iters), unit="", phase="critical path", parallel=group,
                            **common, **sizes))
    for name in ("compute", "other"):
        rows.append(run.row(Sampled([path[name]], iters), unit=name, phase="critical path", parallel="",
                            size_bytes=0, count_per_rank=0, calls_per_step=0, **common))
    slowest = max(set(critical), key=critical.count)
    total = sum(steps[rank][index] for index, rank in enumerate(critical))
    parts = ", ".join(f"{name} {100 * sum(values) / total:.0f}%" for name, values in path.items()
                      if name not in GROUPS or keys[name])
    return rows, [f"critical path: rank {slowest} was the slowest in {critical.count(slowest)} of {iters} "
                  f"steps; its steps: {parts}"]
