"""Rows kept as columns (results/columns.py) give back exactly the rows stored, whatever their values, and
read a field over all of them as an array; a block written to results.json reads back as its rows."""

import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.errors import UsageError
from commbench.results.columns import PENDING_ROWS, Lists, Numbers, RowBlock, RowColumns, packed, values_of
from commbench.results.model import ROW_KINDS, Row, RunMeta
from commbench.results.saved import ROW_MINIMUMS, load_run
from commbench.writers.files import ResultWriter

FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -0.0, 1.5, 2700.123]),
                   st.integers(-10**6, 10**6).map(lambda count: count / 1000))  # whole thousandths, as µs are
INTS = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-3, 300), st.integers(2**63, 2**70))
TEXT = st.sampled_from(["", "p2p_uni", "ping_pong", "fabric", "µs"])


def _value(name: str) -> st.SearchStrategy:
    kind, optional = ROW_KINDS[name]
    lists = st.lists(st.one_of(FLOATS, st.none()), max_size=5)
    found = {int: INTS, float: FLOATS, str: TEXT, list: lists}[kind]
    return st.one_of(found, st.none()) if optional else found


def _savable(name: str) -> st.SearchStrategy:
    """A value that a results.json holds (a whole number within its field's bounds, a number that is
    not finite only where it is written as null and read as None)."""
    kind, optional = ROW_KINDS[name]
    if kind is int:
        low = ROW_MINIMUMS.get(name, -2**63)
        found = st.one_of(st.integers(low, 2**63 - 1), st.integers(low, low + 300))
    elif kind is float:
        found = FLOATS if optional else FLOATS.filter(math.isfinite)
    else:
        return _value(name)
    return st.one_of(found, st.none()) if optional else found


def _rows(count: st.SearchStrategy[int], value=_value) -> st.SearchStrategy[list[Row]]:
    """Rows whose every field varies, or keeps one value, from row to row (each value from ``value``)."""
    def build(size: int) -> st.SearchStrategy[list[Row]]:
        columns = {item.name: st.one_of(value(item.name).map(lambda one: [one] * size),
                                        st.lists(value(item.name), min_size=size, max_size=size))
                   for item in fields(Row)}
        return st.fixed_dictionaries(columns).map(lambda found: [
            Row(**{name: values[index] for name, values in found.items()}) for index in range(size)])
    return count.flatmap(build)


def _equal(one, other) -> bool:
    """Type for type; NaN equal to NaN, -0.0 not equal to 0.0; lists item by item."""
    if type(one) is not type(other):
        return False
    if isinstance(one, list):
        return len(one) == len(other) and all(_equal(a, b) for a, b in zip(one, other, strict=True))
    if isinstance(one, float):
        same_sign = math.copysign(1, one) == math.copysign(1, other)
        return (math.isnan(one) and math.isnan(other)) or (one == other and same_sign)
    return one == other


def _same(first: Row, second: Row) -> bool:
    """Field for field, as _equal."""
    return all(_equal(getattr(first, item.name), getattr(second, item.name)) for item in fields(Row))


@settings(max_examples=30, deadline=None)
@given(_rows(st.integers(1, 12)))
def test_a_block_gives_back_every_row_it_holds_exactly(rows):
    block = RowBlock.of(rows)
    assert len(block) == len(rows)
    assert all(_same(kept, row) for kept, row in zip(block, rows, strict=True))
    assert all(_same(block[index], row) for index, row in enumerate(rows))
    assert _same(block[-1], rows[-1])
    again = list(block)
    for row in again:  # each row's lists are its own
        row.samples_us.append(1.0)
    assert all(_same(kept, row) for kept, row in zip(block, rows, strict=True))


@settings(max_examples=30, deadline=None)
@given(_rows(st.integers(1, 12)))
def test_a_field_over_the_rows_is_an_array_with_nan_for_none(rows):
    block = RowBlock.of(rows)
    for name in ("time_us_p50", "src_rank", "size_bytes", "collective", "repeat", "elapsed_s"):
        found, expected = block.values(name), [getattr(row, name) for row in rows]
        assert len(found) == len(rows)
        for value, wanted in zip(found.tolist(), expected, strict=True):
            if wanted is None or (isinstance(wanted, float) and math.isnan(wanted)):
                assert value is None or (isinstance(value, float) and math.isnan(value))
            else:
                assert value == wanted
        assert np.array_equal(values_of(rows, name), found, equal_nan=found.dtype != object)


