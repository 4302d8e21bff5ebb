"""--check for the FSDP pattern: deterministic parameters and gradients, the gathered parameters compared
on arrival, the reduced gradient shards compared with their expected values and with the unbucketed
(one collective per parameter) result, element for element.

Values are small integers, and gradients world_size x (1..4), so a power-of-two predivision, every partial
sum and the postdivision are exact in every floating dtype whatever order the ranks are added in.
"""

import time
from collections.abc import Iterator

import torch

from commbench.backends.base import Backend
from commbench.errors import RunError
from commbench.patterns.fsdp_step import FsdpStep, ShardState
from commbench.patterns.schedule import SYNC, Issuer
from commbench.patterns.sharding import Bucketing, Reduction, ShardedParam, ShardedUnit, ShardPlan

BLOCK = 1 << 22  # elements of expected values made at a time: --check's temporaries stay near 150 MiB


def blocks(start: int, stop: int) -> Iterator[tuple[int, int]]:
    """[start, stop) in pieces of at most BLOCK elements."""
    for begin in range(start, stop, BLOCK):
        yield begin, min(begin + BLOCK, stop)


def _indices(param: ShardedParam, start: int, stop: int | None, device: torch.device) -> torch.Tensor:
    return torch.arange(start, param.padded if stop is None else stop, device=device)


def param_values(param: ShardedParam, dtype: torch.dtype, device: torch.device, start: int = 0,
                 stop: int | None = None) -> torch.Tensor:
    """Elements [start, stop) of a parameter's padded value (all of it by default): small integers
    (exact in every dtype), zero in the padding."""
    index = _indices(param, start, stop, device)
    values = ((index + 2 * param.index) % 16 + 1).to(dtype)
    values[index >= param.numel] = 0
    return values


def grad_values(param: ShardedParam, rank: int, dtype: torch.dtype, device: torch.device, start: int = 0,
                stop: int | None = None) -> torch.Tensor:
    """Elements [start, stop) of rank ``rank``'s padded gradient: world_size x (1..4), so that a
    power-of-two predivision, every partial sum and the postdivision are exact whatever order the ranks
    are added in."""
    index = _indices(param, start, stop, device)
    values = (((index + rank + param.index) % 4 + 1) * param.world_size).to(dtype)
    values[index >= param.numel] = 0
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
                shard = state.param_shards[unit.offset + param.offset:][:param.chunk]
                first = rank * param.chunk
                for begin, end in blocks(0, param.chunk):
                    shard[begin:end].copy_(param_values(param, state.param_dtype, state.device, first + begin,
                                                        first + end))

    # StepHooks
    def gathered(self, unit: ShardedUnit, rows: torch.Tensor) -> None:
        for param in unit.params:
            what = f"all-gathered parameter {unit.name}.{param.name}"
            for row in range(rows.shape[0]):  # rank by rank, a block at a time
                got = rows[row, param.offset: param.offset + param.chunk]
                first = row * param.chunk
                for begin, end in blocks(0, param.chunk):
                    expected = param_values(param, self.state.param_dtype, self.state.device, first + begin,
                                            first + end)
                    self._compare(got[begin:end], expected, what, first + begin)

    def backward(self, unit: ShardedUnit) -> None:
        for param in unit.params:
            grad = self.state.param_grad(param)
            for begin, end in blocks(0, param.padded):
                grad[begin:end].copy_(grad_values(param, self.rank, self.state.dtype, self.state.device,
                                                  begin, end))

    def expected_block(self, param: ShardedParam, begin: int, end: int) -> torch.Tensor:
        """Elements [begin, end) of this rank's reduced chunk, computed locally with the same op and
        divisions in the same dtype."""
        dtype, device, reduction = self.state.dtype, self.state.device, self.reduction
        first = self.rank * param.chunk
        total = torch.zeros(end - begin, dtype=dtype, device=device)
        for rank in range(param.world_size):
            total += torch.div(grad_values(param, rank, dtype, device, first + begin, first + end),
                               reduction.predivide)
        if reduction.op == "avg":
            total = torch.div(total, param.world_size)
        return torch.div(total, reduction.postdivide)

    def verify(self, bucketing: Bucketing) -> None:
        for unit in self.plan.units:
            for param in unit.params:
                got = self.state.grad_shard(unit, param)
                what = f"reduced gradient {unit.name}.{param.name} (bucket {bucketing.describe()})"
                for begin, end in blocks(0, param.chunk):
                    self._compare(got[begin:end], self.expected_block(param, begin, end), what, begin)
        if self.reference is None:
            return
        for unit in self.plan.units:
            for param in unit.params:
                start = unit.offset + param.offset
                self._compare(self.state.grad_shard(unit, param), self.reference[start: start + param.chunk],
                              f"reduced gradient {unit.name}.{param.name} (bucket {bucketing.describe()}) "
                              "against the unbucketed result")

    def _compare(self, got: torch.Tensor, expected: torch.Tensor, what: str, first: int = 0) -> None:
        """``first``: the element index of ``got[0]`` in what the message names."""
        if self.mismatches or torch.equal(got, expected):
            return  # the first mismatch is the one worth reading
        index = int((got != expected).nonzero()[0].item())
        self.mismatches.append(f"{what}: element {first + index} is {got[index].item():g}, "
                               f"expected {expected[index].item():g}")


def seconds_per_value(plan: ShardPlan, dtype: torch.dtype, device: torch.device) -> float:
    """What --check takes per expected value it makes and compares, timed on a block of the largest
    parameter (for the time estimate; patterns/estimate.py counts the values)."""
    param = max(plan.params(), key=lambda item: item.padded)
    count = min(BLOCK, param.padded)
    fastest = float("inf")
    for _ in range(3):  # the first call pays for allocation and dispatch that later ones do not
        started = time.perf_counter()
        values = param_values(param, dtype, device, 0, count)
        torch.equal(values, values.clone())
        fastest = min(fastest, time.perf_counter() - started)
    return fastest / count


def run_check(backend: Backend, checker: FsdpChecker, step: FsdpStep, context: str) -> None:
    """One untimed step with --check's values; every rank raises if any rank found a mismatch."""
    checker.state.grad_shards.fill_(float("nan"))  # a gradient no callback delivered cannot pass
    step.run(Issuer(backend, SYNC, context), hooks=checker)
    checker.verify(step.bucketing)
    found = backend.all_gather_object(checker.mismatches[:1])
    for rank, mismatches in enumerate(found):
        if mismatches:
            raise RunError(f"{context}: check failed on rank {rank}: {mismatches[0]}")
