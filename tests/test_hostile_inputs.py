"""Files from elsewhere given to every command that reads one: a FIFO, a device, a file over its cap,
nesting too deep, YAML that would build objects, numbers that are not finite or out of range. Each is
one line and exit status 2 from the real command line, never a hang, a memory blow-up or a traceback.

The commands run in this process (main(argv) in a thread, bounded by a join timeout), so a reader that
blocks shows as a test failing in seconds rather than a hung suite."""

import gzip
import json
import os
import pickle
import shutil
import threading
from dataclasses import asdict
from pathlib import Path

import pytest

import commbench
from commbench.cli.main import main
from commbench.errors import UsageError
from commbench.recordings import files as recording_files
from commbench.results.model import Row, RunMeta
from commbench.writers.files import ResultWriter

FINISH_WITHIN_S = 20.0


def run_cli(capsys: pytest.CaptureFixture, *argv: str | Path) -> tuple[int, str]:
    """``commbench ARGV`` in this process: its exit status and its stderr; fails if it does not end."""
    outcome: list[int] = []
    worker = threading.Thread(target=lambda: outcome.append(main([str(arg) for arg in argv])), daemon=True)
    worker.start()
    worker.join(FINISH_WITHIN_S)
    assert outcome, f"commbench {' '.join(map(str, argv))} did not end within {FINISH_WITHIN_S} s"
    return outcome[0], capsys.readouterr().err


def one_line_usage_error(capsys: pytest.CaptureFixture, *argv: str | Path) -> str:
    code, stderr = run_cli(capsys, *argv)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("commbench: error: "), stderr
    return lines[0]


def saved_run(path: Path, **changes) -> Path:
    """A results.json written by commbench's own writer, one row changed by ``changes``."""
    meta = RunMeta(run_id="r1", started_at="2026-01-01T00:00:00+00:00", command=["commbench"],
                   commbench_version="0", torch_version="0", python_version="3", backend="gloo", device="cpu",
                   world_size=2, launcher="local", hostnames=["a", "a"], versions={}, env={}, config={})
    row = Row(collective="all_reduce", backend="gloo", device="cpu", world_size=2, dtype="float32",
              mode="sync", op="sum", size_bytes=1024, requested_bytes=1024, count_per_rank=256, iters=2,
              warmup=0, time_us_p50=10.0, time_us_p95=12.0, time_us_min=9.0, time_us_max=13.0,
              time_us_mean=10.5, algbw_gbps=0.1, busbw_gbps=0.1, busbw_factor=1.0)
    writer = ResultWriter(meta, path.with_suffix(".csv"), path)
    writer.add(row)
    writer.finish("complete", "2026-01-01T00:01:00+00:00")
    if changes:
        payload = json.loads(path.read_text())
        payload["rows"][0].update(changes)
        path.write_text(json.dumps(payload))
    return path


# Every command that reads a file a user names, with FILE where the file goes.
READERS = {
    "compare": ["compare", "FILE", "OTHER"],
    "report": ["report", "FILE", "-o", "OUT/report.html"],
    "explain": ["explain", "FILE"],
    "sweep": ["sweep", "FILE"],
    "run --config": ["--config", "FILE"],
    "pattern --model": ["pattern", "fsdp", "--model", "FILE"],
    "run --expect": ["--expect", "FILE"],
    "run --splits": ["--collective", "all_to_allv", "--splits", "FILE"],
    "replay": ["replay", "FILE"],
}
SUFFIXES = {"pattern --model": ".yaml", "run --expect": ".yaml", "run --splits": ".csv", "sweep": ".yaml",
            "run --config": ".yaml"}


def arguments(name: str, path: Path, tmp_path: Path) -> list[str]:
    other = saved_run(tmp_path / "other.json")
    return [str(path) if part == "FILE" else str(other) if part == "OTHER" else
            part.replace("OUT", str(tmp_path)) for part in READERS[name]]