def _row(index: int, **changes) -> Row:
    values = dict(collective="p2p_uni" if index % 2 else "ping_pong", backend="gloo", device="cpu",
                  world_size=64, dtype="uint8", mode="sync", op="", size_bytes=1 << 20,
                  requested_bytes=1 << 20, count_per_rank=1 << 20, iters=10, warmup=2,
                  time_us_p50=2700.0 + index / 2, time_us_p95=2800.123, time_us_min=2600.001 + index,
                  time_us_max=2900.0, time_us_mean=2750.25, algbw_gbps=0.3 + index, busbw_gbps=0.3 + index,
                  busbw_factor=1.0, pattern="fabric", samples_us=[2600.001 + index, 2700.5],
                  rank_mean_us=[2650.0, 2651.0], src_rank=index % 64, dst_rank=(index * 7 + 1) % 64)
    return Row(**{**values, **changes})


def test_rows_appended_and_blocks_added_keep_their_order():
    rows = [_row(index) for index in range(PENDING_ROWS + 10)]
    kept = RowColumns()
    for row in rows[:PENDING_ROWS + 3]:
        kept.append(row)
    block = RowBlock.of(rows[PENDING_ROWS + 3:])
    kept.extend(block)
    assert len(kept) == len(rows) and list(kept) == rows and kept[PENDING_ROWS + 5] == rows[PENDING_ROWS + 5]
    assert kept.values("src_rank").tolist() == [row.src_rank for row in rows]
    assert kept.blocks[-1].each is block.each  # a block is kept as it came, its columns shared
    stamped = block.with_same(repeat=3, elapsed_s=1.5)
    assert [row.repeat for row in stamped] == [3] * len(block)
    assert stamped.each["src_rank"] is block.each["src_rank"]


def test_measured_times_are_kept_as_whole_thousandths_in_four_bytes_and_equal_fields_once():
    block = RowBlock.of([_row(index) for index in range(2048)])
    assert block.each["time_us_min"].data.dtype == np.int32
    assert block.each["samples_us"].items.data.dtype == np.int32
    assert block.each["src_rank"].data.dtype == np.int8 and "pattern" in block.same
    assert block.each["busbw_gbps"] is block.each["algbw_gbps"]  # equal on every row: one array
    assert [row.busbw_gbps for row in block] == [row.algbw_gbps for row in block]


def _meta() -> RunMeta:
    return RunMeta(run_id="r1", started_at="t0", command=["commbench"], commbench_version="0",
                   torch_version="0", python_version="3", backend="gloo", device="cpu", world_size=64,
                   launcher="local", hostnames=["a"] * 64, versions={}, env={}, config={})


def test_a_block_written_to_results_json_reads_back_as_its_rows(tmp_path):
    writer = ResultWriter(_meta(), tmp_path / "r.csv", tmp_path / "r.json")
    rows = [_row(index, time_us_max=math.nan if index == 3 else 2900.0) for index in range(40)]
    writer.add_block(RowBlock.of(rows[:32]))
    writer.add(rows[32])
    writer.add_block(RowBlock.of(rows[33:]))
    writer.finish("complete", "t1")
    saved = list(load_run(tmp_path / "r.json").rows)
    assert saved == [row if index != 3 else _row(3, time_us_max=None) for index, row in enumerate(rows)]
    assert load_run(tmp_path / "r.csv").rows[5].src_rank == rows[5].src_rank and writer.row_count == 40


