"""Rows reach disk as they are measured; the JSON is always whole."""

import csv
import json
import os
from dataclasses import asdict, replace

import numpy as np
import pytest

from commbench.measure.stats import percentile, slowest_rank_per_iteration, summarize
from commbench.results.model import Row, RunMeta
from commbench.results.saved import load_run
from commbench.writers.files import ResultWriter, readable_json


def _meta() -> RunMeta:
    return RunMeta(run_id="r1", started_at="t0", command=["commbench"], commbench_version="0",
                   torch_version="0", python_version="3", backend="gloo", device="cpu", world_size=2,
                   launcher="local", hostnames=["a", "a"], versions={}, env={}, config={})


def _row(size: int) -> Row:
    return Row(collective="all_reduce", backend="gloo", device="cpu", world_size=2, dtype="float32",
               mode="sync", op="sum", size_bytes=size, requested_bytes=size, count_per_rank=size // 4,
               iters=2, warmup=0, time_us_p50=1.0, time_us_p95=2.0, time_us_min=0.5, time_us_max=2.0,
               time_us_mean=1.25, algbw_gbps=None, busbw_gbps=None, busbw_factor=1.0,
               samples_us=[0.5, float("nan")])


def test_each_row_is_on_disk_before_the_next(tmp_path):
    writer = ResultWriter(_meta(), tmp_path / "r.csv", tmp_path / "r.json")
    for count, size in enumerate([1024, 2048], start=1):
        writer.add(_row(size))
        with open(tmp_path / "r.csv") as handle:
            assert len(list(csv.DictReader(handle))) == count
        payload = json.loads((tmp_path / "r.json").read_text())
        assert len(payload["rows"]) == count and payload["meta"]["status"] == "running"
    assert list(tmp_path.glob(".*.tmp")) == []  # no temporary file left behind
    writer.finish("complete", "t1")
    saved = load_run(tmp_path / "r.json")
    assert saved.meta["status"] == "complete"
    assert saved.rows[1] == replace(_row(2048), samples_us=[0.5, None])  # NaN is written as null
    with open(tmp_path / "r.csv") as handle:
        first = next(csv.DictReader(handle))
    assert first["algbw_gbps"] == "" and "samples_us" not in first


def test_a_long_run_keeps_every_row_in_the_csv_and_all_of_them_in_the_json_at_the_end(tmp_path):
    from commbench.writers.files import JSON_EVERY_ROW_UP_TO

    writer = ResultWriter(_meta(), tmp_path / "r.csv", tmp_path / "r.json")
    count = JSON_EVERY_ROW_UP_TO + 40
    for index in range(count):
        writer.add(_row(1024 * (index + 1)))
    with open(tmp_path / "r.csv") as handle:
        assert len(list(csv.DictReader(handle))) == count  # the CSV: every row, at once
    in_json = len(json.loads((tmp_path / "r.json").read_text())["rows"])
    assert JSON_EVERY_ROW_UP_TO <= in_json <= count  # the JSON: whole, possibly a moment behind
    writer.finish("complete", "t1")
    saved = [row.size_bytes for row in load_run(tmp_path / "r.json").rows]
    assert saved == [1024 * (index + 1) for index in range(count)]


def test_a_run_whose_rank_0_died_mid_rewrite_is_settled_without_its_temporary_file(tmp_path):
    import tempfile

    from commbench.writers.files import finish_abandoned

    writer = ResultWriter(_meta(), tmp_path / "r.csv", tmp_path / "r.json")
    for size in (1024, 2048):
        writer.add(_row(size))
    # rank 0 stopped and killed inside a rewrite: its temporary holds half a JSON, never renamed
    handle, cut_short = tempfile.mkstemp(prefix=".r.json.", suffix=".tmp", dir=tmp_path)
    os.write(handle, (tmp_path / "r.json").read_bytes()[:40])
    os.close(handle)
    others = [tmp_path / ".r.json.other.json.tmp", tmp_path / ".other.json.abcdefgh.tmp"]  # not r.json's
    for other in others:
        other.write_text("{}")
    assert finish_abandoned(tmp_path / "r.json", tmp_path / "r.csv", "failed", "t1", "rank 0 died (SIGKILL)")
    saved = load_run(tmp_path / "r.json")
    assert (saved.meta["status"], saved.meta["error"]) == ("failed", "rank 0 died (SIGKILL)")
    assert [row.size_bytes for row in saved.rows] == [1024, 2048]
    assert sorted(tmp_path.glob(".*.tmp")) == sorted(others)