@pytest.mark.parametrize("name", READERS)
def test_a_fifo_given_as_any_input_is_named_at_once(name, tmp_path, capsys):
    fifo = tmp_path / f"input{SUFFIXES.get(name, '.json')}"
    os.mkfifo(fifo)
    line = one_line_usage_error(capsys, *arguments(name, fifo, tmp_path))
    assert f"{fifo} is a FIFO (named pipe), not a regular file" in line


@pytest.mark.parametrize("name", ["compare", "sweep", "run --splits", "replay"])
def test_a_character_device_given_as_an_input_is_named_not_read(name, tmp_path, capsys):
    line = one_line_usage_error(capsys, *arguments(name, Path("/dev/urandom"), tmp_path))
    assert "/dev/urandom is a character device, not a regular file" in line


def test_diagnose_does_not_wait_on_a_fifo_or_recurse_into_deep_json_beside_the_dumps(tmp_path):
    from commbench.diagnose.command import hosts_beside

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    os.mkfifo(tmp_path / "results.json")
    found: list[dict] = []
    worker = threading.Thread(target=lambda: found.append(hosts_beside([str(dumps)])), daemon=True)
    worker.start()
    worker.join(FINISH_WITHIN_S)
    assert found == [{}]  # no hosts, and no wait for a writer that never comes
    (tmp_path / "results.json").unlink()
    (tmp_path / "results.json").write_text("[" * 100_000 + "]" * 100_000)
    assert hosts_beside([str(dumps)]) == {}
    (tmp_path / "results.json").write_text(json.dumps({"meta": {"hostnames": ["a", "b"]}}))
    assert hosts_beside([str(dumps)]) == {0: "a", 1: "b"}

def test_a_run_directory_whose_results_json_is_a_fifo_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "results.json")
    line = one_line_usage_error(capsys, "compare", run, saved_run(tmp_path / "b.json"))
    assert "results.json is a FIFO" in line


def test_load_names_a_fifo_instead_of_waiting(tmp_path):
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    errors: list[str] = []

    def load() -> None:
        try:
            commbench.load(fifo)
        except UsageError as exc:
            errors.append(str(exc))

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(FINISH_WITHIN_S)
    assert errors == [f"{fifo} is a FIFO (named pipe), not a regular file: a results file is read only from "
                      "a regular file"]


@pytest.mark.parametrize(("changes", "expected"), [
    ({"time_us_p50": float("inf")}, "row 0: time_us_p50 is inf, not a finite number"),
    ({"busbw_gbps": float("nan")}, "row 0: busbw_gbps is nan, not a finite number"),
    ({"size_bytes": 10 ** 30}, "row 0: size_bytes is 1000000000000000000000000000000, out of range"),
    ({"size_bytes": -4}, "row 0: size_bytes is -4, out of range (0 to 2^63 - 1)"),
    ({"samples_us": [1.0, float("inf")]}, "row 0: samples_us is inf, not a finite number"),
    ({"iters": "2"}, "row 0: iters is '2', not a whole number"),
    ({"world_size": [2]}, "row 0: world_size is [2], not a whole number"),
], ids=["infinite-time", "nan-busbw", "size-10^30", "negative-size", "infinite-sample", "text-count",
        "list-count"])
def test_a_saved_value_that_is_not_finite_or_in_range_is_named_with_file_field_and_value(
        changes, expected, tmp_path, capsys):
    bad = saved_run(tmp_path / "bad.json", **changes)
    good = saved_run(tmp_path / "good.json")
    for argv in (["compare", bad, good], ["report", bad, "-o", tmp_path / "r.html"], ["explain", bad]):
        line = one_line_usage_error(capsys, *argv)
        assert line == f"commbench: error: {bad}: not a commbench results.json ({expected})" or (
            expected in line and str(bad) in line), line


