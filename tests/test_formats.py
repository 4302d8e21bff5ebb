"""--format nccl-tests and --format jsonl on real runs (tests/conftest.py), read the way their parsers do."""

import json

import pytest

from commbench.writers.formats import NCCL_TESTS_TYPES, nccl_tests_number


def _result_lines(stdout: str) -> list[list[str]]:
    """What an nccl-tests parser keeps: lines that do not start with '#', split on whitespace."""
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


def test_nccl_tests_layout_matches_the_saved_rows(two_runs):
    saved = two_runs[0]
    rows = json.loads(saved.json.read_text())["rows"]
    lines = _result_lines(saved.stdout)
    assert lines, saved.stdout
    headers = [line for line in saved.stdout.splitlines() if line.startswith("#") and "redop" in line]
    assert headers and headers[0].split()[1:10] == ["size", "count", "type", "redop", "root", "time", "algbw",
                                                    "busbw", "#wrong"]
    by_key = {(r["collective"], r["size_bytes"], r["mode"]): r for r in rows}
    # One line per (collective, size): 5 fixed columns, then time/algbw/busbw/#wrong per mode measured.
    collectives = [r["collective"] for r in rows if r["mode"] == "sync"]
    assert len(lines) == len(collectives)
    for line, collective in zip(lines, collectives, strict=True):
        size, count, dtype, redop, root = line[:5]
        modes = ["sync", "async"] if len(line) == 13 else ["sync"]
        assert len(line) == 5 + 4 * len(modes)
        first = by_key[(collective, int(size), "sync")]
        assert int(count) == first["count_per_rank"] and dtype == NCCL_TESTS_TYPES[first["dtype"]]
        assert redop == ("sum" if first["op"] == "sum" else "none")
        assert int(root) == first["root"]
        for index, mode in enumerate(modes):
            row = by_key[(collective, int(size), mode)]
            time, algbw, busbw, wrong = line[5 + 4 * index: 9 + 4 * index]
            assert time == nccl_tests_number(row["time_us_p50"], 7).strip()
            assert float(busbw) == pytest.approx(row["busbw_gbps"], abs=0.006)
            assert float(algbw) == pytest.approx(row["algbw_gbps"], abs=0.006)
            assert wrong == "N/A"
    assert saved.stdout.count("# Avg bus bandwidth    : ") == 3  # per collective and dtype group
    assert "# all_reduce" not in saved.stdout and "# gate · all_reduce · float32 · op sum" in saved.stdout


def test_nccl_tests_number_widths():
    assert nccl_tests_number(12.345, 7) == "  12.35"
    assert nccl_tests_number(123456.0, 7) == " 123456"
    assert nccl_tests_number(0.004, 6) == "  0.00"
    assert nccl_tests_number(None, 6) == "   N/A"
    assert len(nccl_tests_number(1e12, 7)) == 7


def test_jsonl_streams_exactly_the_saved_rows(two_runs):
    saved = two_runs[1]
    lines = saved.stdout.splitlines()
    assert lines and all(line.startswith("{") for line in lines)  # nothing else on stdout
    streamed = [json.loads(line) for line in lines]
    assert streamed == json.loads(saved.json.read_text())["rows"]
    assert "results: " in saved.stderr and "backend gloo" in saved.stderr
