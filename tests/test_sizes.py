import pytest

from commbench.core.sizes import approximate_size, format_size, parse_size, parse_sizes
from commbench.errors import UsageError


def test_units_are_powers_of_1024():
    assert parse_size("4096") == 4096
    assert parse_size("1K") == 1024
    assert parse_size("1k") == 1024
    assert parse_size("64KiB") == 64 * 1024
    assert parse_size("1M") == 1024**2
    assert parse_size("1.5M") == 3 * 512 * 1024
    assert parse_size("1G") == 1024**3
    assert parse_size("2GB") == 2 * 1024**3


def test_doubling_range_is_the_default_step():
    assert parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]


def test_factor_range_includes_both_ends_when_reached():
    assert parse_sizes("1K:1M:x4") == [1024, 4096, 16384, 65536, 262144, 1048576]
    assert parse_sizes("1K:3K:x4") == [1024]


def test_additive_range():
    assert parse_sizes("1M:64M:+8M") == [1024**2 + i * 8 * 1024**2 for i in range(8)]
    assert parse_sizes("8M:32M:+8M") == [8 * 1024**2, 16 * 1024**2, 24 * 1024**2, 32 * 1024**2]


def test_lists_keep_order_and_plain_bytes():
    assert parse_sizes("1K,3K,1M") == [1024, 3072, 1024**2]
    assert parse_sizes("1000") == [1000]


@pytest.mark.parametrize("spec, message", [
    ("1M:1K", "above maximum"),
    ("1Q", "malformed size"),
    ("1K:1M:y2", "malformed size step"),
    ("1K:1M:x1", "must be above 1"),
    ("1K:1M:+0", "must be above 0"),
    ("1:2:3:4", "malformed size range"),
    ("", "empty --sizes"),
    ("0.3", "whole number"),
    ("0:1K", "cannot grow"),
])
def test_malformed_sizes_name_the_problem(spec, message):
    with pytest.raises(UsageError, match=message):
        parse_sizes(spec)


def test_format_size_is_exact():
    assert format_size(1024) == "1 KiB"
    assert format_size(3 * 512 * 1024) == "1536 KiB"
    assert format_size(1020) == "1020 B"
    assert format_size(1024**3) == "1 GiB"


def test_a_range_may_start_and_end_at_one_size():
    assert parse_sizes("4K:4K") == [4096]
    assert parse_sizes("4K:4K:+1K") == [4096]


def test_a_factor_may_be_written_x_upper_case_x_or_star():
    for spec in ("1K:16K:x4", "1K:16K:X4", "1K:16K:*4"):
        assert parse_sizes(spec) == [1024, 4096, 16384]


def test_a_step_of_one_byte_counts_every_size_up_to_the_maximum():
    assert parse_sizes("1:4:+1") == [1, 2, 3, 4]


@pytest.mark.parametrize("spec, message", [
    ("", "empty --sizes: give a size such as 1M, a list 1K,4K or a range 1K:1G"),
    ("1M:1K", "size range '1M:1K': minimum 1M is above maximum 1K"),
    ("1K:1M:xabc", "malformed size factor 'xabc' in '1K:1M:xabc': expected x2, x4, ..."),
    (" , ,", "malformed sizes ', ,'"),
])
def test_a_refused_size_says_exactly_what_was_wrong(spec, message):
    with pytest.raises(UsageError) as caught:
        parse_sizes(spec)
    assert str(caught.value) == message


@pytest.mark.parametrize("num_bytes, text", [
    (512, "512 B"), (1023.6, "1024 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (640 * 2**20, "640.0 MiB"),
    (2**20 - 1, "1024.0 KiB"), (2**30, "1.0 GiB"), (12.3 * 2**30, "12.3 GiB"), (2**40, "1024.0 GiB"),
])
def test_an_approximate_size_is_in_the_largest_unit_it_reaches_to_one_decimal(num_bytes, text):
    assert approximate_size(num_bytes) == text
