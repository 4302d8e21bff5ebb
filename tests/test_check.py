"""--check's values: exact in every dtype at every world size, rank- and index-dependent, and compared
element by element (the collectives themselves are exercised in test_correctness.py)."""

import pytest
import torch

from commbench.measure.check import compare
from commbench.measure.collectives import Expected
from commbench.measure.values import CheckValues, exact_integer_limit, fill_inputs, poison_value

CPU = torch.device("cpu")
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.float8_e4m3fn, torch.float8_e5m2]
EXACT_OPS = ["sum", "prod", "min", "max", ""]
COUNT = 4096


def _round_trips(values: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether every value is exactly representable in the dtype (and in its range)."""
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return bool(((values >= info.min) & (values <= info.max)).all())
    return torch.equal(values.to(dtype).to(torch.float64), values)


def _partials(pattern: CheckValues, world_size: int, order: list[int]) -> list[torch.Tensor]:
    """Every partial result of reducing the ranks' values in ``order``, in float64."""
    combine = {"prod": torch.mul, "min": torch.minimum, "max": torch.maximum}.get(pattern.op, torch.add)
    values = [pattern.source(rank, 0, COUNT).to(torch.float64) for rank in order]
    partial, found = values[0], [values[0]]
    for value in values[1:]:
        partial = combine(partial, value)
        found.append(partial)
    return found


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", EXACT_OPS, ids=lambda op: op or "copy")
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 8, 24, 300])
def test_every_input_and_partial_result_is_exact(dtype, op, world_size):
    pattern = CheckValues(dtype, op, world_size, CPU)
    if not op:  # copies: the inputs alone
        for rank in range(world_size):
            assert _round_trips(pattern.source(rank, 0, COUNT).to(torch.float64), dtype)
        return
    for order in (list(range(world_size)), list(reversed(range(world_size)))):  # any reduction order
        for partial in _partials(pattern, world_size, order):
            assert _round_trips(partial, dtype), (dtype, op, world_size)
        assert torch.equal(pattern.reduced(0, COUNT), _partials(pattern, world_size,
                                                                list(range(world_size)))[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.float8_e5m2], ids=str)
@pytest.mark.parametrize("op", EXACT_OPS, ids=lambda op: op or "copy")
def test_values_depend_on_rank_and_index(dtype, op):
    world_size = 4
    pattern = CheckValues(dtype, op, world_size, CPU)
    ranks = [pattern.source(rank, 0, COUNT) for rank in range(world_size)]
    # neighbouring elements differ, and so do ranks at the same element (most of the time)
    assert (ranks[0][1:] != ranks[0][:-1]).float().mean() > 0.2
    assert (ranks[0] != ranks[1]).float().mean() > 0.2
    # an offset read (element i + 1 for i) would be noticed
    assert (ranks[1][:-1] != ranks[0][1:]).float().mean() > 0.2
    if op:
        result = pattern.reduced(0, COUNT)
        assert len(result.unique()) > 2  # the result varies along the buffer


def test_the_source_is_the_same_for_a_block_as_for_the_whole():
    pattern = CheckValues(torch.float32, "sum", 3, CPU)
    whole = pattern.source(2, 0, 1000)
    assert torch.equal(whole[300:700], pattern.source(2, 300, 400))


def test_limits_and_poison():
    assert exact_integer_limit(torch.float32) == 2**24
    assert exact_integer_limit(torch.bfloat16) == 256
    assert exact_integer_limit(torch.float16) == 2048
    assert exact_integer_limit(torch.float8_e4m3fn) == 16
    assert exact_integer_limit(torch.int8) == 127
    assert exact_integer_limit(torch.uint8) == 254  # below the poison
    assert poison_value(torch.uint8) == 255 and poison_value(torch.int32) == -1
    assert poison_value(torch.bfloat16) != poison_value(torch.bfloat16)  # NaN


def _premultiplied_average(pattern: CheckValues, world_size: int, dtype: torch.dtype) -> torch.Tensor:
    """NCCL's avg for floats: every term multiplied by 1/n in the dtype, summed in the dtype."""
    scale = torch.tensor(1.0 / world_size, dtype=dtype)
    total = torch.zeros(COUNT, dtype=dtype)
    for rank in range(world_size):
        total = total + pattern.source(rank, 0, COUNT).to(dtype) * scale
    return total.to(torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("world_size", [2, 3, 4, 7, 8])
def test_avg_tolerance_covers_both_ways_of_averaging(dtype, world_size):
    pattern = CheckValues(dtype, "avg", world_size, CPU)
    expected = pattern.reduced(0, COUNT)
    tolerance = pattern.tolerance(expected)
    total = sum(pattern.source(r, 0, COUNT) for r in range(world_size))  # exact in the dtype
    summed_then_divided = (total.to(dtype) / world_size).to(torch.float64)  # gloo's way
    for result in (_premultiplied_average(pattern, world_size, dtype), summed_then_divided):
        assert bool(((result - expected).abs() <= tolerance).all())
    # and it is tight enough to catch a wrong average: the sum, or one rank's contribution missing
    wrong = sum(pattern.source(r, 0, COUNT) for r in range(1, world_size)).to(torch.float64) / world_size
    assert (~((wrong - expected).abs() <= tolerance)).float().mean() > 0.5


def test_premul_sum_with_a_power_of_two_factor_is_exact():
    pattern = CheckValues(torch.bfloat16, "premul_sum", 4, CPU, premul_factor=0.5)
    result = torch.zeros(COUNT, dtype=torch.bfloat16)
    for rank in range(4):
        result = result + pattern.source(rank, 0, COUNT).to(torch.bfloat16) * 0.5
    assert torch.equal(result.to(torch.float64), pattern.reduced(0, COUNT))


def test_fill_then_compare_counts_each_wrong_element():
    pattern = CheckValues(torch.float32, "", 2, CPU)
    inputs = [torch.empty(10), torch.empty(6)]
    output = torch.empty(16)
    fill_inputs(inputs, [output], 1, pattern)
    assert torch.isnan(output).all()  # outputs are poisoned first
    assert torch.equal(torch.cat(inputs).to(torch.float64), pattern.source(1, 0, 16).to(torch.float64))
    output.copy_(torch.cat(inputs))
    expected = [Expected(output[:10], 1, 0, 100), Expected(output[10:], 1, 10, 110)]
    assert compare(expected, pattern).wrong == 0
    output[12] += 1
    output[3] = float("nan")
    result = compare(expected, pattern)
    assert (result.wrong, result.first_index) == (2, 103)
    assert result.describe(1).startswith("rank 1 index 103: expected ") and result.describe(1).endswith("nan")


def test_an_output_never_written_is_all_wrong():
    pattern = CheckValues(torch.int32, "sum", 3, CPU)
    output = torch.empty(50, dtype=torch.int32)
    fill_inputs([], [output], 0, pattern)
    assert compare([Expected(output, None, 0, 0)], pattern).wrong == 50


def test_an_in_place_layout_keeps_its_input():
    pattern = CheckValues(torch.float32, "", 2, CPU)
    gathered = torch.empty(8)
    own_chunk = gathered[4:]  # all_gather in place: the input is a view of the output
    fill_inputs([own_chunk], [gathered], 1, pattern)
    assert torch.isnan(gathered[:4]).all()
    assert torch.equal(gathered[4:].to(torch.float64), pattern.source(1, 0, 4).to(torch.float64))