def test_load_run_rejects_other_files(tmp_path):
    from commbench.errors import UsageError

    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(UsageError, match="not a commbench results.json"):
        load_run(tmp_path / "x.json")
    with pytest.raises(UsageError, match="no such results file"):
        load_run(tmp_path / "missing.json")


def test_percentiles_match_numpy():
    values = sorted(np.random.default_rng(3).exponential(size=101).tolist())
    for fraction in (0.0, 0.5, 0.95, 0.99, 1.0):
        assert percentile(values, fraction) == pytest.approx(np.percentile(values, fraction * 100))
    summary = summarize([3.0, 1.0, 2.0, 10.0])
    assert (summary.p50, summary.min, summary.max, summary.mean) == (2.5, 1.0, 10.0, 4.0)


def test_an_iteration_takes_as_long_as_its_slowest_rank():
    assert slowest_rank_per_iteration([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]


def test_files_written_before_the_pattern_fields_still_load(tmp_path):
    old = {key: value for key, value in asdict(_row(1024)).items()
           if key not in ("pattern", "model", "unit", "phase", "bucket_mb", "predivide", "postdivide",
                          "calls_per_step", "overlap_pct", "compute_size")}
    (tmp_path / "old.json").write_text(readable_json({"schema": 1, "meta": {}, "rows": [old]}))  # NaN: null
    (row,) = load_run(tmp_path / "old.json").rows
    assert row.pattern == "" and row.bucket_mb == "" and row.predivide is None
    assert row.key()[:7] == ("all_reduce", "float32", "sum", "sync", 1024, 2, "gloo")


def test_pattern_rows_differ_in_their_keys_by_unit_phase_and_bucket():
    base = replace(_row(4096), collective="reduce_scatter_base", pattern="fsdp", model="tiny", unit="block0",
                   phase="backward", bucket_mb="0", predivide=2.0, postdivide=1.0)
    variants = [base, replace(base, unit="block1"), replace(base, bucket_mb="25"),
                replace(base, phase="flush"), replace(base, model="tiny/layers=1"),
                replace(base, predivide=1.0, postdivide=2.0),
                replace(base, pattern="", model="", unit="", phase="", bucket_mb="", predivide=None,
                        postdivide=None)]
    assert len({row.key() for row in variants}) == len(variants)
    assert replace(base, compute_size=64).key() == base.key()  # 'auto' sizes vary between runs


def test_rows_written_before_the_check_fields_existed_still_load(tmp_path):
    from dataclasses import asdict

    old = asdict(_row(1024))
    for name in ("placement", "wrong", "first_wrong", "error"):
        del old[name]
    (tmp_path / "old.json").write_text(readable_json({"schema": 1, "meta": {}, "rows": [old]}))
    (row,) = load_run(tmp_path / "old.json").rows
    assert (row.placement, row.wrong, row.first_wrong, row.error) == ("", None, "", "")
    assert row.key() != replace(row, placement="in-place").key()  # placements are told apart


def test_titles_leave_out_the_placement_a_collective_has_by_default():
    from commbench.results.model import default_placement

    row = replace(_row(1024), placement="in-place")  # all_reduce runs in place unless asked
    assert default_placement("all_reduce") == "in-place" and default_placement("not_a_collective") == ""
    assert row.qualifiers() == [] and replace(row, placement="out-of-place").qualifiers() == [
        "placement out-of-place"]
