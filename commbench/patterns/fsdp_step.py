"""One FSDP training step's collectives, as FSDP issues them, for one bucketing.

For one step, per unit (see sharding.py for the layout): the forward pass all-gathers the unit's
parameters in param dtype (the next unit's all-gather is issued as soon as this unit's arrives: FSDP's
prefetch); the backward pass, in reverse unit order, all-gathers them again (unless --no-reshard kept them;
a root unit is always kept) and reduce-scatters the unit's gradients in reduce dtype, each flattened and
padded to its chunks, with the reduction's op and its divisions before and after. How gradients are
grouped into reduce-scatters is the bucketing (sharding.Bucketing). The step issues every collective
through an Issuer; nothing here calls torch.distributed.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.patterns.bucketing import BucketOptions, ReduceScatterBucketer, scaled_copy
from commbench.patterns.schedule import Issuer, Label, dtype_name
from commbench.patterns.sharding import Bucketing, Reduction, ShardedParam, ShardedUnit, ShardPlan


class ShardState:
    """What a rank keeps between steps: its shard of every parameter (param dtype) and of every gradient
    (reduce dtype), and the gradients the backward pass produces, one unit at a time (a single buffer
    every unit reuses: FSDP frees a unit's full gradients once they are reduced)."""

    def __init__(self, plan: ShardPlan, dtypes: tuple[torch.dtype, torch.dtype], device: torch.device
                 ) -> None:
        self.plan = plan
        self.param_dtype, self.dtype = dtypes  # all-gathers in the first, reduce-scatters in the second
        self.device = device
        world = plan.world_size
        self.param_shards = torch.zeros(plan.shard_numel, dtype=self.param_dtype, device=device)
        self.grad_shards = torch.zeros(plan.shard_numel, dtype=self.dtype, device=device)
        # The value world_size stays exact through any power-of-two predivision and the postdivision.
        self.unit_grads = torch.full((world * plan.max_unit_shard,), float(world), dtype=self.dtype,
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


@dataclass(frozen=True)
class StepOptions:
    """How a step issues: ``reshard`` re-gathers non-root units in backward; ``gather_list`` and
    ``scatter_list`` use the list all_gather / reduce_scatter over views instead of the flat APIs."""

    reduction: Reduction
    reshard: bool = True
    gather_list: bool = False
    scatter_list: bool = False


@dataclass
class _Gather:
    unit: ShardedUnit
    args: CollectiveArgs
    slot: int  # which full-parameter buffer it fills


class FsdpStep:
    """One training step's collectives for one bucketing; run() issues them through an Issuer."""

    def __init__(self, backend: Backend, state: ShardState, bucketing: Bucketing,
                 gathered: list[torch.Tensor], options: StepOptions) -> None:
        plan = state.plan
        self.backend = backend
        self.state = state
        self.plan = plan
        self.bucketing = bucketing
        self.options = options
        self.reduction = reduction = options.reduction
        self.gathered = gathered  # full-parameter buffers used in turn: a prefetch needs a second one
        capacity = bucketing.capacity_elements(plan, state.grad_shards.element_size())
        direct = [param.padded for param in plan.params() if param.chunk > capacity]
        bucket_options = BucketOptions(capacity, depth=len(gathered), list_api=options.scatter_list,
                                       direct_numel=max(direct) if direct and reduction.predivide != 1 else 0,
                                       reserved=bucketing.per_unit, op=reduction.op)
        self.bucketer = ReduceScatterBucketer(backend, plan.world_size, state.dtype, state.device,
                                              bucket_options)
        self._issuer: Issuer | None = None

    @property
    def compute_kernels(self) -> int:
        """Matmuls an --overlap step runs: one per unit in each pass."""
        return 2 * len(self.plan.units)

    def run(self, issuer: Issuer, compute: Callable[[], None] | None = None,
            hooks: StepHooks | None = None) -> None:
        self._issuer = issuer
        self.bucketer.issuer = issuer
        units = self.plan.units
        self._pass(units, "forward", compute, hooks, reduce=False)
        self._pass(units[::-1], "backward", compute, hooks, reduce=True)
        self.bucketer.flush_all(unit="", phase="flush")
        self.bucketer.complete_all()

    def _gathers(self, unit: ShardedUnit, phase: str) -> bool:
        return phase == "forward" or (self.options.reshard and not unit.root)

    def _pass(self, order: tuple[ShardedUnit, ...], phase: str, compute: Callable[[], None] | None,
              hooks: StepHooks | None, *, reduce: bool) -> None:
        gathers = iter([unit for unit in order if self._gathers(unit, phase)])
        pending = self._next_gather(gathers, phase, 0)
        for unit in order:
            if pending is not None and pending.unit is unit:
                self.backend.wait(pending.args)  # this unit's parameters are complete
                if hooks is not None:
                    hooks.gathered(unit, self._rows(unit, pending.slot))
                # prefetch: the next unit's all-gather runs while this unit computes
                pending = self._next_gather(gathers, phase, pending.slot + 1)
            if compute is not None:
                compute()
            if reduce:
                if hooks is not None:
                    hooks.backward(unit)
                self._reduce_scatter(unit)

    def _rows(self, unit: ShardedUnit, slot: int) -> torch.Tensor:
        buffer = self.gathered[slot % len(self.gathered)]
        return buffer[: unit.full_numel].view(self.plan.world_size, unit.shard_numel)

    def _next_gather(self, gathers: Iterator[ShardedUnit], phase: str, slot: int) -> _Gather | None:
        unit = next(gathers, None)
        if unit is None:
            return None
        rows = self._rows(unit, slot)
        if self.options.gather_list:
            collective, output = "all_gather", list(rows.unbind(0))
        else:
            collective, output = "all_gather_base", rows.view(-1)
        args = CollectiveArgs(input=self.state.unit_params(unit), output=output)
        size = unit.full_numel * self.state.param_shards.element_size()
        self._issuer.issue(Label(collective, unit.name, phase, size, unit.shard_numel,
                                 dtype_name(self.state.param_dtype)), args)
        return _Gather(unit, args, slot)

    def _reduce_scatter(self, unit: ShardedUnit) -> None:
        if self.bucketing.per_unit:
            self.bucketer.reserve(unit.shard_numel)
        for param in unit.params:
            target = self.state.grad_shard(unit, param)
            self.bucketer.reduce_scatter(self.state.param_grad(param),
                                         partial(deliver, target, self.reduction.postdivide), output=target,
                                         predivide=self.reduction.predivide, unit=unit.name)
        if self.bucketing.per_unit:
            self.bucketer.flush(unit=unit.name, phase="backward")
