"""--check for the FSDP pattern: deterministic parameters and gradients, the gathered parameters compared
on arrival, the reduced gradient shards compared with their expected values and with the unbucketed
(one collective per parameter) result, element for element.

Values are small integers, and gradients world_size x (1..4), so a power-of-two predivision, every partial
sum and the postdivision are exact in every floating dtype whatever order the ranks are added in.
"""

import torch

from commbench.backends.base import Backend
from commbench.errors import RunError
from commbench.patterns.fsdp_step import FsdpStep, ShardState
from commbench.patterns.schedule import SYNC, Issuer
from commbench.patterns.sharding import Bucketing, Reduction, ShardedParam, ShardedUnit


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


class FsdpChecker:
    """--check: deterministic parameters and gradients, the gathered parameters compared on arrival, the
    reduced gradient shards compared with their expected values and with the unbucketed results."""

    def __init__(self, state: ShardState, reduction: Reduction, rank: int) -> None:
        self.state = state
        self.plan = state.plan
        self.rank = rank
        self.reduction = reduction
        self.mismatches: list[str] = []
        self.reference: torch.Tensor | None = None  # the unbucketed (one collective per parameter) result
        for unit in self.plan.units:
            for param in unit.params:
                full = param_values(param, state.param_dtype, state.device)
                start = unit.offset + param.offset
                chunk = full[rank * param.chunk: (rank + 1) * param.chunk]
                state.param_shards[start: start + param.chunk].copy_(chunk)

    # StepHooks
    def gathered(self, unit: ShardedUnit, rows: torch.Tensor) -> None:
        for param in unit.params:
            got = rows[:, param.offset: param.offset + param.chunk].reshape(-1)
            self._compare(got, param_values(param, self.state.param_dtype, self.state.device),
                          f"all-gathered parameter {unit.name}.{param.name}")

    def backward(self, unit: ShardedUnit) -> None:
        for param in unit.params:
            self.state.param_grad(param).copy_(grad_values(param, self.rank, self.state.dtype,
                                                           self.state.device))

    def expected_shard(self, param: ShardedParam) -> torch.Tensor:
        """This rank's reduced chunk, computed locally with the same op and divisions in the same dtype."""
        dtype, device, reduction = self.state.dtype, self.state.device, self.reduction
        total = torch.zeros(param.chunk, dtype=dtype, device=device)
        window = slice(self.rank * param.chunk, (self.rank + 1) * param.chunk)
        for rank in range(param.world_size):
            total += torch.div(grad_values(param, rank, dtype, device)[window], reduction.predivide)
        if reduction.op == "avg":
            total = torch.div(total, param.world_size)
        return torch.div(total, reduction.postdivide)

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


def run_check(backend: Backend, checker: FsdpChecker, step: FsdpStep, context: str) -> None:
    """One untimed step with --check's values; every rank raises if any rank found a mismatch."""
    checker.state.grad_shards.fill_(float("nan"))  # a gradient no callback delivered cannot pass
    step.run(Issuer(backend, SYNC, context), hooks=checker)
    checker.verify(step.bucketing)
    found = backend.all_gather_object(checker.mismatches[:1])
    for rank, mismatches in enumerate(found):
        if mismatches:
            raise RunError(f"{context}: check failed on rank {rank}: {mismatches[0]}")
