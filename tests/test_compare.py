"""compare on real saved runs: two runs of the same sweep pass the gate, an injected slowdown fails it."""

import json
import math
from pathlib import Path

import pytest

from commbench.analysis.compare import change_text, compare_runs, geometric_means
from commbench.cli import main
from commbench.core.sizes import format_size
from commbench.results.saved import load_run
from tests.dist_helpers import commbench

# Two runs of one sweep on this shared 2-core machine differed by up to 7x in a row's p50 (up to 26x
# when two runs overlapped in time): load from other processes is a real, significant difference that
# no rank test can tell from a regression. The gate between independent runs is therefore tested at a
# threshold above that noise, and realistic thresholds on a run against a slowed copy of itself.
NOISE_PROOF_PCT = "3900"  # 40x


def slowed_copy(source: Path, target: Path, factor: float, collective: str | None = None) -> Path:
    """``source`` with every time (and so every bandwidth) of ``collective`` (or all) scaled by ``factor``."""
    payload = json.loads(source.read_text())
    for row in payload["rows"]:
        if collective is not None and row["collective"] != collective:
            continue
        row["samples_us"] = [value * factor for value in row["samples_us"]]
        for name in ("time_us_p50", "time_us_p95", "time_us_min", "time_us_max", "time_us_mean"):
            row[name] *= factor
        for name in ("algbw_gbps", "busbw_gbps"):
            if row[name] is not None:
                row[name] /= factor
    payload["meta"]["run_id"] += "-slowed"
    target.write_text(json.dumps(payload))
    return target


def test_two_runs_of_the_same_sweep_match_row_for_row_and_pass(two_runs, capsys):
    a, b = (saved.json for saved in two_runs)
    comparison = compare_runs(load_run(a), load_run(b))
    assert len(comparison.pairs) == len(load_run(a).rows) == 18
    assert comparison.only_base == [] and comparison.only_new == []
    for pair in comparison.pairs:
        assert pair.ratio is not None and math.isfinite(pair.ratio) and pair.ratio > 0
        if pair.base.mode == "sync":  # 30 samples a side: testable
            assert 0.0 <= pair.p_value <= 1.0
        else:  # one async window per size: one sample, no test
            assert pair.p_value is None and not pair.significant
    assert main(["compare", str(a), str(b), "--fail-above", NOISE_PROOF_PCT]) == 0
    out = capsys.readouterr().out
    assert "passed, no significant slowdown above 3900%" in out and "only in" not in out


