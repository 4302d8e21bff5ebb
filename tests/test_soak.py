"""The soak loop: durations as typed, and ranks that agree on every pass (real gloo ranks)."""

import json
import time

import pytest
import torch

from commbench.backends.torch_dist import TorchDistBackend
from commbench.core.sizes import parse_duration
from commbench.errors import UsageError
from commbench.results.model import Row
from commbench.results.passes import describe_time_spike, soak_lines, time_spikes
from commbench.running.soak import repeat_until
from commbench.writers.output import NullOutput
from tests.dist_helpers import commbench, run_ranks


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("10m", 600), ("1h30m", 5400), ("2h", 7200),
                                           ("45", 45), ("0.5m", 30), (" 1D ", 86400), ("1s", 1),
                                           ("0.5s", 0.5)])
def test_durations_read_as_people_write_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten", "10x", "m", "0s", "-5m", "10m 5"])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(UsageError, match="--duration"):
        parse_duration(text)


def _row(rank: int) -> Row:
    return Row(collective="p2p_uni", backend="gloo", device="cpu", world_size=2, dtype="uint8", mode="sync",
               op="", size_bytes=1, requested_bytes=1, count_per_rank=1, iters=1, warmup=0, time_us_p50=1.0,
               time_us_p95=1.0, time_us_min=1.0, time_us_max=1.0, time_us_mean=1.0, algbw_gbps=None,
               busbw_gbps=None, busbw_factor=1.0, src_rank=rank)


class _Collect(NullOutput):
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def row(self, row: Row) -> None:
        self.rows.append(row)


def _soak(rank: int, world_size: int, duration_s: float | None, passes: int | None = None) -> dict:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    output = _Collect()
    seen_after: list[int] = []

    def one_pass(out) -> None:
        time.sleep(0.02 * (rank + 1))  # the ranks' passes take different times
        backend.barrier()
        out.row(_row(rank))
        out.row(_row(rank))

    stamped = repeat_until(duration_s, one_pass, output, backend,
                           after_pass=lambda rows: seen_after.append(len(rows)), passes=passes)
    return {"stamped": [(row.repeat, row.elapsed_s) for row in stamped],
            "inner": [(row.repeat, row.elapsed_s) for row in output.rows], "after": seen_after}


@pytest.mark.processes
def test_every_rank_runs_the_same_passes_and_every_row_is_stamped():
    results = run_ranks(_soak, 2, 0.3)
    passes = [len(result["after"]) for result in results]
    assert passes[0] == passes[1] and passes[0] > 1
    for result in results:
        repeats = [repeat for repeat, _ in result["stamped"]]
        assert repeats == [index // 2 for index in range(2 * passes[0])]
        elapsed = [value for _, value in result["stamped"]]
        assert elapsed == sorted(elapsed) and all(value is not None for value in elapsed)
        assert result["inner"] == result["stamped"]  # the output got the stamped rows, as they came
        assert result["after"] == [2 * (index + 1) for index in range(passes[0])]


@pytest.mark.processes
def test_without_a_duration_there_is_one_pass():
    results = run_ranks(_soak, 2, None)
    assert [result["after"] for result in results] == [[2], [2]]
    assert all(repeat == 0 for result in results for repeat, _ in result["stamped"])


@pytest.mark.processes
@pytest.mark.parametrize("duration_s", [None, 3600.0])
def test_a_number_of_passes_stops_the_soak_at_that_many(duration_s):
    results = run_ranks(_soak, 2, duration_s, 3)
    assert [result["after"] for result in results] == [[2, 4, 6], [2, 4, 6]]


# --- soaking a sweep -------------------------------------------------------------------------------

def _timed(p50: float, repeat: int, size: int = 1024) -> Row:
    return Row(collective="all_reduce", backend="gloo", device="cpu", world_size=2, dtype="float32",
               mode="sync", op="sum", size_bytes=size, requested_bytes=size, count_per_rank=size // 4,
               iters=5, warmup=1, time_us_p50=p50, time_us_p95=p50, time_us_min=p50, time_us_max=p50,
               time_us_mean=p50, algbw_gbps=None, busbw_gbps=None, busbw_factor=1.0, repeat=repeat,
               elapsed_s=float(repeat))


def test_a_pass_far_slower_than_the_measurements_own_median_is_a_spike():
    rows = [_timed(p50, repeat) for repeat, p50 in enumerate([100.0, 104.0, 520.0, 98.0, 101.0])]
    rows += [_timed(p50, repeat, size=4096) for repeat, p50 in enumerate([200.0, 210.0, 190.0, 260.0, 205.0])]
    (spike,) = time_spikes(rows)
    assert spike.passes == [2] and spike.total == 5 and spike.median == 101.0
    assert spike.worst_ratio == pytest.approx(520 / 101)
    assert describe_time_spike(spike) == ("all_reduce (float32, sum, sync) at 1 KiB: 1 of 5 passes slower "
                                          "than its median 101.0 µs, worst 5.15x (at 2 s)")
    lines = soak_lines(rows)
    assert lines[0] == "soak: 5 passes in 4 s"
    assert lines[1].startswith("drift: the last pass's times are 1.02x the first's")  # 101/100, 205/200


@pytest.mark.processes
def test_a_sweep_repeats_as_a_soak_and_every_row_knows_its_pass(tmp_path):
    json_path = tmp_path / "soak.json"
    result = commbench("--sizes", "1K,4K", "--iters", "3", "--warmup", "0", "--repeat", "3", "--json",
                       str(json_path), "--csv", str(tmp_path / "soak.csv"))
    assert result.returncode == 0, result.stderr
    rows = json.loads(json_path.read_text())["rows"]
    expected = [(repeat, size) for repeat in range(3) for size in (1024, 4096)]
    assert [(row["repeat"], row["size_bytes"]) for row in rows] == expected
    assert [row["elapsed_s"] for row in rows] == sorted(row["elapsed_s"] for row in rows)
    assert "note: soak: 3 passes in" in result.stdout
    report = commbench("report", str(json_path), "--output", str(tmp_path / "r.html"))
    assert report.returncode == 0 and "Over time" in (tmp_path / "r.html").read_text()
