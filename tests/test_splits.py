"""--splits: the generated spread's formulas and the checks on split files (exit 2 naming the file)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commbench.core.splits import (
    check_element_sizes,
    check_world_size,
    chunk_counts,
    pair_counts,
    parse_splits,
    plan_all_to_allv,
    ring_distance,
    spread_weight,
)
from commbench.errors import UsageError
from tests.dist_helpers import commbench


def test_spread_weights_run_from_1_minus_f_to_1_plus_f():
    assert [spread_weight(r, 5, 0.5) for r in range(5)] == [0.5, 0.75, 1.0, 1.25, 1.5]
    assert spread_weight(0, 1, 0.9) == 1.0
    assert [spread_weight(r, 4, 0.0) for r in range(4)] == [1.0] * 4


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_spread_keeps_each_rank_near_the_uniform_size(world_size):
    spec = parse_splits("spread:0.8")
    size, element = 1 << 20, 4
    pairs = pair_counts(spec, size, world_size, element)
    uniform = size // (world_size * element)
    for rank in range(world_size):  # every rank sends and receives about the uniform size ...
        assert abs(sum(pairs[rank]) - world_size * uniform) <= world_size
        assert abs(sum(row[rank] for row in pairs) - world_size * uniform) <= world_size
    # ... but unevenly: the pairs range from 0.2 to 1.8 times the uniform chunk
    flat = [count for row in pairs for count in row]
    assert min(flat) == int(uniform * 0.2) and max(flat) == int(uniform * 1.8)
    chunks = chunk_counts(spec, size, world_size, element, by_row=True)
    assert chunks[0] == int(uniform * 0.2) and chunks[-1] == int(uniform * 1.8)


def test_a_matrix_file_gives_pairs_and_row_and_column_means(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("0,8,16\n4,4,4\n40,0,0\n")
    spec = parse_splits(str(path))
    assert spec.matrix == ((0, 8, 16), (4, 4, 4), (40, 0, 0))
    assert pair_counts(spec, 0, 3, 4) == ((0, 2, 4), (1, 1, 1), (10, 0, 0))
    assert chunk_counts(spec, 0, 3, 4, by_row=True) == (2, 1, 3)  # rows: 24, 12, 40 bytes over 3 x 4
    assert chunk_counts(spec, 0, 3, 4, by_row=False) == (3, 1, 1)  # columns: 44, 12, 20


def test_yaml_lists_and_sizes_with_units(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("- [0, 1K]\n- ['2K', 16]\n")
    assert parse_splits(str(path)).matrix == ((0, 1024), (2048, 16))


@pytest.mark.parametrize("name, content, message", [
    ("a.csv", "0,4\n4\n", "not square: row 1 has 1 entry"),
    ("a.csv", "0,-4\n4,0\n", "entry [0][1] = -4 is negative"),
    ("a.csv", "0,x\n4,0\n", "entry [0][1] = 'x' is not a byte count"),
    ("a.csv", "0,0\n0,0\n", "every entry is 0"),
    ("a.csv", "", "empty"),
    ("a.yaml", "{a: 1}", "expected a list of rows"),
    ("a.yaml", "[[0, 1], [1, [2]]]", "entry [1][1] = [2] is not a byte count"),
    ("a.yaml", "[[0, 1.5], [1, 0]]", "entry [0][1] = 1.5 is not a byte count"),
    ("a.txt", "0,1\n1,0\n", "unknown format .txt"),
])
def test_bad_files_name_the_problem(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        parse_splits(str(path))
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_distance_sends_the_uniform_total_the_nearest_ranks_the_most(world_size):
    size, element = 1 << 20, 4
    pairs = pair_counts(parse_splits("distance:1.5"), size, world_size, element)
    uniform = size // (world_size * element)
    for i in range(world_size):  # each rank sends and receives the uniform total, less rounding
        assert world_size * uniform - world_size <= sum(pairs[i]) <= world_size * uniform
        assert pairs[i] == tuple(pairs[j][i] for j in range(world_size))  # i to j as j to i
        by_distance = sorted(range(world_size), key=lambda j: ring_distance(i, j, world_size))
        sent = [pairs[i][j] for j in by_distance]
        assert sent == sorted(sent, reverse=True) and sent[0] > sent[-1]  # nearer ranks get more
    assert plan_all_to_allv(parse_splits("distance:0"), size, world_size, element).pair_counts == \
        ((uniform,) * world_size,) * world_size  # F = 0: the uniform all-to-all


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_zipf_sends_every_rank_the_most_to_rank_0_which_moves_the_size(world_size):
    size, element = 1 << 20, 4
    spec = parse_splits("zipf:1")
    pairs = pair_counts(spec, size, world_size, element)
    uniform = size // (world_size * element)
    assert len(set(pairs)) == 1  # every rank routes alike: the popularity of an expert is global
    assert list(pairs[0]) == [uniform // (j + 1) for j in range(world_size)]  # 1, 1/2, 1/3, ... of c
    plan = plan_all_to_allv(spec, size, world_size, element)
    assert plan.size_bytes == size  # the hottest rank receives n x c: the size is its bytes
    received = chunk_counts(spec, size, world_size, element, by_row=False)  # reduce_scatter_v's chunks
    assert received == tuple(uniform // (r + 1) for r in range(world_size))  # each rank's row alike
    assert received[0] == max(received) and received[-1] == min(received)


@given(kind=st.sampled_from(["distance", "zipf"]), factor=st.floats(0, 8, allow_nan=False),
       world_size=st.integers(1, 16), elements=st.integers(0, 1 << 16))
def test_generated_splits_parse_back_and_never_send_more_than_the_size(kind, factor, world_size, elements):
    spec = parse_splits(f"{kind}:{factor!r}")
    assert (spec.kind, spec.spread, spec.text) == (kind, factor, f"{kind}:{factor!r}")
    size = elements * world_size * 4
    plan = plan_all_to_allv(spec, size, world_size, 4)
    assert all(count >= 0 for row in plan.pair_counts for count in row)
    assert plan.size_bytes <= size  # the busiest rank moves the size at most, rounding down


@pytest.mark.parametrize("text, message", [
    ("spread:2", "between 0 and 1"), ("spread:wide", "malformed --splits"), ("nowhere.csv", "no such file"),
    ("zipf:-1", "S must be a finite number, at least 0"), ("distance:inf", "F must be a finite number"),
    ("zipf:", "malformed --splits 'zipf:': expected zipf:S"),
])
def test_bad_specs(text, message):
    with pytest.raises(UsageError, match=message):
        parse_splits(text)


def test_element_size_and_world_size_checks(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("0,6\n2,0\n")
    spec = parse_splits(str(path))
    check_element_sizes(spec, {"bfloat16": 2, "int8": 1})
    with pytest.raises(UsageError, match=r"entry \[0\]\[1\] = 6 bytes is not a whole number of float32"):
        check_element_sizes(spec, {"float32": 4})
    check_world_size(spec, 2)
    with pytest.raises(UsageError, match="a 2 x 2 matrix, but the run has 3 ranks"):
        check_world_size(spec, 3)


@pytest.mark.processes
def test_the_cli_refuses_a_file_of_the_wrong_world_size_before_starting(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("0,4\n4,0\n")
    result = commbench("--collective", "all_to_allv", "--splits", str(path), "--nproc", "3", timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == (f"commbench: error: splits file {path}: a 2 x 2 matrix, but the run has "
                                     "3 ranks (it needs 3 x 3)")
