"""commbench.load on runs made by the suite (tests/conftest.py): one DataFrame over any number of runs,
from JSON or CSV, from a glob, a run directory or a list; files of older versions; bad input."""

import csv
import json
import math
import shutil
import subprocess
import sys
from dataclasses import asdict, fields

import pandas as pd
import pytest

import commbench
from commbench.errors import UsageError
from commbench.results.frame import PASS_COLUMNS, ROW_COLUMNS, RUN_COLUMNS
from commbench.results.model import CSV_COLUMNS, Row
from commbench.results.saved import load_run
from tests.dist_helpers import ROOT

# What rows and metadata looked like before each of these fields existed (later fields of Row and RunMeta).
LATER_ROW_FIELDS = ("samples", "time_us_p99", "time_us_stdev", "time_us_cv", "ci95_rel", "group_size",
                    "group_layout", "group_count", "skew_us_max", "slowest_rank", "placement", "wrong",
                    "first_wrong", "error", "rank_mean_us", "rank_skew_us", "pattern", "model", "unit",
                    "phase", "bucket_mb", "predivide", "postdivide", "calls_per_step", "overlap_pct",
                    "compute_size", "benchmark", "root", "impl", "impl_status", "impl_note", "impl_init_ms",
                    "impl_register_ms", "impl_setup_bytes", "kernels", "output_digest")
LATER_META_FIELDS = ("benchmarks", "groups")


def test_a_glob_of_several_runs_is_one_frame_with_every_row_and_its_run(two_runs, six_collective_runs):
    files = [*two_runs, *six_collective_runs]
    where = files[0].json.parent
    frame = commbench.load([str(where / "*.json"), six_collective_runs[0].json, six_collective_runs[1].json])
    runs = [load_run(saved.json) for saved in files]
    assert len(frame) == sum(len(run.rows) for run in runs)
    assert list(frame.columns) == ROW_COLUMNS + RUN_COLUMNS + PASS_COLUMNS
    assert (frame.loc[frame["error"] == "", "passes"] == 1).all() and frame["pass_spread_pct"].isna().all()
    assert frame["path"].unique().tolist() == [str(saved.json) for saved in files]  # glob sorted, each once
    for run in runs:
        part = frame[frame["path"] == str(run.path)]
        assert (part["run_id"] == run.meta["run_id"]).all() and (part["status"] == "complete").all()
        assert (part["hosts"] == run.meta["hostnames"][0]).all() and (part["host_count"] == 1).all()
        assert (part["torch_version"] == run.meta["torch_version"]).all()
        assert part["nccl_version"].isna().all()  # gloo records no NCCL version
        assert part["started_at"].iloc[0] == pd.Timestamp(run.meta["started_at"])
        for row, record in zip(run.rows, part.to_dict("records"), strict=True):
            assert record["samples_us"] == row.samples_us and isinstance(record["samples_us"], list)
            assert record["time_us_p50"] == row.time_us_p50 and record["size_bytes"] == row.size_bytes
            assert record["collective"] == row.collective and record["benchmark"] == row.benchmark
    assert frame["size_bytes"].dtype == "int64" and frame["busbw_gbps"].dtype == "float64"
    assert frame["wrong"].isna().all() and frame["started_at"].dt.tz is not None


def test_the_notebook_example_pivots_busbw_by_size(six_collective_runs):
    frame = commbench.load([saved.json for saved in six_collective_runs])
    sync = frame[(frame["collective"] == "all_reduce") & (frame["mode"] == "sync")]
    table = sync.pivot_table(index="size_bytes", columns="run_id", values="busbw_gbps")
    assert table.index.tolist() == [1024, 4096, 16384]
    assert table.shape[1] == 2 and math.isnan(table.iloc[2, 0]) and table.iloc[2, 1] > 0  # 16K: second only


