"""--splits: the generated spread's formulas and the checks on split files (exit 2 naming the file)."""

import pytest

from commbench.core.splits import (
    check_element_sizes,
    check_world_size,
    chunk_counts,
    pair_counts,
    parse_splits,
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


@pytest.mark.parametrize("text, message", [
    ("spread:2", "between 0 and 1"), ("spread:wide", "malformed --splits"), ("nowhere.csv", "no such file"),
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