def test_an_injected_slowdown_fails_the_gate(two_runs, tmp_path):
    a = two_runs[0].json
    slowed = slowed_copy(a, tmp_path / "slowed.json", 50.0)
    result = commbench("compare", str(a), str(slowed), "--fail-above", NOISE_PROOF_PCT, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "50.00x slower" in result.stdout
    assert "FAILED, 10 significant slowdowns above 3900%" in result.stdout
    assert result.stderr.startswith("commbench: regression: 10 significant slowdowns above 3900%")
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_gate_threshold_is_a_percentage_of_the_p50(two_runs, tmp_path, capsys):
    a = two_runs[0].json
    slowed = slowed_copy(a, tmp_path / "x1.5.json", 1.5, collective="all_reduce")
    assert main(["compare", str(a), str(slowed), "--fail-above", "25"]) == 1  # 50% > 25%
    assert "gate all_reduce float32 sum sync" in capsys.readouterr().out
    assert main(["compare", str(a), str(slowed), "--fail-above", "60"]) == 0  # 50% < 60%
    capsys.readouterr()
    assert main(["compare", str(a), str(slowed)]) == 0  # no gate without --fail-above
    comparison = compare_runs(load_run(a), load_run(slowed))
    means = geometric_means(comparison.pairs)
    assert means["all_reduce"][0] == pytest.approx(1.5) and means["all_gather_base"][0] == pytest.approx(1.0)
    assert means["all_reduce"][1] == 8 and means["all_reduce"][2] >= 1  # significantly slower rows
    assert means["broadcast"][2] == 0 and means["broadcast"][3] == 0  # identical: never significant


def test_change_is_worded_as_slower_or_faster():
    assert change_text(1.08) == "1.08x slower"
    assert change_text(1 / 1.1) == "1.10x faster"
    assert change_text(1.0) == "same" and change_text(None) == "-"


def test_markdown_output(two_runs, capsys):
    a, b = (saved.json for saved in two_runs)
    assert main(["compare", str(a), str(b), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## base ")
    assert "| size | mode | base µs | new µs | change | significant | base busbw | new busbw |" in out
    assert "| :-- | :-- | --: |" in out
    assert "**summary per collective (geometric mean of the p50 ratios)**" in out
    assert "─" not in out and "┃" not in out  # no console box drawing


def test_more_files_compare_each_to_the_first_and_rows_in_one_file_are_listed(two_runs, tmp_path, capsys):
    a, b = (saved.json for saved in two_runs)
    payload = json.loads(b.read_text())
    payload["rows"] = [row for row in payload["rows"] if row["collective"] != "broadcast"]
    extra = dict(payload["rows"][0], size_bytes=123, requested_bytes=123)
    payload["rows"].append(extra)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(payload))
    slowed = slowed_copy(a, tmp_path / "slowed.json", 50.0)
    assert main(["compare", str(a), str(partial), str(slowed), "--fail-above", NOISE_PROOF_PCT]) == 1
    out = capsys.readouterr().out
    assert out.count("\nbase ") + out.startswith("base ") == 2  # two comparisons, both against a
    assert "only in base (2 rows):" in out
    assert "rooted · broadcast · float32 · sync · gloo · 2 ranks: 64 KiB, 256 KiB" in out
    assert "only in new (1 rows):" in out and "123 B" in out
    assert f"{slowed}: gate all_reduce" in out and f"{partial}:" not in out.split("FAILED")[1]


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a commbench results.json"),
    ('{"rows": [{"collective": "x"}]}', "not a commbench results.json"),
    (None, "no such results file"),
])
def test_bad_files_are_one_line_and_exit_2(two_runs, tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    assert main(["compare", str(two_runs[0].json), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert f"{bad}: {message}" in captured.err


def test_one_file_is_not_a_comparison(two_runs, capsys):
    assert main(["compare", str(two_runs[0].json)]) == 2
    assert "compare needs at least two results files" in capsys.readouterr().err


def test_the_gate_fails_when_the_files_have_no_rows_in_common(six_collective_runs, reduce_scatter_run,
                                                              capsys):
    base, other = six_collective_runs[0].json, reduce_scatter_run.json  # different collectives, same sizes
    assert main(["compare", str(base), str(other), "--fail-above", "5"]) == 1
    captured = capsys.readouterr()
    assert "no rows in common" in captured.out
    assert "gate (--fail-above 5%): FAILED, 1 comparison does not cover the same rows:" in captured.out
    assert "passed" not in captured.out
    expected = (f"commbench: regression gate: {other}: no rows in common with {base} (base: all_reduce, "
                "all_gather_base, reduce_scatter_base, broadcast, all_to_all_single, reduce; "
                "new: reduce_scatter)")
    assert captured.err.strip() == expected


def test_without_a_gate_no_rows_in_common_is_a_warning(six_collective_runs, reduce_scatter_run, capsys):
    base, other = six_collective_runs[0].json, reduce_scatter_run.json
    assert main(["compare", str(base), str(other)]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(f"commbench: warning: {other}: no rows in common with {base}")
    assert len(captured.err.strip().splitlines()) == 1


def test_rows_in_only_one_file_fail_the_gate_and_warn_without_it(six_collective_runs, capsys):
    base, longer = (saved.json for saved in six_collective_runs)  # the second also measured 16 KiB
    assert main(["compare", str(base), str(longer), "--fail-above", NOISE_PROOF_PCT]) == 1
    captured = capsys.readouterr()
    assert "only in new (12 rows):" in captured.out  # 6 collectives x 2 modes at 16 KiB
    assert "significant slowdowns" not in captured.out  # it failed on coverage, not on time
    assert captured.err.strip() == (f"commbench: regression gate: {longer}: 0 rows only in {base} and 12 "
                                    f"only in {longer}: the files do not measure the same points")
    assert main(["compare", str(base), str(longer)]) == 0
    assert capsys.readouterr().err.startswith(f"commbench: warning: {longer}: 0 rows only in {base}")


def test_compare_takes_a_glob_as_the_files_it_matches(six_collective_runs, capsys):
    first, second = (saved.json for saved in six_collective_runs)
    assert main(["compare", str(first.parent / "six_*.json")]) == 0  # six_a.json, then six_b.json
    out = capsys.readouterr().out
    assert out.count("\nbase ") + out.startswith("base ") == 1 and "only in new (12 rows)" in out
    assert out.startswith(f"base {load_run(first).describe()} vs new {load_run(second).describe()}")


def test_a_row_without_times_pairs_without_a_ratio(two_runs, tmp_path, capsys):
    a = two_runs[0].json
    payload = json.loads(a.read_text())
    rejected = payload["rows"][0]
    times = ("time_us_p50", "time_us_p95", "time_us_min", "time_us_max", "time_us_mean")
    rejected.update(error="the backend rejected it", samples_us=[], algbw_gbps=None, busbw_gbps=None,
                    **dict.fromkeys(times))
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps(payload))
    comparison = compare_runs(load_run(failed), load_run(a))
    assert comparison.pairs[0].ratio is None and comparison.pairs[0].p_value is None
    assert main(["compare", str(failed), str(a), "--markdown"]) == 0
    size = format_size(rejected["size_bytes"])
    assert f"| {size} | {rejected['mode']} | - | " in capsys.readouterr().out  # no base time, no change
