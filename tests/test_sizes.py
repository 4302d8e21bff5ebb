import pytest

from commbench.core.sizes import format_size, parse_size, parse_sizes
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
