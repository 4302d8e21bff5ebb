"""--format nccl-tests and --format jsonl on real runs (tests/conftest.py), read the way their parsers do."""

import io
import json
from dataclasses import replace

import pytest
from rich.console import Console

from commbench.config.launch import LaunchConfig, resolve_launch
from commbench.errors import UsageError
from commbench.results.model import Row
from commbench.results.saved import load_run
from commbench.writers.console import ReporterBase, TextTable, print_table, run_table
from commbench.writers.formats import (
    FORMATS,
    OUTPUT_FORMATS,
    SilentReporter,
    console_format,
    make_reporter,
    nccl_tests_number,
)
from tests.dist_helpers import commbench


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
    nccl_type = {"float32": "float", "float16": "half", "bfloat16": "bfloat16"}  # nccl-tests' names
    # One line per (collective, size): 5 fixed columns, then time/algbw/busbw/#wrong per mode measured.
    collectives = [r["collective"] for r in rows if r["mode"] == "sync"]
    assert len(lines) == len(collectives)
    for line, collective in zip(lines, collectives, strict=True):
        size, count, dtype, redop, root = line[:5]
        modes = ["sync", "async"] if len(line) == 13 else ["sync"]
        assert len(line) == 5 + 4 * len(modes)
        first = by_key[(collective, int(size), "sync")]
        assert int(count) == first["count_per_rank"] and dtype == nccl_type[first["dtype"]]
        assert redop == ("sum" if first["op"] == "sum" else "none")
        assert int(root) == first["root"]
        for index, mode in enumerate(modes):
            row = by_key[(collective, int(size), mode)]
            time, algbw, busbw, wrong = line[5 + 4 * index: 9 + 4 * index]
            # 7 columns: 2 decimals while they fit, then fewer (test_nccl_tests_number_widths)
            assert float(time) == pytest.approx(row["time_us_p50"], rel=0.005, abs=0.006)
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


# --- the registry of formats ----------------------------------------------------------------------

def test_each_format_name_builds_its_registered_reporter():
    assert list(OUTPUT_FORMATS) == ["table", "nccl-tests", "jsonl"]  # --help's order, the default first
    for name in OUTPUT_FORMATS:
        assert type(make_reporter(LaunchConfig(output_format=name))) is FORMATS[name]
    assert isinstance(make_reporter(LaunchConfig(output_format="jsonl", quiet=True)), SilentReporter)


def test_a_format_registered_in_one_place_is_one_format_takes():
    class MarkdownReporter(ReporterBase):
        def __init__(self, per_rank: bool) -> None:
            self.per_rank = per_rank

        @classmethod
        def for_settings(cls, setup) -> "MarkdownReporter":
            return cls(setup.per_rank)

    console_format("markdown")(MarkdownReporter)
    try:
        chosen = resolve_launch(LaunchConfig(output_format="markdown", per_rank=True, backend="gloo",
                                             device="cpu"))
        reporter = make_reporter(chosen)
        assert isinstance(reporter, MarkdownReporter) and reporter.per_rank
        with pytest.raises(UsageError, match=r"'markdwn' \(did you mean markdown\?\); choose from table, "
                                             r"nccl-tests, jsonl, markdown"):
            resolve_launch(LaunchConfig(output_format="markdwn", backend="gloo", device="cpu"))
        with pytest.raises(ValueError, match="'jsonl' is already registered"):
            console_format("jsonl")(MarkdownReporter)
    finally:
        del FORMATS["markdown"]  # the shipped registry, as other tests expect it
    assert "markdown" not in OUTPUT_FORMATS


# --- the table format: 100 columns ----------------------------------------------------------------

def _rendered_cells(table: TextTable, width: int) -> tuple[list[str], list[list[str]]]:
    """The table printed on a console ``width`` columns wide: its lines, and each body line's cells."""
    console = Console(width=width, record=True, file=io.StringIO())
    print_table(console, table)
    lines = console.export_text().splitlines()
    body = [line for line in lines if line.startswith("│")]
    return lines, [[cell.strip() for cell in line.strip("│").split("│")] for line in body]


def _assert_fits(table: TextTable, width: int = 100) -> None:
    lines, cells = _rendered_cells(table, width)
    assert max(len(line) for line in lines) <= width
    assert "…" not in "\n".join(lines)
    assert cells == table.rows  # every cell whole, none folded onto a second line


@pytest.mark.processes
def test_both_modes_checked_fit_in_100_columns(tmp_path):
    """The Quick start's `--mode both --check`: a row per size and mode, every cell whole in 100 columns."""
    json_path = tmp_path / "both.json"
    result = commbench("--collective", "all_gather_base", "--mode", "both", "--check",
                       "--sizes", "1K:16M:x16", "--iters", "3", "--warmup", "1", "--json", str(json_path),
                       "--csv", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    rows = load_run(json_path).rows
    table = run_table(rows)
    assert [cells[2] for cells in table.rows] == ["sync", "async"] * (len(rows) // 2)
    assert "wrong" in table.columns and "p50 µs" in table.columns
    _assert_fits(table)


def _wide_row(size: int, mode: str, time_us: float) -> Row:
    """A row as wide as a GPU's can be: 9-digit element counts, 6-digit times, 3-digit GB/s."""
    return Row(collective="all_reduce", backend="nccl", device="cuda", world_size=8, dtype="bfloat16",
               mode=mode, op="sum", size_bytes=size, requested_bytes=size, count_per_rank=size // 2,
               iters=20, warmup=5, time_us_p50=time_us, time_us_p95=time_us * 1.01,
               time_us_min=time_us * 0.99, time_us_max=time_us * 1.2, time_us_mean=time_us,
               algbw_gbps=size / time_us / 1e3, busbw_gbps=1.75 * size / time_us / 1e3, busbw_factor=1.75,
               samples=20, ci95_rel=0.004, wrong=0)


def test_a_wide_gpu_table_in_both_modes_fits_in_100_columns():
    rows = [_wide_row(2**30, mode, time) for mode, time in (("sync", 4321.5), ("async", 123456.7))]
    _assert_fits(run_table(rows + [replace(row, size_bytes=2**29, count_per_rank=2**28) for row in rows]))


def test_one_mode_has_no_mode_column_and_a_single_sample_shows_one_time():
    sync = _wide_row(4096, "sync", 20.0)
    table = run_table([sync])
    assert "mode" not in table.columns and table.columns[2] == "p50 µs"
    one_sample = replace(sync, samples=1, samples_us=[20.0], ci95_rel=None)
    assert run_table([one_sample]).columns[2] == "µs/op"
    mixed = run_table([sync, replace(one_sample, mode="async")])
    assert mixed.rows[1][:5] == ["", "", "async", "20.0", "-"]  # its time, no spread, the size once