def test_a_run_directory_and_a_csv_load_the_same_rows(two_runs, tmp_path):
    saved = two_runs[0]
    run_dir = tmp_path / "20240101-000000-abcdef"
    run_dir.mkdir()
    shutil.copy(saved.json, run_dir / "results.json")
    from_dir = commbench.load(run_dir)
    from_csv = commbench.load(saved.csv)  # a.csv: the metadata comes from a.json beside it
    assert from_csv["run_id"].unique().tolist() == from_dir["run_id"].unique().tolist()
    pd.testing.assert_frame_equal(from_csv[CSV_COLUMNS], from_dir[CSV_COLUMNS])
    assert (from_csv["samples_us"].map(len) == 0).all()  # the CSV has no per-sample lists
    alone = tmp_path / "copy.csv"
    shutil.copy(saved.csv, alone)
    lone = commbench.load(alone)
    assert lone["run_id"].isna().all() and lone["host_count"].isna().all()
    assert load_run(alone).describe().startswith(f"{alone} (gloo, cpu, 2 ranks")


def test_files_of_older_versions_load_with_the_defaults_rows_document(two_runs, tmp_path):
    payload = json.loads(two_runs[0].json.read_text())
    for row in payload["rows"]:
        for name in LATER_ROW_FIELDS:
            del row[name]
    for name in LATER_META_FIELDS:
        del payload["meta"][name]
    del payload["fits"]
    old_json = tmp_path / "old.json"
    old_json.write_text(json.dumps(payload))
    with open(two_runs[0].csv, newline="") as handle:
        lines = list(csv.DictReader(handle))
    old_columns = [name for name in CSV_COLUMNS if name not in LATER_ROW_FIELDS]
    old_csv = tmp_path / "old_alone.csv"
    with open(old_csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=old_columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(lines)
    derived_or_lists = ("group_size", "rank_mean_us", "rank_skew_us")
    defaults = {f.name: f.default for f in fields(Row)
                if f.name in LATER_ROW_FIELDS and f.name not in derived_or_lists}
    fresh = commbench.load(two_runs[0].json)
    for old in (commbench.load(old_json), commbench.load(old_csv)):
        assert len(old) == len(fresh)
        assert (old["group_size"] == old["world_size"]).all()  # one group of the whole world
        for name, default in defaults.items():
            values = old[name].tolist()
            expected = all(pd.isna(v) for v in values) if default is None else values == [default] * len(old)
            assert expected, name
        assert old["time_us_p50"].tolist() == fresh["time_us_p50"].tolist()
        assert old["collective"].tolist() == fresh["collective"].tolist()
    assert load_run(old_json).rows[0].key()[:7] == load_run(two_runs[0].json).rows[0].key()[:7]


def _one_line_usage_error(paths: object) -> str:
    with pytest.raises(UsageError) as caught:
        commbench.load(paths)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    return message


def test_bad_missing_and_foreign_files_are_one_line_naming_the_file(two_runs, tmp_path):
    good = asdict(load_run(two_runs[0].json).rows[0])
    cases = {
        "broken.json": "{not json",
        "foreign.json": '{"rows": [{"collective": "x"}]}',
        "typed.json": json.dumps({"meta": {}, "rows": [{**good, "size_bytes": "big"}]}),
        "hosts.json": json.dumps({"meta": {"hostnames": "node1"}, "rows": []}),
        "foreign.csv": "a,b\n1,2\n",
        "typed.csv": ",".join(CSV_COLUMNS) + "\n" + ",".join("x" for _ in CSV_COLUMNS) + "\n",
    }
    for name, content in cases.items():
        (tmp_path / name).write_text(content)
        message = _one_line_usage_error(tmp_path / name)
        kind = "results.csv" if name.endswith(".csv") else "results.json"
        assert message.startswith(f"{tmp_path / name}: not a commbench {kind}"), message
    assert "row 0: size_bytes is 'big', not a whole number" in _one_line_usage_error(tmp_path / "typed.json")
    missing = tmp_path / "missing.json"
    assert _one_line_usage_error(missing) == f"{missing}: no such results file"
    assert _one_line_usage_error(tmp_path) == (
        f"{tmp_path}: no results.json in it or in a run directory under it")
    pattern = str(tmp_path / "nothing-*" / "results.json")
    assert _one_line_usage_error(pattern) == f"{pattern}: no file matches this pattern"
    assert _one_line_usage_error([]) == "no results files given"


@pytest.mark.processes
def test_importing_commbench_loads_neither_torch_nor_pandas():
    program = ("import sys, commbench; "
               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pandas')))")
    found = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_an_output_directory_holding_one_run_loads_as_that_run(two_runs, tmp_path):
    """`--output-dir runs/A` makes runs/A/<run-id>/: runs/A names the run while it holds only that one."""
    output_dir = tmp_path / "A"
    (output_dir / "20260101-000000-aaaaaa").mkdir(parents=True)
    shutil.copy(two_runs[0].json, output_dir / "20260101-000000-aaaaaa" / "results.json")
    frame = commbench.load(output_dir)
    assert len(frame) == len(load_run(two_runs[0].json).rows)
    assert frame["path"].unique().tolist() == [str(output_dir / "20260101-000000-aaaaaa" / "results.json")]
    (output_dir / "20260102-000000-bbbbbb").mkdir()
    shutil.copy(two_runs[1].json, output_dir / "20260102-000000-bbbbbb" / "results.json")
    assert _one_line_usage_error(output_dir) == (
        f"{output_dir} holds 2 runs (20260101-000000-aaaaaa, 20260102-000000-bbbbbb): name one, or give the "
        f"glob '{output_dir / '*' / 'results.json'}' for all of them")


def test_a_fabric_result_of_the_first_schema_loads_and_concludes_as_it_said():
    """tests/data/fabric-schema1.json is kept from a real run (3 local ranks, --repeat 2) of commbench
    before rows measured together were blocks of columns and the matrices their measured entries: every
    row its own object, the matrices dense rank x rank lists."""
    from commbench.fabric.kind import fabric_report_page, load_analysis

    path = ROOT / "tests" / "data" / "fabric-schema1.json"
    payload = json.loads(path.read_text())
    assert payload["schema"] == 1 and isinstance(payload["fabric"]["bandwidth_gbps"][0], list)
    run = load_run(path)
    assert len(commbench.load(path)) == len(run.rows) == len(payload["rows"]) == 26
    assert [asdict(row) for row in run.rows][3] == {f.name: payload["rows"][3].get(f.name, f.default)
                                                    for f in fields(Row)}
    analysis = load_analysis(run)
    assert analysis.verdict_lines() == payload["fabric"]["verdict"]
    for name in ("bandwidth_gbps", "latency_us", "host_bandwidth_gbps", "host_latency_us"):
        assert getattr(analysis.matrices, name).dense() == payload["fabric"][name], name
    assert [item.bandwidth_gbps for item in analysis.passes] == \
        [item["median_bandwidth_gbps"] for item in payload["fabric"]["passes"]]
    assert payload["fabric"]["verdict"][-1] in fabric_report_page([run], "no plots in this test")


def test_a_fabric_result_of_the_second_schema_loads_and_concludes_as_it_said():
    """tests/data/fabric-schema2.json is kept from a real run of commbench before a block's varying
    numbers were packed arrays (commit f205f61: `commbench fabric --nproc 4 --size 64K --iters 3 --repeat 2
    --quiet`): a fabric round's rows as one block whose varying columns are JSON lists, the matrices
    their measured entries."""
    from commbench.fabric.kind import fabric_report_page, load_analysis

    path = ROOT / "tests" / "data" / "fabric-schema2.json"
    payload = json.loads(path.read_text())
    blocks = [item for item in payload["rows"] if "block_of" in item]
    assert payload["schema"] == 2 and blocks and isinstance(blocks[0]["each"]["samples_us"], list)
    run = load_run(path)
    counted = sum(item.get("block_of", 1) for item in payload["rows"])
    assert len(commbench.load(path)) == len(run.rows) == counted == 50
    first = blocks[0]
    for index in (0, first["block_of"] - 1):
        wanted = {f.name: first["same"].get(f.name, f.default) for f in fields(Row)}
        wanted.update({name: values[index] for name, values in first["each"].items()})
        assert asdict(run.rows[index]) == wanted
    analysis = load_analysis(run)
    assert analysis.verdict_lines() == payload["fabric"]["verdict"]
    for name in ("bandwidth_gbps", "latency_us", "host_bandwidth_gbps", "host_latency_us"):
        found = getattr(analysis.matrices, name).to_dict()
        assert {key: values.tolist() for key, values in found.items()} == payload["fabric"][name], name
    assert payload["fabric"]["verdict"][-1] in fabric_report_page([run], "no plots in this test")