def _as_written(row: Row) -> Row:
    """The row as a file gives it back: a number that is not finite is JSON's null, read as None."""
    def written(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return [written(item) for item in value] if isinstance(value, list) else value
    return Row(**{item.name: written(getattr(row, item.name)) for item in fields(Row)})


def _written_and_read(folder, rows: list[Row], as_block: bool) -> list[Row] | str:
    """``rows`` written by ResultWriter as one block or as a row's object each, and read back: the rows,
    or the one-line error reading gave."""
    writer = ResultWriter(_meta(), folder / "r.csv", folder / "r.json")
    if as_block:
        writer.add_block(RowBlock.of(rows))
    else:
        for row in rows:
            writer.add(row)
    writer.finish("complete", "t1")
    try:
        return list(load_run(folder / "r.json").rows)
    except UsageError as error:
        assert str(error).startswith(f"{folder / 'r.json'}: not a commbench results.json")
        assert "\n" not in str(error)
        return str(error)


@settings(max_examples=40, deadline=None)
@given(_rows(st.integers(1, 12), value=_savable))
def test_a_block_saved_with_packed_columns_reads_back_as_exactly_the_rows_written(tmp_path_factory, rows):
    folder = tmp_path_factory.mktemp("packed")
    read = _written_and_read(folder, rows, as_block=True)
    assert isinstance(read, list), read
    assert len(read) == len(rows)
    assert all(_same(found, _as_written(row)) for found, row in zip(read, rows, strict=True))
    block = RowBlock.of(rows)
    samples = block.each.get("samples_us")
    if isinstance(samples, Lists) and isinstance(samples.items, Numbers):
        assert set(block.saved()["each"]["samples_us"]) == {"lengths", "items"}


@settings(max_examples=30, deadline=None)
@given(_rows(st.integers(1, 8)))
def test_a_block_is_refused_exactly_when_its_rows_saved_alone_would_be(tmp_path_factory, rows):
    as_block = _written_and_read(tmp_path_factory.mktemp("block"), rows, as_block=True)
    alone = _written_and_read(tmp_path_factory.mktemp("alone"), rows, as_block=False)
    assert isinstance(as_block, str) == isinstance(alone, str), (as_block, alone)
    if not isinstance(alone, str):
        assert all(_same(one, other) for one, other in zip(as_block, alone, strict=True))


def test_a_fabric_rounds_numbers_are_packed_arrays_in_the_file(tmp_path):
    import json

    writer = ResultWriter(_meta(), tmp_path / "r.csv", tmp_path / "r.json")
    rows = [_row(index, time_us_max=math.nan if index == 3 else 2900.0) for index in range(40)]
    writer.add_block(RowBlock.of(rows))
    writer.finish("complete", "t1")
    payload = json.loads((tmp_path / "r.json").read_text())
    each = payload["rows"][0]["each"]
    assert payload["schema"] == 3
    assert each["src_rank"]["dtype"] == "|i1" and each["time_us_min"] | {"b64": ""} == \
        {"dtype": "<i4", "b64": "", "thousandths": True}
    assert each["time_us_max"]["none"]["dtype"] == "|b1"
    assert each["collective"]["text"] == ["ping_pong", "p2p_uni"]
    assert each["samples_us"]["lengths"]["dtype"] == "|i1" and each["samples_us"]["items"]["thousandths"]
    assert list(load_run(tmp_path / "r.json").rows)[3].time_us_max is None


def test_a_block_that_would_copy_one_full_list_into_every_row_is_refused(tmp_path):
    import json

    from commbench.errors import UsageError

    block = RowBlock.of([_row(index) for index in range(3)]).saved()
    block["each"].pop("samples_us", None)
    block["same"]["samples_us"] = [1.0] * 1000  # RowBlock writes a list there only when it is empty
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": 2, "meta": {}, "rows": [block]}))
    try:
        load_run(path)
    except UsageError as error:
        assert str(error).startswith(f"{path}: not a commbench results.json") and "samples_us" in str(error)
    else:
        raise AssertionError("the block loaded")


SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=4)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


@settings(max_examples=80, deadline=None)
@given(where=st.sampled_from(["block_of", "same", "each", "same field", "each field", "each value"]),
       name=st.sampled_from(["src_rank", "samples_us", "collective", "time_us_p50", "nonsense"]), value=JSON)
def test_a_damaged_block_loads_or_is_one_line_naming_the_file(tmp_path_factory, where, name, value):
    import json

    from commbench.errors import UsageError

    block = RowBlock.of([_row(index) for index in range(3)]).saved()
    if where in ("block_of", "same", "each"):
        block[where] = value
    elif where == "same field":
        block["same"][name] = value
    elif where == "each field":
        block["each"][name] = value
    else:
        block["each"].setdefault(name, [None] * 3)[1] = value
    path = tmp_path_factory.mktemp("damaged") / "r.json"
    path.write_text(json.dumps({"schema": 2, "meta": {}, "rows": [block]}))
    try:
        rows = load_run(path).rows
    except UsageError as error:
        assert str(error).startswith(f"{path}: not a commbench results.json") and "\n" not in str(error)
    else:
        assert len(rows) == block["block_of"] and all(isinstance(row, Row) for row in rows)


