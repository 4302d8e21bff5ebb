"""The core path end to end: the real CLI on 2 and 3 local ranks, and under torchrun."""

import csv
import json
from pathlib import Path

import pytest

from commbench.measure.collectives import REGISTRY
from tests.dist_helpers import collectives_gloo_refuses, commbench, torchrun

pytestmark = pytest.mark.processes

REQUIRED_COLUMNS = ["collective", "backend", "device", "world_size", "dtype", "mode", "size_bytes",
                    "count_per_rank", "iters", "time_us_p50", "time_us_p95", "time_us_min", "time_us_max",
                    "time_us_mean", "algbw_gbps", "busbw_gbps"]


def _read(run_dir: Path) -> tuple[list[dict], dict]:
    (run,) = [p for p in run_dir.iterdir() if p.is_dir()]
    with open(run / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    return rows, json.loads((run / "results.json").read_text())


@pytest.mark.parametrize("nproc", [2, 3])
def test_every_collective_on_local_ranks(tmp_path, nproc):
    result = commbench("--collective", "all", "--sizes", "1K:16K:x4", "--iters", "3", "--warmup", "1",
                       "--nproc", str(nproc), "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows, payload = _read(tmp_path)
    assert list(rows[0])[: len(REQUIRED_COLUMNS)] != [] and set(REQUIRED_COLUMNS) <= set(rows[0])
    # 'all' is every collective this torch's gloo can run (all_to_all from torch 2.12); the rest are named
    refused = collectives_gloo_refuses()
    meta = payload["meta"]
    assert meta["unavailable"] == refused
    assert {row["collective"] for row in rows} == set(REGISTRY) - set(refused)
    for name, collective in REGISTRY.items():  # a table per collective that runs here
        title = f"{name} · float32" if collective.sized else f"\n{name}\n"  # the barrier has no dtype
        assert (title in result.stdout) == (name not in refused)
    said = " ".join(result.stdout.split())  # the console wraps a long note
    assert said.count("--collective all: left out") == (1 if refused else 0)
    assert all(f"{name} ({why}" in said for name, why in refused.items())
    assert len(payload["rows"]) == len(rows)
    assert meta["status"] == "complete" and meta["world_size"] == nproc and meta["backend"] == "gloo"
    assert meta["launcher"] == "local" and len(meta["hostnames"]) == nproc
    assert meta["torch_version"] and meta["commbench_version"] and meta["started_at"]
    for row in rows:
        assert int(row["world_size"]) == nproc
        if row["collective"] == "barrier":
            assert row["busbw_gbps"] == "" and row["size_bytes"] == "0"
            continue
        algbw, busbw = float(row["algbw_gbps"]), float(row["busbw_gbps"])
        factor = REGISTRY[row["collective"]].busbw_factor(nproc)
        assert busbw / algbw == pytest.approx(factor, rel=1e-9)
        # algbw is size over the median time, in 1e9 bytes per second
        assert algbw == pytest.approx(int(row["size_bytes"]) / (float(row["time_us_p50"]) * 1e-6) / 1e9)
        assert float(row["time_us_min"]) <= float(row["time_us_p50"]) <= float(row["time_us_max"])


def test_torchrun_three_ranks_both_modes(tmp_path):
    result = torchrun(3, "--collective", "reduce_scatter_base,all_gather_base", "--sizes", "4K:4M:x8",
                      "--mode", "both", "--iters", "3", "--warmup", "1", "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows, payload = _read(tmp_path)
    assert payload["meta"]["launcher"] == "torchrun" and payload["meta"]["world_size"] == 3
    assert {(row["collective"], row["mode"]) for row in rows} == {
        (c, m) for c in ("reduce_scatter_base", "all_gather_base") for m in ("sync", "async")}
    # 4 KiB cannot be split into 3 whole float32 chunks: the size used is shown, with a note
    assert {int(row["size_bytes"]) for row in rows} == {4092, 32760, 262140, 2097144}
    assert "4 KiB -> 4092 B" in result.stdout
    # the modes stack: async (one window, one sample per size) shows its time and no spread
    async_lines = [line for line in result.stdout.splitlines() if "│ async │" in line]
    assert "p50 µs" in result.stdout and len(async_lines) == 8
    assert all(line.split("│")[5].strip() == "-" for line in async_lines)


def test_explicit_csv_and_json_paths(tmp_path):
    csv_path, json_path = tmp_path / "a" / "out.csv", tmp_path / "b" / "out.json"
    result = commbench("--collective", "all_reduce", "--sizes", "1K,2K", "--iters", "2",
                       "--csv", str(csv_path), "--json", str(json_path), "--output-dir", str(tmp_path / "d"),
                       "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    with open(csv_path) as handle:
        assert [row["size_bytes"] for row in csv.DictReader(handle)] == ["1024", "2048"]
    payload = json.loads(json_path.read_text())
    assert [row["size_bytes"] for row in payload["rows"]] == [1024, 2048]
    assert len(payload["rows"][0]["samples_us"]) == 2
    assert not (tmp_path / "d").exists()


def test_a_rejected_dtype_or_op_is_an_error_row_and_the_sweep_goes_on(tmp_path):
    # gloo has no float8 and no premul_sum: those rows record why, the others are measured
    result = commbench("--collective", "all_reduce,broadcast", "--dtype", "float8_e4m3fn,float32", "--op",
                       "sum,premul_sum", "--sizes", "1K,2K", "--iters", "2", "--output-dir", str(tmp_path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    rows, payload = _read(tmp_path)
    assert len(rows) == len(payload["rows"]) == 2 * 2 * 2 + 2 * 2  # all_reduce x dtypes x ops x sizes
    failed = {(r["collective"], r["dtype"], r["op"]): r["error"] for r in payload["rows"] if r["error"]}
    assert failed[("all_reduce", "float8_e4m3fn", "sum")] == "Invalid scalar type (on every rank)"
    assert failed[("broadcast", "float8_e4m3fn", "")] == "Invalid scalar type (on every rank)"
    assert failed[("all_reduce", "float32", "premul_sum")].startswith(
        "premul_sum is NCCL's pre-multiplied sum; the gloo backend does not have it")
    assert len(failed) == 4  # float8 (both collectives, both ops) and float32 premul_sum
    measured = [r for r in payload["rows"] if not r["error"]]
    assert len(measured) == 4 and all(r["time_us_p50"] > 0 for r in measured)
    assert all(r["time_us_p50"] is None for r in payload["rows"] if r["error"])
    assert [r["error"] for r in rows if r["dtype"] == "float32" and r["op"] != "premul_sum"] == [""] * 4
    summary = ("8 rows failed (first: all_reduce (float8_e4m3fn, sum, in-place, sync) at 1 KiB: "
               "Invalid scalar type (on every rank))")
    assert result.stderr.strip().splitlines() == [f"commbench: error: {summary}"]
    assert "Invalid scalar type (on every rank)" in result.stdout  # the table's error column
    assert payload["meta"]["status"] == "failed" and payload["meta"]["error"] == summary
