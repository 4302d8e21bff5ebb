"""Opening a file from elsewhere (commbench/core/untrusted.py): special files named, never waited on;
caps on bytes read and inflated; JSON and YAML nesting bounded; YAML plain values only."""

import gzip
import json
import os
import pickle
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core import untrusted
from commbench.core.untrusted import (
    MAX_HASHED_VALUES,
    MAX_NESTING,
    inflate,
    json_nesting_exceeds,
    load_yaml,
    parse_json,
    parse_yaml,
    pickle_nesting_exceeds,
    read_bytes,
    read_text,
    shown,
)
from commbench.errors import UsageError


def refusal(call, *args) -> str:
    with pytest.raises(UsageError) as caught:
        call(*args)
    text = str(caught.value)
    assert "\n" not in text
    return text


def test_a_fifo_is_named_at_once_without_waiting_for_a_writer(tmp_path: Path):
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    outcome: list[str] = []
    reader = threading.Thread(target=lambda: outcome.append(refusal(read_bytes, fifo, "results file", 100)),
                              daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert outcome == [f"{fifo} is a FIFO (named pipe), not a regular file: a results file is read only "
                       "from a regular file"]


def test_a_device_and_a_directory_are_named_for_what_they_are(tmp_path: Path):
    assert "/dev/zero is a character device" in refusal(read_bytes, Path("/dev/zero"), "sweep file", 100)
    assert f"{tmp_path} is a directory" in refusal(read_bytes, tmp_path, "sweep file", 100)
    absent = tmp_path / "absent"
    assert refusal(read_bytes, absent, "sweep file", 100) == f"{absent}: no such sweep file"


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path: Path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 101)
    assert "more than the 100 B a results file may hold" in refusal(read_bytes, path, "results file", 100)
    path.write_bytes(b" " * 100)
    assert read_bytes(path, "results file", 100) == b" " * 100


def test_text_that_is_not_utf8_is_refused_with_the_offset(tmp_path: Path):
    path = tmp_path / "sweep.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    assert refusal(read_text, path, "sweep file", 100) == (f"{path}: not UTF-8 text (byte 0xe9 at offset 9): "
                                                           "a sweep file is text")


def test_a_gzip_bomb_stops_at_the_cap_on_inflated_bytes():
    member = gzip.compress(b"\0" * (1 << 20))
    bomb = member * 8  # 8 MiB inflated from a few KiB
    assert len(bomb) < 100_000
    text = refusal(inflate, bomb, Path("trace.json.gz"), "recording", 4 << 20)
    assert text == "trace.json.gz: inflates to more than the 4 MiB a recording may hold (docs/limits.md)"
    assert inflate(bomb, Path("t.gz"), "recording", 8 << 20) == b"\0" * (8 << 20)


def test_truncated_or_trailing_gzip_data_is_named():
    data = gzip.compress(b'{"traceEvents": []}')
    assert "truncated gzip data" in refusal(inflate, data[:-6], Path("t.gz"), "recording", 1 << 20)
    assert "not a gzip file after" in refusal(inflate, data + b"junk", Path("t.gz"), "recording", 1 << 20)
    assert inflate(b"{}", Path("t.json"), "recording", 1) == b"{}"


def test_json_nested_deeper_than_the_bound_is_refused_before_parsing():
    deep = b"[" * 100_000 + b"]" * 100_000
    assert refusal(parse_json, deep, Path("a.json"), "results file") == (
        f"a.json: not a results file (containers nested more than {MAX_NESTING} deep)")
    at_bound = b'{"a":' * (MAX_NESTING - 1) + b"[]" + b"}" * (MAX_NESTING - 1)
    assert isinstance(parse_json(at_bound, Path("a.json"), "results file"), dict)


def test_brackets_and_escaped_quotes_inside_strings_do_not_count_as_nesting():
    text = json.dumps({"a": ["[[[[{{{{", 'say "]]]" \\', "\\\"[["]})
    assert not json_nesting_exceeds(text.encode(), 2)
    assert parse_json(text.encode(), Path("a.json"), "results file") == json.loads(text)


def nested_json(max_leaves: int = 20):
    leaves = st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ ab\n', max_size=6)
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=3), inner, max_size=3),
                        max_leaves=max_leaves)


def depth(value) -> int:
    if isinstance(value, list | dict):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max((depth(item) for item in items), default=0)
    return 0


@settings(max_examples=150, deadline=None)
@given(value=nested_json(), limit=st.integers(min_value=0, max_value=8))
def test_the_nesting_check_agrees_with_the_depth_of_any_json_value(value, limit):
    assert json_nesting_exceeds(json.dumps(value).encode(), limit) == (depth(value) > limit)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200) | nested_json().map(lambda value: json.dumps(value).encode()))