NEAR_PACKED = st.sampled_from(["|i1", "<i2", "<i4", "<i8", "<f8", "|b1", "<f4", ">i4", "O", "", "AAAA",
                               "AA==", "!!", "/////w==", True, False, 1, 2.5, None, []])


@settings(max_examples=120, deadline=None)
@given(name=st.sampled_from(["src_rank", "time_us_min", "time_us_max", "collective", "samples_us"]),
       key=st.sampled_from(["dtype", "b64", "thousandths", "none", "text", "codes", "lengths", "items",
                            "other"]),
       inner=st.booleans(), value=NEAR_PACKED | JSON)
def test_a_damaged_packed_column_loads_or_is_one_line_naming_the_file(tmp_path_factory, name, key, inner,
                                                                      value):
    import json

    rows = [_row(index, time_us_max=math.nan if index == 1 else 2900.0) for index in range(3)]
    block = RowBlock.of(rows).saved()
    column = block["each"][name]
    if inner:  # the array inside: a list's items or lengths, text's codes, numbers' none
        column = next((column[part] for part in ("items", "codes", "none") if part in column), column)
    column[key] = value
    path = tmp_path_factory.mktemp("damaged") / "r.json"
    path.write_text(json.dumps({"schema": 3, "meta": {}, "rows": [block]}))
    try:
        read = list(load_run(path).rows)
    except UsageError as error:
        assert str(error).startswith(f"{path}: not a commbench results.json") and "\n" not in str(error)
    else:
        assert len(read) == 3 and all(isinstance(row, Row) for row in read)
        for row in read:  # what loads is of its field's type
            assert type(row.src_rank) is int and type(row.time_us_min) is float
            assert type(row.collective) is str
            assert all(item is None or type(item) is float for item in row.samples_us)


@settings(max_examples=30, deadline=None)
@given(_rows(st.integers(1, 12), value=_savable), st.integers(1, 11))
def test_rows_kept_as_columns_make_the_same_frame_as_the_rows_themselves(rows, split):
    import pandas as pd
    from pandas.testing import assert_frame_equal

    from commbench.results.frame import pass_values, rows_frame

    kept = RowColumns(RowBlock.of(rows[:split]))
    kept.extend(RowBlock.of(rows[split:]) if rows[split:] else [])
    found = rows_frame(kept)
    whole = [name for name, (kind, _) in ROW_KINDS.items() if kind is int]
    for name in whole:  # exactly the rows' (a record's column of them and None is float64 in pandas)
        assert [None if value is pd.NA else value for value in found[name].tolist()] == \
            [getattr(row, name) for row in rows], name
    lists = [name for name, (kind, _) in ROW_KINDS.items() if kind is list]
    for name in lists:  # NaN equal to NaN, each row's list its own
        assert all(map(_equal, found[name], [getattr(row, name) for row in rows]))
        assert len({id(one) for one in found[name]}) == len(rows)
    try:
        wanted = rows_frame(rows)
    except (ValueError, TypeError, OverflowError):  # whole numbers beyond 2^53 beside None
        return
    others = lists + whole
    assert_frame_equal(found.drop(columns=others), wanted.drop(columns=others), check_exact=True)
    assert (found.dtypes == wanted.dtypes).all()
    np.testing.assert_equal(pass_values(kept), pass_values(rows))  # NaN equal to NaN


def test_a_column_in_both_same_and_each_is_each_rows_own_and_lists_must_fit_their_items(tmp_path):
    import json

    block = RowBlock.of([_row(index) for index in range(3)]).saved()
    block["same"]["src_rank"] = 63  # each's values win, as in a row's object made of the two
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": 3, "meta": {}, "rows": [block]}))
    rows = load_run(path).rows
    assert [rows[index].src_rank for index in range(3)] == [0, 1, 2] == [row.src_rank for row in rows]
    third = (2**64 + 6) // 3  # three lengths whose int64 sum wraps round to the 6 items there are
    lengths = np.array([third, third, 2**64 + 6 - 2 * third], dtype="<i8")
    assert lengths.sum() == 6 and len(block["each"]["samples_us"]["items"]["b64"]) == 32  # 6 x 4 bytes
    block["each"]["samples_us"]["lengths"] = packed(lengths)
    path.write_text(json.dumps({"schema": 3, "meta": {}, "rows": [block]}))
    with pytest.raises(UsageError, match="samples_us's lengths are not those of its 6 items"):
        load_run(path)
