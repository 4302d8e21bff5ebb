"""The shipped baselines file, the peak rule on host records, and the verdicts a row gets from them."""

from dataclasses import replace
from pathlib import Path

import pytest

from commbench.cli import main
from commbench.errors import UsageError
from commbench.provenance.baselines import check_judging, load_baselines, resolve_expect
from commbench.provenance.peaks import gpu_peak, run_peak
from commbench.provenance.verdicts import (
    Judging,
    RowContext,
    annotate_row,
    below_failure,
    judged_summary,
    summary_line,
)
from commbench.results.model import Row
from commbench.writers.console import run_table
from tests.dist_helpers import commbench

BASELINES = load_baselines()


def _row(busbw: float | None, size: int = 1 << 30, collective: str = "all_reduce", world: int = 8,
         device: str = "cuda", error: str = "") -> Row:
    times = dict.fromkeys(("time_us_p50", "time_us_p95", "time_us_min", "time_us_max", "time_us_mean"), 1.0)
    return Row(collective=collective, backend="nccl" if device == "cuda" else "gloo", device=device,
               world_size=world, dtype="float32", mode="sync", op="sum", size_bytes=size,
               requested_bytes=size, count_per_rank=size // 4, iters=10, warmup=1, algbw_gbps=busbw,
               busbw_gbps=busbw, busbw_factor=1.0, placement="in-place", error=error, **times)


def _gpu_host(name: str = "NVIDIA H100 80GB HBM3", links: int | None = 18, count: int = 8,
              ports: int = 8) -> dict:
    devices = [{"index": i, "name": name, "nvlink_links": links, "pcie_gen": 5, "pcie_width": 16}
               for i in range(count)]
    return {"gpus": {"devices": devices},
            "infiniband": [{"device": f"mlx5_{i}", "port": 1, "rate_gbps": 400.0, "state": "ACTIVE"}
                           for i in range(ports)],
            "network": [{"name": "eth0", "state": "up", "virtual": False, "speed_mbps": 100000}]}


def test_every_shipped_figure_has_a_source_and_every_baseline_resolves():
    shipped = {"nvlink4", "nvlink5", "pcie5_x16", "pcie4_x16", "ib_ndr", "ib_hdr", "loopback"}
    assert shipped <= set(BASELINES.links)
    for link in BASELINES.links.values():
        assert link.source and link.gbps > 0, link.name
    for name, baseline in BASELINES.baselines.items():
        assert baseline.source and baseline.expectations, name
        assert resolve_expect(name) == baseline
    assert BASELINES.links["nvlink4"].gbps == 450 and BASELINES.links["nvlink5"].gbps == 900
    assert BASELINES.links["ib_ndr"].gbps == 400 / 8 and BASELINES.links["ib_hdr"].gbps == 200 / 8
    assert all(model.link in BASELINES.links for model in BASELINES.gpu_models)


def test_a_gpus_bound_is_its_nvlinks_else_its_pcie_link():
    assert gpu_peak({"name": "NVIDIA H100 80GB HBM3", "nvlink_links": 18}, BASELINES).gbps == 450
    assert gpu_peak({"name": "NVIDIA H100 80GB HBM3", "nvlink_links": 6}, BASELINES).gbps == 150
    assert gpu_peak({"name": "NVIDIA B200", "nvlink_links": 18}, BASELINES).gbps == 900
    assert gpu_peak({"name": "NVIDIA A100-SXM4-80GB", "nvlink_links": 12}, BASELINES).gbps == 300
    pcie = gpu_peak({"name": "NVIDIA L40S", "nvlink_links": 0, "pcie_gen": 4, "pcie_width": 16}, BASELINES)
    assert pcie.gbps == 31.5 and "PCIe 4 x16" in pcie.source
    assert gpu_peak({"name": "Unknown GPU", "nvlink_links": 0}, BASELINES) is None  # nothing to say


