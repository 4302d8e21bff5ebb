"""`commbench fabric` through the real CLI on local ranks: the matrix and verdict on the console, the
JSON's matrix, rows (with every row's statistics) and suspects, --serial and --sample, a soak (finished
and interrupted), plot, report and compare on its result, and bad input."""

import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from commbench.fabric.kind import draw_fabric, fabric_report_page, load_analysis
from commbench.fabric.run import soak_text
from commbench.results.saved import load_run
from commbench.running.spawn import free_port
from tests.dist_helpers import commbench, torchrun
from tests.process_helpers import csv_rows, start_commbench, wait_for_rows

pytestmark = pytest.mark.processes


@dataclass
class FabricRun:
    json: Path
    csv: Path
    returncode: int
    stdout: str
    stderr: str

    def payload(self) -> dict:
        return json.loads(self.json.read_text())

    def rows(self) -> list[dict]:
        """Every row as the reader gives it back (a round's rows are one block of columns in the file)."""
        return saved_rows(self.json)


def saved_rows(path: Path) -> list[dict]:
    return [asdict(row) for row in load_run(path).rows]


def dense(sparse: dict, size: int) -> list[list[float | None]]:
    """A matrix of the `fabric` part of results.json (its measured entries) with None where unmeasured."""
    matrix: list[list[float | None]] = [[None] * size for _ in range(size)]
    for src, dst, value in zip(sparse["src"], sparse["dst"], sparse["value"], strict=True):
        matrix[src][dst] = value
    return matrix