@pytest.mark.parametrize(("meta", "expected"), [
    ({"hostnames": [1, "a"]}, "meta hostnames is [1, 'a'], not list[str]"),
    ({"versions": {"nccl": [2, 21]}}, "meta versions is {'nccl': [2, 21]}, not dict[str, str | None]"),
    ({"world_size": 2.5}, "meta world_size is 2.5, not int"),
    ({"hardware": {"a": "b"}}, "meta hardware is {'a': 'b'}, not dict[str, dict[str, typing.Any]]"),
    ({"config": []}, "meta config is [], not dict[str, typing.Any]"),
])
def test_wrong_typed_metadata_is_one_line_naming_the_field(meta, expected, tmp_path, capsys):
    path = saved_run(tmp_path / "run.json")
    payload = json.loads(path.read_text())
    payload["meta"].update(meta)
    path.write_text(json.dumps(payload))
    line = one_line_usage_error(capsys, "report", path, "-o", tmp_path / "r.html")
    assert expected.replace("typing.", "") in line


def test_json_nested_thousands_deep_is_refused_without_recursion(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    line = one_line_usage_error(capsys, "compare", deep, saved_run(tmp_path / "b.json"))
    assert "containers nested more than 64 deep" in line


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("sweep", "benchmarks:\n  - iters: !!int abc\n", ":2: not valid YAML: cannot read 'abc' as !!int"),
    ("sweep", "benchmarks:\n  - name: 2024-13-45\n    collectives: [nope]\n", "unknown collective 'nope'"),
    ("sweep", "benchmarks:\n  - name: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than 64 deep"),
    ("sweep", "a: &a [x]\nbenchmarks:\n  - name: *a\n", ":3: not valid YAML: an alias (*a)"),
    ("sweep", "benchmarks:\n  - iters: 1" + "0" * 5000 + "\n", ":2: not valid YAML: cannot read"),
    ("pattern --model", "units: !!python/object/apply:os.system [ls]\n", "the tag !!python/object/apply"),
    ("pattern --model", "units:\n  - name: a\n    params: {w: [1" + "0" * 30 + "]}\n", "(each below 2^63)"),
    ("run --expect", "expect: [{busbw_gbps: .nan}]\n", "busbw_gbps: expected a finite number above 0, got"),
    ("run --expect", "expect: [{busbw_gbps: 1, collective: 5}]\n", "collective: expected a name or a list"),
    ("run --splits", "0,1\n1,99999999999999999999999\n", "is above the largest size commbench measures"),
    ("run --splits", "0,4K\n" + "9" * 400 + ",0\n", "is above the largest size commbench measures"),
], ids=["tag-on-plain-value", "date-stays-text", "deep", "alias", "huge-integer", "python-tag", "huge-shape",
        "nan-baseline", "typed-collective", "huge-split", "400-digit-split"])
def test_yaml_and_csv_inputs_give_one_line_naming_the_problem(name, content, expected, tmp_path, capsys):
    path = tmp_path / f"input{SUFFIXES[name]}"
    path.write_text(content)
    line = one_line_usage_error(capsys, *arguments(name, path, tmp_path))
    assert expected in line and str(path) in line


