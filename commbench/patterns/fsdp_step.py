"""One FSDP training step's collectives, as FSDP issues them, for one bucketing.

For one step, per unit (see sharding.py for the layout): the forward pass all-gathers the unit's
parameters (the next unit's all-gather is issued before this unit computes: FSDP's prefetch); the backward
pass, in reverse unit order, all-gathers them again (unless --no-reshard kept them) and reduce-scatters the
unit's gradients, each flattened and padded to a multiple of the world size, divided by the predivide
factor before the reduction and by the postdivide factor after it. How gradients are grouped into
reduce-scatters is the bucketing (sharding.Bucketing). The step issues every collective through an
Issuer; nothing here calls torch.distributed.
"""

from collections.abc import Callable
from functools import partial
from typing import Protocol

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.patterns.bucketing import BucketOptions, ReduceScatterBucketer, scaled_copy
from commbench.patterns.schedule import Issuer, Label
from commbench.patterns.sharding import Bucketing, ShardedParam, ShardedUnit, ShardPlan


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
        options = BucketOptions(capacity, depth=len(gathered), list_api=list_api,
                                direct_numel=max(direct) if direct and self.predivide != 1 else 0,
                                reserved=bucketing.per_unit)
        self.bucketer = ReduceScatterBucketer(backend, plan.world_size, state.dtype, state.device, options)
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
            collective, output = "all_gather", list(rows.unbind(0))
        else:
            collective, output = "all_gather_base", rows.view(-1)
        args = CollectiveArgs(input=self.state.unit_params(unit), output=output)
        label = Label(collective, unit.name, phase, unit.full_numel * self._element_size, unit.shard_numel)
        self._issuer.issue(label, args)
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