def test_the_peak_rule_inside_a_host_and_across_hosts():
    one_host = {"a": _gpu_host()}
    inside = run_peak(one_host, ["a"] * 8, [list(range(8))], "cuda", BASELINES)
    assert inside.gbps == 450 and "nvlink4 x18" in inside.source
    two = {"a": _gpu_host(), "b": _gpu_host()}
    hosts = ["a"] * 8 + ["b"] * 8
    across = run_peak(two, hosts, [list(range(16))], "cuda", BASELINES)
    assert across.gbps == 8 * 400 / 8 and "8 x 400 Gb/s" in across.source
    # one rank per host in 8 groups at once: they share each host's NICs
    rails = run_peak(two, hosts, [[i, i + 8] for i in range(8)], "cuda", BASELINES)
    assert rails.gbps == 400 / 8 and "shared by 8 groups" in rails.source
    # groups inside each host: NVLink bounds them, though the world spans two hosts
    assert run_peak(two, hosts, [list(range(8)), list(range(8, 16))], "cuda", BASELINES).gbps == 450
    slow = {"a": _gpu_host(), "b": _gpu_host(ports=4)}
    assert run_peak(slow, hosts, [list(range(16))], "cuda", BASELINES).gbps == 4 * 400 / 8  # the slowest host


def test_cpu_peaks_and_when_there_is_none():
    host = {"network": [{"name": "eth0", "state": "up", "virtual": False, "speed_mbps": 25000}]}
    loopback = run_peak({"a": host}, ["a", "a"], [[0, 1]], "cpu", BASELINES)
    assert loopback.gbps == 10 and "loopback" in loopback.source  # configs/baselines.yaml's loopback
    assert run_peak({"a": host, "b": host}, ["a", "b"], [[0, 1]], "cpu", BASELINES).gbps == 25000 / 8000
    unknown = {"network": [{"name": "eth0", "state": "up", "virtual": False, "speed_mbps": None}]}
    assert run_peak({"a": unknown, "b": unknown}, ["a", "b"], [[0, 1]], "cpu", BASELINES) is None
    assert run_peak({"a": host}, ["a", "b"], [[0, 1]], "cpu", BASELINES) is None  # b not recorded


def test_verdicts_against_a_baseline():
    baseline = resolve_expect("dgx-h100-nvls")  # all_reduce at 8 ranks from 1 GiB: 450 GB/s
    context = RowContext(judging=Judging(baseline))
    cases = {460.0: "PASS", 405.0: "PASS", 400.0: "WARN", 337.5: "WARN", 300.0: "FAIL"}
    for busbw, expected in cases.items():
        row = annotate_row(_row(busbw), context)
        assert (row.verdict, row.expected_gbps) == (expected, 450), busbw
    assert annotate_row(_row(100.0, size=1 << 20), context).verdict == ""  # below the entry's sizes
    assert annotate_row(_row(100.0, world=16), context).verdict == ""  # another world size
    assert annotate_row(_row(None, error="rejected"), context).verdict == ""
    strict = RowContext(judging=Judging(baseline, fail_below=95))
    assert annotate_row(_row(420.0), strict).verdict == "FAIL"
    assert annotate_row(_row(430.0), strict).verdict == "PASS"  # the PASS line moves up to 95% too


def test_fail_below_alone_judges_against_the_peak():
    context = RowContext(peak=run_peak({"a": _gpu_host()}, ["a"] * 8, [list(range(8))], "cuda", BASELINES),
                         judging=Judging(fail_below=80))
    passing, failing = annotate_row(_row(370.0), context), annotate_row(_row(350.0), context)
    assert (passing.pct_of_peak, passing.verdict) == (pytest.approx(82.22, abs=0.01), "PASS")
    assert failing.verdict == "FAIL" and failing.peak_gbps == 450 and "nvlink4" in failing.peak_source
    # NVLS: busbw above the link's figure is possible and reported as is
    assert annotate_row(_row(480.0), context).pct_of_peak == pytest.approx(106.67, abs=0.01)


def test_summary_and_the_exit_reason_name_the_first_failing_row():
    judging = Judging(resolve_expect("dgx-h100-nvls"), fail_below=80)
    context = RowContext(judging=judging)
    rows = [annotate_row(_row(busbw), context) for busbw in (460.0, 200.0, 100.0)] + [_row(1.0, size=8)]
    summary = judged_summary(rows, judging)
    assert (summary["PASS"], summary["WARN"], summary["FAIL"], summary["unjudged"]) == (1, 0, 2, 1)
    reason = below_failure(summary, judging)
    assert reason.startswith("2 of 3 judged rows below --fail-below 80%")
    first = "all_reduce (float32, sum, in-place, sync) at 1 GiB: busbw 200 GB/s, 44.4% of 450 GB/s expected"
    assert first in reason
    assert "2 FAIL" in summary_line(summary) and "baseline dgx-h100-nvls" in summary_line(summary)
    assert below_failure(judged_summary(rows[:1], judging), judging) is None
    nothing = Judging(fail_below=50)
    assert "no row could be judged" in below_failure(judged_summary([_row(1.0)], nothing), nothing)