def test_a_gzip_bomb_stops_at_the_cap_on_what_it_inflates_to(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(recording_files, "RECORDING_BYTES", 4 << 20)  # 1 GiB really: same rule, smaller
    bomb = tmp_path / "trace_rank_0.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (1 << 20)) * 8)
    line = one_line_usage_error(capsys, "replay", bomb)
    assert line == (f"commbench: error: {bomb}: inflates to more than the 4 MiB a recording may hold "
                    "(docs/limits.md)")


@pytest.mark.parametrize("command", ["replay", "diagnose"])  # diagnose reads a few dumps in-process
def test_a_pickle_whose_tuples_would_crash_python_is_refused_before_unpickling(command, tmp_path, capsys):
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(b"\x80\x02}" + b"N" + b"\x85" * 200_000 + b"K\x01s.")  # {((((None,),),...): 1}
    line = one_line_usage_error(capsys, command, dump)
    assert "refused to load: tuples nested more than 64 deep" in line


@pytest.mark.processes
def test_recorded_numbers_in_odd_digits_or_out_of_range_are_one_line(recordings, tmp_path, capsys):
    dumps = recordings.recording("ddp").directory
    odd = tmp_path / "odd"
    shutil.copytree(dumps, odd)
    dump = odd / "nccl_trace_rank_0"
    payload = pickle.loads(dump.read_bytes())
    payload["entries"][0]["collective_seq_id"] = "²"  # str.isdigit says yes, int() says no
    dump.write_bytes(pickle.dumps(payload, protocol=2))
    line = one_line_usage_error(capsys, "replay", odd)
    assert "entry 0: collective_seq_id is '²', not a whole number" in line
    traces = recordings.recording("pipeline").directory
    huge = tmp_path / "huge"
    shutil.copytree(traces, huge)
    trace = sorted(huge.iterdir())[0]
    payload = json.loads(trace.read_text())
    payload["distributedInfo"]["world_size"] = 10 ** 18
    trace.write_text(json.dumps(payload))
    line = one_line_usage_error(capsys, "replay", huge)
    assert "world_size is 1000000000000000000, not a whole number from 1 to 1,048,576" in line


def test_old_rows_written_by_commbench_still_load(tmp_path):
    """NaN was always written as null: the checks above refuse only what commbench never wrote."""
    path = saved_run(tmp_path / "run.json")
    frame = commbench.load(path)
    assert frame["time_us_p50"].tolist() == [10.0]
    assert asdict(commbench.results.saved.load_run(path.with_suffix(".csv")).rows[0])["busbw_gbps"] == 0.1


@pytest.mark.parametrize("name", [*READERS, "--output-dir", "--json", "report -o"])
def test_a_path_too_long_to_look_at_is_one_line(name, tmp_path, capsys):
    long = tmp_path / ("a" * 300 + SUFFIXES.get(name, ".json"))  # past the file system's 255 a name
    argv = {"--output-dir": ["--output-dir", str(long / "runs")], "--json": ["--json", str(long)],
            "report -o": ["report", str(saved_run(tmp_path / "run.json")), "-o", str(long)]}.get(name)
    line = one_line_usage_error(capsys, *(argv or arguments(name, long, tmp_path)))
    assert "a" * 100 in line


@pytest.mark.parametrize(("argv", "expected"), [
    (["replay", "TRACE", "--select", "seq:²-3"], "--select 'seq:²-3': give all, seq:A-B"),
    (["replay", "TRACE", "--select", "last:" + "9" * 5000], "--select"),
    (["pattern", "fsdp", "--compute-size", "²"], "--compute-size '²': give a matrix size"),
], ids=["odd-digit-select", "5000-digit-select", "odd-digit-compute-size"])
def test_digits_that_python_calls_digits_but_cannot_read_are_one_line(argv, expected, tmp_path, capsys):
    trace = tmp_path / "trace_rank_0.json"  # --select is parsed before the recording is read
    line = one_line_usage_error(capsys, *[str(trace) if part == "TRACE" else part for part in argv])
    assert expected in line


def test_a_saved_library_version_in_odd_digits_is_explained(tmp_path, capsys):
    run = saved_run(tmp_path / "run.json")
    payload = json.loads(run.read_text())
    payload["meta"]["versions"] = {"nccl": "2.²1.3"}
    run.write_text(json.dumps(payload))
    code, stderr = run_cli(capsys, "explain", run)
    assert code == 0 and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("world_size", [-1, -7])
def test_a_saved_world_size_below_one_is_explained_as_no_ranks_not_a_crash(world_size):
    # found by test_properties' damaged results files: explain bounded an empty list of ranks
    from commbench.provenance.explain.engine import explain_run
    from commbench.provenance.explain.text import console_line
    from tests.explain_helpers import cpu_host, row, run_meta

    meta = run_meta({"h": cpu_host()}, {"h": 2}, backend="gloo")
    meta["world_size"] = world_size
    [series] = explain_run(meta, [row("all_reduce", 2, 1 << 20, 1.0, backend="gloo")])
    assert console_line(series).endswith("no bound: the run recorded no ranks")
