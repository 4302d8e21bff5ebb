"""--check: every output element compared with what the inputs predict (the inputs: values.py).

Descriptors (commbench.measure.collectives) say which output part should hold which values: an
``Expected`` names an output view and either the rank whose input it copies (from which input index)
or, for reductions, the input index the reduction over all ranks starts at. This module runs the
checked op, compares on every rank and totals the wrong elements over ranks.
"""

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from commbench.measure.collectives.base import Expected
from commbench.measure.values import BLOCK, CheckValues

if TYPE_CHECKING:
    from commbench.measure.collectives.base import Buffers, Collective, Layout
    from commbench.measure.timing import BoundOp


@dataclass(frozen=True)
class CheckResult:
    """One rank's comparison: the wrong elements and the first of them."""

    wrong: int = 0
    first_index: int | None = None
    expected: float | None = None
    actual: float | None = None

    def floats(self) -> list[float]:
        """As floats, for a cheap exchange between ranks (counts and indices stay exact below 2**53)."""
        missing = float("nan")
        return [float(self.wrong), missing if self.first_index is None else float(self.first_index),
                missing if self.expected is None else self.expected,
                missing if self.actual is None else self.actual]

    @classmethod
    def from_floats(cls, values: list[float]) -> "CheckResult":
        wrong, index, expected, actual = values
        if not wrong:
            return cls()
        return cls(int(wrong), int(index), expected, actual)

    def describe(self, rank: int) -> str:
        return (f"rank {rank} index {self.first_index}: expected {_number(self.expected)}, "
                f"got {_number(self.actual)}")


def _number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "nan"
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def output_digest(expected: list[Expected]) -> str:
    """A hash of the bytes of every output view --check reads on this rank: implementations that
    accumulate in another order leave other bits (each still within the tolerance)."""
    digest = hashlib.sha256()
    for item in expected:
        digest.update(item.actual.detach().reshape(-1).contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()


def compare(expected: list[Expected], values: CheckValues) -> CheckResult:
    """Count the wrong elements over every expected view; note the first one (lowest output index)."""
    wrong = 0
    first: tuple[int, float, float] | None = None
    for item in expected:
        flat = item.actual.reshape(-1)
        for start in range(0, flat.numel(), BLOCK):
            count = min(BLOCK, flat.numel() - start)
            want = values.expected(item.source_rank, item.input_start + start, count)
            got = flat[start:start + count].to(torch.float64)
            bad = ~((got - want).abs() <= values.tolerance(want))  # NaN (poison left over) is bad
            found = int(bad.sum().item())
            if not found:
                continue
            wrong += found
            position = int(bad.nonzero()[0].item())
            index = item.offset + start + position
            if first is None or index < first[0]:
                first = (index, float(want[position].item()), float(got[position].item()))
    if first is None:
        return CheckResult(wrong)
    return CheckResult(wrong, *first)


class SizeChecker:
    """--check for one size and mode: fill, run one op, compare on every rank, total over ranks."""

    def __init__(self, op: "BoundOp", mode: str, collective: "Collective", layout: "Layout",
                 buffers: "Buffers", values: CheckValues) -> None:
        self.op, self.mode = op, mode
        self.collective, self.layout, self.buffers, self.values = collective, layout, buffers, values
        self.wrong = 0
        self.first_wrong = ""
        self.digest = ""  # every rank's output after the first checked op, hashed (output_digest)

    def run(self) -> None:
        op, backend = self.op, self.op.backend
        self.collective.fill(self.layout, self.buffers, self.values)
        backend.sync_device()
        was_async = op.args.async_op
        op.args.async_op = self.mode == "async"  # in async mode the checked op is issued async too
        op()
        backend.complete(op.args)
        op.args.async_op = was_async
        local = compare(self.collective.expect(self.layout, self.buffers), self.values)
        # every rank of every group: the groups check at the same time, wrong counts add up
        results = [CheckResult.from_floats(values) for values in backend.all_gather_floats(local.floats())]
        self.wrong += sum(result.wrong for result in results)
        if not self.first_wrong:
            self.first_wrong = next((result.describe(rank) for rank, result in enumerate(results)
                                     if result.wrong), "")
        if not self.digest:
            mine = output_digest(self.collective.expect(self.layout, self.buffers))
            ranks = backend.all_gather_object(mine)
            self.digest = hashlib.sha256("|".join(ranks).encode()).hexdigest()[:16]
        for tensor in self.buffers.tensors():
            tensor.zero_()  # back to zeros before timing resumes