def _fabric(where: Path, *args: str) -> FabricRun:
    json_path, csv_path = where / "fabric.json", where / "fabric.csv"
    result = commbench("fabric", *args, "--json", str(json_path), "--csv", str(csv_path), "--timeout", "60")
    return FabricRun(json_path, csv_path, result.returncode, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> FabricRun:
    run = _fabric(tmp_path_factory.mktemp("four"), "--nproc", "4", "--size", "256K", "--iters", "5")
    assert run.returncode == 0, run.stderr
    return run


def test_four_local_ranks_print_both_matrices_and_a_verdict(four_ranks):
    out = four_ranks.stdout
    assert "world size 4" in out
    assert "6 pairs of 4 ranks in 3 rounds (circle schedule)" in " ".join(out.split())
    for title in ("bandwidth GB/s, 256 KiB messages", "latency µs, half a 8 B round trip"):
        assert title in out
    assert "all_reduce within each node" in out
    assert out.count("verdict: ") == 1 and out.index("verdict: ") > out.index("latency µs")


def test_the_json_holds_the_matrices_every_pair_both_ways_and_the_suspects(four_ranks):
    payload = four_ranks.payload()
    fabric = payload["fabric"]
    matrix, latency = dense(fabric["bandwidth_gbps"], 4), dense(fabric["latency_us"], 4)
    assert len(fabric["bandwidth_gbps"]["src"]) == 12  # the measured entries only
    for src in range(4):
        for dst in range(4):
            assert (matrix[src][dst] is None) == (src == dst)
            assert src == dst or matrix[src][dst] > 0 and latency[src][dst] > 0
    assert isinstance(fabric["suspects"], list) and isinstance(fabric["drain"], list)
    assert [line for line in fabric["verdict"] if line.startswith("verdict: ")]
    # four ranks on fewer CPUs (this repository's machine has two): said first, and nothing there is named
    cpus = len(os.sched_getaffinity(0))
    host = payload["meta"]["hostnames"][0]
    assert fabric["oversubscribed"] == ({host: {"ranks": 4, "cpus": cpus}} if cpus < 4 else {})
    if cpus < 4:
        assert fabric["verdict"][0].startswith("oversubscribed: ") and fabric["suspects"] == []
    # each of the 3 rounds is one block of its 8 rows' columns (2 pairs, both ways, bandwidth and latency)
    assert [item.get("block_of") for item in payload["rows"][:3]] == [8, 8, 8]
    assert "src_rank" in payload["rows"][0]["each"] and payload["rows"][0]["same"]["pattern"] == "fabric"
    rows = four_ranks.rows()
    first_time = [row for row in rows if row["phase"] != "recheck"]  # a noisy machine may recheck a pair
    for collective in ("p2p_uni", "ping_pong"):
        directions = sorted((row["src_rank"], row["dst_rank"]) for row in first_time
                            if row["collective"] == collective)
        assert directions == [(a, b) for a in range(4) for b in range(4) if a != b]
    assert [row["group_layout"] for row in rows if row["collective"] == "all_reduce"] == ["intra-node"]
    assert all(row["pattern"] == "fabric" and row["repeat"] == 0 and row["elapsed_s"] is not None
               for row in rows)
    assert len(csv_rows(four_ranks.csv)) == len(rows)


def test_fabric_rows_carry_the_statistics_every_row_has(four_ranks):
    rows = four_ranks.rows()
    for row in rows:
        samples = row["samples_us"]
        assert row["samples"] == len(samples) == row["iters"] and row["time_us_p99"] is not None
        assert row["time_us_min"] <= row["time_us_p50"] <= row["time_us_max"]
        # (min, max) covers the median with 1 - 2/2^n: 95% from 6 samples, so no interval below 6
        assert (row["ci95_rel"] is None) == (len(samples) < 6)
        # a sample is the slower of the measuring ranks' times: never below any one rank's mean
        assert sum(samples) / len(samples) >= max(row["rank_mean_us"]) - 1e-3
    pairs = [row for row in rows if row["collective"] in ("p2p_uni", "ping_pong")]
    assert all(len(row["rank_mean_us"]) == 2 and row["busbw_gbps"] == row["algbw_gbps"] for row in pairs)
    (node,) = [row for row in rows if row["collective"] == "all_reduce"]
    assert len(node["rank_mean_us"]) == 4 and node["busbw_factor"] == 1.5  # 2(n-1)/n at 4 ranks


def test_the_saved_verdict_is_what_the_saved_rows_say(four_ranks):
    run = load_run(four_ranks.json)
    analysis = load_analysis(run)  # as plot and report read it: the rows, the factor, the hosts' CPUs
    assert analysis.to_dict()["verdict"] == four_ranks.payload()["fabric"]["verdict"]
    entries = analysis.matrices.bandwidth_gbps.to_dict()  # the measured entries, as arrays
    assert {name: found.tolist() for name, found in entries.items()} == \
        four_ranks.payload()["fabric"]["bandwidth_gbps"]


def test_plot_draws_the_heatmaps_of_a_fabric_result(four_ranks, tmp_path):
    image = tmp_path / "fabric.png"
    result = commbench("plot", str(four_ranks.json), "--output", str(image))
    assert result.returncode == 0, result.stderr
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _assert_titles_inside_and_colour_from_zero(draw_fabric([load_run(four_ranks.json)]))


def test_report_shows_the_heatmaps_tables_and_verdict(four_ranks, tmp_path):
    page = tmp_path / "fabric.html"
    result = commbench("report", str(four_ranks.json), "--output", str(page))
    assert result.returncode == 0, result.stderr
    html = page.read_text()
    assert "commbench fabric report" in html and "data:image/png;base64," in html
    assert "verdict: " in html and "bandwidth GB/s" in html


def test_report_without_matplotlib_keeps_the_tables_and_verdict_and_says_why(four_ranks):
    page = fabric_report_page([load_run(four_ranks.json)], "plots need matplotlib, which is not installed")
    assert "No heatmaps: plots need matplotlib" in page and "data:image/png" not in page
    assert "verdict: " in page and "bandwidth GB/s" in page


def test_compare_refuses_a_fabric_result_against_a_sweep(four_ranks, two_runs, tmp_path):
    result = commbench("compare", str(two_runs[0].json), str(four_ranks.json))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "is a fabric result" in result.stderr
    again = tmp_path / "again.json"  # compare reads each file once: the same result under another name
    again.write_text(four_ranks.json.read_text())
    same = commbench("compare", str(four_ranks.json), str(again))
    assert same.returncode == 0, same.stderr


def test_serial_sampled_rounds_measure_k_peers_per_rank(tmp_path):
    run = _fabric(tmp_path, "--nproc", "4", "--serial", "--sample", "2", "--size", "64K", "--iters", "3")
    assert run.returncode == 0, run.stderr
    assert "4 pairs of 4 ranks in 2 rounds sampled (--sample 2), one pair at a time (--serial)" in \
        " ".join(run.stdout.split())
    rows = [row for row in run.rows() if row["collective"] == "p2p_uni" and row["phase"] != "recheck"]
    assert len(rows) == 8 and {row["phase"] for row in rows} == {"serial"}
    peers = {rank: {row["dst_rank"] for row in rows if row["src_rank"] == rank} for rank in range(4)}
    assert all(len(found) == 2 for found in peers.values())
    matrix = dense(run.payload()["fabric"]["bandwidth_gbps"], 4)
    assert sum(value is None for line in matrix for value in line) == 4 + 4  # the diagonal and 2 pairs


def test_the_soak_summary_says_whichever_comes_first_only_of_two_limits():
    assert soak_text(3600, 3) == "; soak: 3600 s or 3 passes, whichever comes first"
    assert soak_text(20, None) == "; soak: passes for 20 s (the last one started in time runs to its end)"
    assert soak_text(None, 3) == "; soak: 3 passes" and soak_text(None, None) == ""


def test_a_soak_repeats_passes_and_reports_drift(tmp_path):
    run = _fabric(tmp_path, "--nproc", "2", "--duration", "1h", "--repeat", "3", "--size", "64K",
                  "--iters", "3")
    assert run.returncode == 0, run.stderr
    assert "1 pair of 2 ranks in 1 round (circle schedule)" in " ".join(run.stdout.split())
    assert "soak: 3600 s or 3 passes, whichever comes first" in " ".join(run.stdout.split())
    payload = run.payload()
    passes = payload["fabric"]["passes"]
    assert len(passes) == 3 and "drift: median bandwidth per pass" in run.stdout
    rows = run.rows()
    assert sorted({row["repeat"] for row in rows}) == list(range(len(passes)))
    elapsed = [row["elapsed_s"] for row in rows]
    assert elapsed == sorted(elapsed)
    figure = draw_fabric([load_run(run.json)])  # a soak's figure adds the drift panel
    titles = [axes.get_title() for axes in figure.axes if axes.get_title()]
    assert titles == ["bandwidth by pair\n(x: slow)", "latency by pair\n(x: slow)",
                      "soak: bandwidth over time\n(spikes in colour)"]
    _assert_titles_inside_and_colour_from_zero(figure)


def _assert_titles_inside_and_colour_from_zero(figure) -> None:
    """No title, label or host name cut at the figure's edge; each heatmap's colours start at 0 and end
    at its largest value, so colour is proportional to the value."""
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    frame = figure.bbox
    texts = [text for axes in figure.axes for text in (axes.title, axes.xaxis.label, axes.yaxis.label,
                                                        *axes.texts) if text.get_text()]
    outside = [text.get_text() for text in texts
               if not (frame.x0 - 1 <= text.get_window_extent(renderer).x0
                       and text.get_window_extent(renderer).x1 <= frame.x1 + 1)]
    assert outside == []
    images = [image for axes in figure.axes for image in axes.images]
    assert len(images) == 2
    for image in images:
        values = [value for value in image.get_array().compressed()]
        assert image.norm.vmin == 0 and image.norm.vmax == pytest.approx(max(values))


def test_interrupting_a_soak_keeps_every_row_and_the_analysis(tmp_path):
    json_path, csv_path = tmp_path / "soak.json", tmp_path / "soak.csv"
    proc = start_commbench("fabric", "--nproc", "3", "--duration", "10m", "--size", "64K", "--iters", "3",
                           "--json", str(json_path), "--csv", str(csv_path))
    per_pass = 3 * 4 + 1  # 3 pairs both ways, bandwidth and latency; the node's all_reduce
    count = per_pass + 1
    while True:  # into the second pass (on a busy machine the first may recheck a pair: more rows)
        wait_for_rows(csv_path, count, proc)
        if any(row["repeat"] != "0" for row in csv_rows(csv_path)):
            break
        count += 1
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, stderr
    payload = json.loads(json_path.read_text())
    assert payload["meta"]["status"] == "interrupted"
    rows = saved_rows(json_path)
    kept = len(rows)
    assert kept == len(csv_rows(csv_path)) > per_pass
    assert max(row["repeat"] for row in rows) >= 1
    assert payload["fabric"]["passes"]  # the analysis of the passes it finished
    # the console concludes on the rows so far (the fabric's tables, not a pattern's) and says so
    assert stdout.count("verdict: ") == 1 and "bandwidth GB/s, 64 KiB messages" in " ".join(stdout.split())
    assert f"interrupted by SIGINT: {kept} rows measured and kept" in stdout


@pytest.mark.parametrize("args, message", [
    (["--nproc", "1"], "a world of 1 rank has none"),
    (["--nproc", "3", "--sample", "3"], "--sample 3 is more than the 2 peers each rank has"),
    (["--nproc", "2", "--size", "1T"], "--size 1024 GiB does not fit in memory"),
    (["--size", "lots"], "malformed size 'lots'"),
    (["--duration", "ten"], "--duration 'ten'"),
    (["--slow-factor", "1"], "--slow-factor 1 must be above 1"),
    (["--repeat", "0"], "--repeat 0 must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = commbench("fabric", *args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("commbench: error:")
    assert message in result.stderr and result.stdout == ""


def test_a_launched_world_of_one_rank_is_bad_input():
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    result = commbench("fabric", "--size", "4K", "--output-dir", "/tmp/commbench-test-fabric-one", env=env)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "a world of 1 rank has none" in result.stderr


def test_every_fabric_option_reaches_commbench_through_torchrun(tmp_path):
    json_path = tmp_path / "t.json"
    result = torchrun(2, "fabric", "--size", "48K", "--latency-size", "16", "--iters", "3", "--warmup", "1",
                      "--serial", "--sample", "1", "--duration", "1h", "--repeat", "2", "--slow-factor", "3",
                      "--fail-on-outlier", "--timeout", "60", "--quiet", "--json", str(json_path),
                      "--csv", str(tmp_path / "t.csv"))
    assert result.returncode == 0, result.stderr
    config = json.loads(json_path.read_text())["meta"]["config"]
    assert (config["size"], config["latency_size"]) == (48 * 1024, 16)
    assert (config["iters"], config["warmup"]) == (3, 1)
    assert (config["serial"], config["sample"], config["duration_s"], config["passes"]) == (True, 1, 3600, 2)
    assert (config["slow_factor"], config["fail_on_outlier"], config["quiet"]) == (3.0, True, True)
    assert result.stdout == ""  # --quiet