def test_bad_baselines_and_bad_options_are_one_line_usage_errors(tmp_path):
    cases = {"expect: [{collective: all_reduce}]": "busbw_gbps is missing",
             "expect: [{busbw_gbps: 10, colective: all_reduce}]":
                 r"expect\[0\]: unknown key 'colective' \(did you mean collective\?\)",
             "expect: [{busbw_gbps: -1}]": "expected a finite number above 0",
             "expect: [{busbw_gbps: .nan}]": "busbw_gbps: expected a finite number above 0, got nan",
             "expect: [{busbw_gbps: .inf}]": "busbw_gbps: expected a finite number above 0, got inf",
             "expect: [{busbw_gbps: 1}]\npass_pct: .nan":
                 "pass_pct: expected a finite number above 0, got nan",
             "expect: [{busbw_gbps: 1, min_size: 12Q}]": "malformed size",
             "description: nothing to expect": "expected a mapping with an 'expect' list",
             "expect: [{busbw_gbps: 1}]\npass_pct: 50\nwarn_pct: 60": "warn_pct 60 is above pass_pct 50",
             "[unclosed": "not valid YAML"}
    for index, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"bad{index}.yaml"
        path.write_text(text)
        with pytest.raises(UsageError, match=message) as raised:
            resolve_expect(str(path))
        assert str(path) in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(UsageError, match=r"nor a shipped baseline \(did you mean dgx-h100-nvls\?\)"):
        resolve_expect("dgx-h100-nvsl")
    with pytest.raises(UsageError, match="no such baselines file"):
        resolve_expect(str(tmp_path / "missing.yaml"))
    with pytest.raises(UsageError, match="--fail-below -5"):
        check_judging(None, -5)


def test_a_users_file_holds_one_baseline(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("description: our cluster\nsource: last week's acceptance run\npass_pct: 95\n"
                    "expect:\n  - {collective: [all_gather_base], max_size: 1M, busbw_gbps: 2}\n")
    baseline = resolve_expect(str(path))
    assert baseline.name == "mine" and baseline.pass_pct == 95 and baseline.warn_pct == 75
    context = RowContext(judging=Judging(baseline))
    assert annotate_row(_row(1.9, size=1 << 20, collective="all_gather_base"), context).verdict == "PASS"
    assert annotate_row(_row(1.0, size=1 << 21, collective="all_gather_base"), context).verdict == ""
    assert Path(path).exists()


def test_bad_judging_options_are_refused_before_any_rank_starts(capsys):
    assert main(["--expect", "no-such-baseline", "--sizes", "4K"]) == 2
    assert "--expect 'no-such-baseline' is neither a file nor a shipped baseline" in capsys.readouterr().err
    assert main(["--fail-below", "0", "--sizes", "4K"]) == 2
    assert "--fail-below 0 must be a percentage above 0" in capsys.readouterr().err


def test_each_row_of_the_table_shows_its_verdict_and_percentage():
    context = RowContext(judging=Judging(resolve_expect("dgx-h100-nvls")))
    rows = [annotate_row(_row(busbw), context) for busbw in (450.0, 360.0, 200.0)]
    rows.append(annotate_row(_row(None, error="rejected"), context))  # no busbw: no verdict
    table = run_table([replace(row, size_bytes=(1 << 30) << index) for index, row in enumerate(rows)])
    verdicts = [cells[table.columns.index("verdict")] for cells in table.rows]
    assert verdicts == ["PASS 100%", "WARN 80%", "FAIL 44%", "-"]
    assert "verdict" not in run_table([_row(450.0)]).columns  # not judged: no column


@pytest.mark.processes
def test_a_run_with_expect_prints_a_verdict_on_each_row(tmp_path):
    """A baseline that 1 KiB misses by far and 1 MiB clears by far on any CPU: a FAIL row and a PASS row."""
    baseline = tmp_path / "floor.yaml"
    baseline.write_text("expect:\n  - {busbw_gbps: 0.01}\n")
    result = commbench("--sizes", "1K,1M", "--iters", "5", "--expect", str(baseline), "--output-dir",
                       str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(lines) == 2 and "FAIL" in lines[0] and "PASS" in lines[1]
    assert "verdicts against baseline floor" in result.stdout
