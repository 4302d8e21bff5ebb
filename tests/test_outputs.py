"""What commbench writes: a special file is written through or refused, never replaced; no output is
one of the command's own inputs; a file keeps its mode and a new one honours the umask; a non-UTF-8
output path works."""

import json
import os
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from commbench.cli.main import main
from commbench.config.launch import LaunchConfig
from commbench.errors import UsageError
from commbench.replay.config import check_record_prefix
from commbench.running.launch import check_output_location
from commbench.writers import files
from commbench.writers.files import ResultWriter, open_output, write_atomic, write_text_atomic
from commbench.writers.paths import check_file, files_named, held_files
from tests.test_hostile_inputs import one_line_usage_error, saved_run

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def null_device(path: Path) -> Path:
    """A character device like /dev/null, of the test's own: the system's is never risked."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


@ROOT_ONLY
def test_the_atomic_writer_writes_through_a_character_device_instead_of_replacing_it(tmp_path):
    null = null_device(tmp_path / "null")
    write_text_atomic(null, "{}")
    assert stat.S_ISCHR(os.stat(null).st_mode) and os.stat(null).st_rdev == os.makedev(1, 3)
    assert list(tmp_path.iterdir()) == [null]  # no temporary file left beside it


@ROOT_ONLY
def test_a_run_writes_its_json_and_csv_through_a_character_device(tmp_path):
    null = null_device(tmp_path / "null")
    saved_run(tmp_path / "run.json")  # the CSV beside it is where the rows are checked
    from tests.test_hostile_inputs import Row, RunMeta  # noqa: F401 - the same row and meta
    meta = RunMeta(run_id="r", started_at="t", command=[], commbench_version="0", torch_version="0",
                   python_version="3", backend="gloo", device="cpu", world_size=2, launcher="local",
                   hostnames=[], versions={}, env={}, config={})
    writer = ResultWriter(meta, null, null)  # CSV synced per row: a device refuses fsync (EINVAL)
    writer.add(saved_rows(tmp_path / "run.json")[0])
    writer.finish("complete", "t")
    assert stat.S_ISCHR(os.stat(null).st_mode)


def saved_rows(path: Path):
    from commbench.results.saved import load_run

    return load_run(path).rows


def test_a_new_file_honours_the_umask_and_an_existing_one_keeps_its_mode(tmp_path, umask_027):
    fresh = tmp_path / "results.json"
    write_text_atomic(fresh, "{}")
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o640  # 0666 less the umask, not mkstemp's 0600
    os.chmod(fresh, 0o604)
    write_text_atomic(fresh, "[]")
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o604 and fresh.read_text() == "[]\n"


def test_a_symlink_to_a_file_stays_a_link_and_its_target_is_written(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, b"new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_fifo_is_written_through_when_read_and_named_when_nobody_reads_it(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="no process reads this FIFO"):
        open_output(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    for _ in range(200):  # until the reader has the FIFO open
        try:
            write_atomic(fifo, b"page")
            break
        except UsageError:
            threading.Event().wait(0.02)
    reader.join(10)
    assert received == [b"page"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_outputs_refuse_what_cannot_take_them_in_one_line(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="is a FIFO .*: results.json is rewritten whole as it grows"):
        check_file("--json", fifo, "results.json", rewritten=True)
    check_file("--csv", fifo)  # a CSV is streamed: a FIFO takes it
    import socket

    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "sock"))
    try:
        with pytest.raises(UsageError, match="is a socket"):
            check_file("--csv", tmp_path / "sock")
    finally:
        listening.close()


@ROOT_ONLY
def test_a_special_file_is_not_locked_with_a_file_beside_it(tmp_path):
    null = null_device(tmp_path / "null")
    with held_files([("--json", null)]):
        assert list(tmp_path.iterdir()) == [null]


def test_report_and_plot_refuse_to_write_over_their_own_input(tmp_path, capsys):
    run = saved_run(tmp_path / "results.json")
    before = run.read_bytes()
    for argv in (["report", run, "-o", run], ["report", tmp_path, "-o", tmp_path / "." / "results.json"],
                 ["report", run.with_suffix(".csv"), "-o", run]):
        line = one_line_usage_error(capsys, *argv)
        assert "is also an input of this command" in line and "writing it would destroy it" in line
    assert run.read_bytes() == before


def test_a_run_refuses_results_files_that_are_its_inputs_or_each_other(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("benchmarks: [{collectives: all_reduce}]\n")
    splits = tmp_path / "splits.csv"
    splits.write_text("0,4\n4,0\n")
    cases = [("--json", str(sweep), ["sweep", str(sweep), "--json", str(sweep)]),
             ("--csv", str(tmp_path / "." / "splits.csv"), ["--splits", str(splits), "--csv",
                                                            str(tmp_path / "." / "splits.csv")]),
             ("--csv", str(sweep), [f"--expect={sweep}", "--csv", str(sweep)])]
    for flag, output, argv in cases:
        setup = LaunchConfig(argv=argv, **{"json_path" if flag == "--json" else "csv_path": output})
        with pytest.raises(UsageError, match=f"^{flag} .* is also an input of this command"):
            check_output_location(setup)
    both = LaunchConfig(argv=[], json_path=str(tmp_path / "r"), csv_path=str(tmp_path / "." / "r"))
    with pytest.raises(UsageError, match="--csv and --json both name"):
        check_output_location(both)
    assert sweep.read_text() == "benchmarks: [{collectives: all_reduce}]\n"


def test_files_named_reads_options_globs_and_directories_but_not_the_outputs(tmp_path):
    (tmp_path / "a.yaml").write_text("")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "rank_0").write_text("")
    (tmp_path / "out.json").write_text("")
    found = files_named([f"--expect={tmp_path / 'a.yaml'}", str(tmp_path / "d*"), "--json",
                         str(tmp_path / "out.json"), "--iters", "5"], skip=["--json"])
    assert found == [tmp_path / "a.yaml", tmp_path / "dir" / "rank_0"]


def test_replay_refuses_a_record_prefix_that_names_its_own_recording(tmp_path):
    traces = [tmp_path / "nccl_trace_rank_0", tmp_path / "nccl_trace_rank_1"]
    for path in traces:
        path.write_bytes(b"dump")
    with pytest.raises(UsageError, match="--record .*nccl_trace_rank_0 is also an input of this command"):
        check_record_prefix(str(tmp_path / "nccl_trace_rank_"), 2, traces)
    check_record_prefix(str(tmp_path / "replayed_rank_"), 2, traces)


def test_an_output_path_that_is_not_utf8_is_written_and_printed(tmp_path, capsys):
    run = saved_run(tmp_path / "run.json")
    target = tmp_path / os.fsdecode(b"page-\xff.html")
    outcome: list[int] = []
    worker = threading.Thread(target=lambda: outcome.append(main(["report", str(run), "-o", str(target)])))
    worker.start()
    worker.join(60)
    assert outcome == [0]
    assert target.read_bytes().startswith(b"<!DOCTYPE html>") or target.stat().st_size > 1000
    assert "page-\\xff.html" in capsys.readouterr().out


def _writer_with_parts(path: Path) -> ResultWriter:
    """A writer with a row, fits and two sections, one of them past LAID_OUT_UP_TO when laid out."""
    from tests.test_hostile_inputs import RunMeta

    saved_run(path.parent / "source.json")
    meta = RunMeta(run_id="r", started_at="t", command=[], commbench_version="0", torch_version="0",
                   python_version="3", backend="gloo", device="cpu", world_size=2, launcher="local",
                   hostnames=[], versions={}, env={}, config={})
    writer = ResultWriter(meta, path.with_suffix(".csv"), path)
    writer.add(saved_rows(path.parent / "source.json")[0])
    writer.add_fits([{"alpha_us": 1.5, "beta": [1, 2.5, None]}])
    writer.set_section("explain", {"series": [{"a": 1, "b": {"c": [1, 2]}}], "model": 2})
    writer.set_section("big", {"matrix": np.arange(1000)})  # laid out, about 5 KB
    writer.add_fits([{"alpha_us": 2.0}])
    return writer


def test_parts_laid_out_once_are_written_as_laying_them_out_each_time_writes_them(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "LAID_OUT_UP_TO", 2000)  # the short parts, not "big"
    cached = _writer_with_parts(tmp_path / "cached" / "run.json")
    cached.finish("complete", "t2")
    monkeypatch.setattr(files, "LAID_OUT_UP_TO", -1)  # nothing is laid out ahead
    fresh = _writer_with_parts(tmp_path / "fresh" / "run.json")
    fresh.finish("complete", "t2")
    text = cached.json_path.read_text()
    assert text == fresh.json_path.read_text()
    saved = json.loads(text)
    assert [fit["alpha_us"] for fit in saved["fits"]] == [1.5, 2.0]
    assert saved["explain"]["series"][0]["b"] == {"c": [1, 2]}
    assert saved["big"]["matrix"] == list(range(1000))
    # a part longer than LAID_OUT_UP_TO is never held as one text; the short ones are
    assert isinstance(cached._laid_out["explain"], files.LaidOut)
    assert isinstance(cached._laid_out["fits"], files.LaidOut)
    assert not isinstance(cached._laid_out["big"], str)
    assert not any(isinstance(value, str) for value in fresh._laid_out.values())


def test_one_rewrite_writes_its_fits_and_sections_once_at_its_end_and_not_when_it_raised(tmp_path):
    writer = _writer_with_parts(tmp_path / "run.json")
    before = os.stat(writer.json_path).st_ino  # every rewrite renames a new file into place
    with writer.one_rewrite():
        writer.add_fits([{"alpha_us": 3.0}])
        writer.set_section("explain", {"model": 3})
        assert os.stat(writer.json_path).st_ino == before
    after = os.stat(writer.json_path).st_ino
    saved = json.loads(writer.json_path.read_text())
    assert after != before and saved["explain"] == {"model": 3} and saved["fits"][-1] == {"alpha_us": 3.0}
    with pytest.raises(RuntimeError), writer.one_rewrite():
        writer.set_section("explain", {"model": 4})
        raise RuntimeError("a fault while explaining")
    assert os.stat(writer.json_path).st_ino == after
    with writer.one_rewrite():
        pass
    assert os.stat(writer.json_path).st_ino == after  # nothing set: no rewrite
    writer.set_section("explain", {"model": 5})  # outside, each is written at once again
    assert json.loads(writer.json_path.read_text())["explain"] == {"model": 5}