def test_any_bytes_parse_as_json_or_give_one_line(data):
    try:
        parse_json(data, Path("x.json"), "results file")
    except UsageError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize(("text", "expected"), [
    ("a: !!int abc", "f.yaml:1: not valid YAML: cannot read 'abc' as !!int"),
    ("a: 0x_", "f.yaml:1: not valid YAML: cannot read '0x_' as !!int"),
    ("a: &x [1]\nb: *x", "f.yaml:2: not valid YAML: an alias (*x): write the value out instead"),
    ("a: !!python/object/apply:os.system [ls]",
     "f.yaml:1: not valid YAML: the tag !!python/object/apply:os.system"),
    ("a: !!binary aGk=", "f.yaml:1: not valid YAML: the tag !!binary"),
    ("a: !local x", "f.yaml:1: not valid YAML: the tag !local"),
    ("a: " + "[" * 5000 + "]" * 5000,
     f"f.yaml:1: not valid YAML: containers nested more than {MAX_NESTING} deep"),
    ("a: 1" + "0" * 5000, "f.yaml:1: not valid YAML: cannot read"),
    ("- [a\n- b", "f.yaml:2: not valid YAML: expected ',' or ']'"),
])
def test_yaml_that_would_build_objects_blow_up_or_fail_to_build_is_one_line_at_its_line(text, expected):
    assert refusal(parse_yaml, text, Path("f.yaml")).startswith(expected)


def test_yaml_gives_plain_values_and_keeps_dates_as_text():
    assert parse_yaml("a: 2024-13-45\nb: 2024-01-01\nc: !!str 12\nd: [1, 2.5, true, null]", Path("f")) == {
        "a": "2024-13-45", "b": "2024-01-01", "c": "12", "d": [1, 2.5, True, None]}
    assert parse_yaml("", Path("f")) is None


def test_the_billion_laughs_is_refused_at_its_first_alias(tmp_path: Path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]" for level in range(1, 9)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines))
    assert "an alias (*a0)" in refusal(load_yaml, path, "sweep file")


@settings(max_examples=200, deadline=None)
@given(text=st.lists(st.sampled_from(list("ab:-[]{}&*!|>'\"#, \n\t0x.") + ["!!int ", "!!str ", "\ud800"]),
                     max_size=40).map("".join))
def test_any_text_parses_as_yaml_or_gives_one_line(text):
    try:
        parse_yaml(text, Path("f.yaml"))
    except UsageError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize(("value", "expected"), [
    ("x" * 100, "'" + "x" * 17 + "..." + "x" * 18 + "'"), ([1] * 1000, "[1, 1, 1, 1, 1, 1, ...]"),
    ([[[[[1]]]]], "[[[[...]]]]"), ({"a": 1}, "{'a': 1}"), (10 ** 5000, "an integer of 5001 digits"),
    (float("nan"), "nan"), (None, "None")],
    ids=["long-text", "long-list", "deep-list", "mapping", "huge-integer", "nan", "none"])
def test_a_value_in_a_message_is_cut_short(value, expected):
    assert shown(value) == expected


def test_a_regular_file_reached_through_a_symlink_is_read(tmp_path: Path):
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert read_bytes(link, "results file", 10) == b"{}"
    assert stat.S_ISLNK(os.lstat(link).st_mode)
    assert untrusted.file_kind(os.stat(target).st_mode) == "a regular file"


def test_a_pickle_whose_tuple_key_would_crash_or_never_hash_is_found_before_unpickling():
    deep_key = b"\x80\x02}" + b"N" + b"\x85" * 200_000 + b"K\x01s."  # {((((None,),),...): 1}
    assert pickle_nesting_exceeds(deep_key)
    shared = (1,)
    for _ in range(40):  # 2^40 values once hashed, from a few hundred bytes through the memo
        shared = (shared, shared)
    for protocol in range(6):
        assert pickle_nesting_exceeds(pickle.dumps(shared, protocol=protocol)), protocol
    plain = {"entries": [{"process_group": ("0", "default_pg"), "input_sizes": [[4, 4]]}] * 3,
             "pg_config": {"0": {"ranks": "[0, 1]"}}}
    assert not pickle_nesting_exceeds(pickle.dumps(plain, protocol=2))


def tuple_depth_and_count(value) -> tuple[int, int]:
    """What hashing a value walks: tuples nest, anything else ends the walk (a list is unhashable)."""
    if isinstance(value, tuple):
        found = [tuple_depth_and_count(item) for item in value]
        return 1 + max((depth for depth, _ in found), default=0), 1 + sum(count for _, count in found)
    return 0, 1


def deepest_tuple(value) -> int:
    """The depth of the deepest tuple anywhere in a value."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else []
    inner = max((deepest_tuple(item) for item in items), default=0)
    return max(inner, tuple_depth_and_count(value)[0])


def plain_values():
    leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=3) | st.floats(allow_nan=False)
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner)
                        | st.tuples(inner, inner) | st.lists(inner, max_size=4).map(tuple)
                        | st.dictionaries(st.text(max_size=2), inner, max_size=3), max_leaves=24)


@settings(max_examples=150, deadline=None)
@given(value=plain_values(), limit=st.integers(min_value=0, max_value=6), protocol=st.integers(0, 5))
def test_the_pickle_walk_agrees_with_the_tuples_of_any_plain_value(value, limit, protocol):
    assert tuple_depth_and_count(value)[1] <= MAX_HASHED_VALUES
    data = pickle.dumps(value, protocol=protocol)
    assert pickle_nesting_exceeds(data, limit) == (deepest_tuple(value) > limit)
