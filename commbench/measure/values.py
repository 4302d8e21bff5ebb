"""--check's inputs: values whose results are exactly predictable.

Every rank fills its inputs with small integers that depend on its rank and on the element's index in
its (flattened) input. The range is chosen per dtype, reduce op and world size so that every partial and
final result stays an integer the dtype represents exactly (nccl-tests' approach), so a correct
collective gives bit-exact results in any dtype and any reduction order. Only avg (and premul_sum with a
factor that is not a power of two) divides, and gets a tolerance: see ``CheckValues.tolerance``. The
comparison is check.py's.
"""

import math

import torch

# Values are produced and compared in blocks so a 1 GiB buffer never needs a second copy in int64.
BLOCK = 1 << 22
_MIX = 0x5BD1E995  # < 2**31: (index mod 2**32) * _MIX stays inside int64


def exact_integer_limit(dtype: torch.dtype) -> int:
    """The largest M such that every integer 0..M is exact in the dtype and differs from the poison."""
    if dtype.is_floating_point:
        mantissa_bits = round(-math.log2(torch.finfo(dtype).eps))
        return min(2 ** (mantissa_bits + 1), int(torch.finfo(dtype).max))
    if dtype == torch.uint8:
        return 254  # 255 is the poison
    return min(torch.iinfo(dtype).max, 2**53)  # results are compared in float64


def poison_value(dtype: torch.dtype) -> float:
    """What output buffers hold before a checked op: never a value a correct op produces."""
    if dtype.is_floating_point:
        return float("nan")
    return 255 if dtype == torch.uint8 else -1


def _mix(index: torch.Tensor) -> torch.Tensor:
    """A 32-bit hash of the element index, so neighbouring elements and ranks hold unrelated values."""
    return ((index & 0xFFFFFFFF) * _MIX) & 0xFFFFFFFF


class CheckValues:
    """The values of a checked op: for dtype, reduce op ('' when none) and world size.

    Kinds of values (v is rank r's value at input index i, h a 32-bit hash of i, M the dtype's exact
    integer limit, n the world size):
    - distinct (non-reducing, min, max, and sums with room): v = (h + r) mod (K + 1), with K = M for
      copies, min and max, K = M // n for sum and avg, K = M // (n * ceil(|factor|)) for premul_sum;
    - shared (sum and avg when M < n, e.g. float8 at 16 ranks): a total T = h' mod (M + 1) split over
      the ranks, so the sum is exactly T;
    - powers (prod): v is 1 or 2, with t = h' mod (min(n, log2 M) + 1) ranks holding a 2, so the
      product is exactly 2**t.
    """

    def __init__(self, dtype: torch.dtype, op: str, world_size: int, device: torch.device,
                 premul_factor: float = 1.0) -> None:
        self.dtype = dtype
        self.op = op
        self.world_size = world_size
        self.device = device
        self.premul_factor = premul_factor
        limit = exact_integer_limit(dtype)
        if op == "prod":
            self.kind = "powers"
            self.max_twos = min(world_size, int(math.log2(limit)))
        elif op in ("sum", "avg", "premul_sum"):
            # the largest total that stays exact once scaled by the premul_sum factor
            room = limit // (max(1, math.ceil(abs(premul_factor))) if op == "premul_sum" else 1)
            self.kind = "distinct" if room // world_size >= 1 else "shared"
            self.limit = room // world_size if self.kind == "distinct" else room
        else:
            self.kind = "distinct"
            self.limit = limit

    # --- values ----------------------------------------------------------------------------------
    def source(self, rank: int, start: int, count: int) -> torch.Tensor:
        """Rank ``rank``'s input values at indices start .. start + count, as int64."""
        index = torch.arange(start, start + count, dtype=torch.int64, device=self.device)
        mixed = _mix(index)
        n = self.world_size
        if self.kind == "distinct":
            return (mixed + rank) % (self.limit + 1)
        if self.kind == "shared":
            total = (mixed >> 16) % (self.limit + 1)
            return total // n + (((mixed & 0xFFFF) + rank) % n < total % n).to(torch.int64)
        twos = (mixed >> 16) % (self.max_twos + 1)
        return 1 + (((mixed & 0xFFFF) + rank) % n < twos).to(torch.int64)

    def expected(self, source_rank: int | None, start: int, count: int) -> torch.Tensor:
        """float64 values an output must hold for input indices start .. start + count: ``source_rank``'s
        inputs, or (None) the reduction over every rank's."""
        if source_rank is not None:
            return self.source(source_rank, start, count).to(torch.float64)
        return self.reduced(start, count)

    def reduced(self, start: int, count: int) -> torch.Tensor:
        """The op over every rank's values at input indices start .. start + count, as float64."""
        combine = {"prod": torch.mul, "min": torch.minimum, "max": torch.maximum}.get(self.op, torch.add)
        result = self.source(0, start, count)
        for rank in range(1, self.world_size):
            result = combine(result, self.source(rank, start, count))
        if self.op == "avg":
            if not self.dtype.is_floating_point:  # integer avg: the sum divided with truncation
                return (result // self.world_size).to(torch.float64)
            return result.to(torch.float64) / self.world_size
        if self.op == "premul_sum":
            return result.to(torch.float64) * self.premul_factor
        return result.to(torch.float64)

    def tolerance(self, expected: torch.Tensor) -> torch.Tensor | float:
        """How far an element may be from ``expected`` and still count as right.

        0 (bit-exact) except for avg and premul_sum, whose terms are divided or scaled: NCCL's avg
        multiplies each input by 1/n before summing (gloo sums, then divides once), so each of the n
        terms and n - 1 partial sums is rounded once, each by at most eps/2 of a value no larger than
        the result: n x eps x |expected| bounds both. Integers: avg truncates (NCCL) where one could
        round, so 1; premul_sum may round each of the n terms, so n.
        """
        if self.op not in ("avg", "premul_sum"):
            return 0.0
        if not self.dtype.is_floating_point:
            return 1.0 if self.op == "avg" else float(self.world_size)
        return self.world_size * torch.finfo(self.dtype).eps * expected.abs()


def fill_inputs(inputs: list[torch.Tensor], outputs: list[torch.Tensor], rank: int,
                values: CheckValues) -> None:
    """Poison every output, then write this rank's values into its inputs, as one flat index space.

    Outputs first: an in-place layout's input is a view of its output (or the other way round), and the
    input's values must win.
    """
    poison = poison_value(values.dtype)
    for tensor in outputs:
        tensor.fill_(poison)
    position = 0
    for tensor in inputs:
        flat = tensor.view(-1)
        for start in range(0, flat.numel(), BLOCK):
            count = min(BLOCK, flat.numel() - start)
            flat[start:start + count].copy_(_as_dtype(values.source(rank, position + start, count),
                                                      values.dtype))
        position += flat.numel()


def _as_dtype(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # float8 and friends convert from floating point only
    return values.to(torch.float64).to(dtype) if dtype.is_floating_point else values.to(dtype)
