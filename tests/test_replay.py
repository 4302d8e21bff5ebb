"""commbench replay on recordings made here, once per session, by real torch programs on gloo
(tests/replay_programs.py): DDP with small buckets, FSDP2, a 2x2 mesh with tensor- and data-parallel
groups (Flight Recorder), and a two-stage pipeline of sends and receives (torch.profiler).

The key check: each replay, recorded again with --record, issues per rank exactly the operations the job
issued (name, sizes, dtypes, group members and description; peers for sends and receives), read here
straight from the files, independently of commbench's loaders.
"""

import json
import os
import pickle
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from commbench.cli import main
from commbench.core.sizes import format_size
from commbench.replay.summary import check_line
from commbench.results.saved import load_run
from tests import replay_programs
from tests.dist_helpers import commbench
from tests.replay_helpers import PROGRAMS, Recording

# What the job recorded -> the commbench collective the replay's row names.
ROW_COLLECTIVES = {"gloo:all_reduce": "all_reduce", "gloo:all_gather": "all_gather_base",
                   "gloo:broadcast": "broadcast", "gloo:reduce": "reduce", "gloo:barrier": "barrier",
                   "gloo:all_to_all": "all_to_all_single", "gloo:gather": "gather", "gloo:scatter": "scatter"}


# --- reading the files as torch wrote them (no commbench code) -----------------------------------

def _flight_entries(directory: Path) -> dict[int, list[dict]]:
    found = {}
    for path in directory.iterdir():
        data = path.read_bytes()
        dump = pickle.loads(data) if data[:1] == b"\x80" else json.loads(data)  # our own test's files
        found[int(path.name.rsplit("_", 1)[1])] = dump["entries"]
    return found


def flight_sequences(directory: Path) -> dict[int, list[tuple]]:
    entries = _flight_entries(directory)
    members: dict[str, set[int]] = {}
    for rank, items in entries.items():
        for entry in items:
            members.setdefault(entry["process_group"][0], set()).add(rank)
    return {rank: [(entry["profiling_name"], entry["input_sizes"], entry["output_sizes"],
                    entry["input_dtypes"], entry["output_dtypes"], entry["process_group"][1],
                    sorted(members[entry["process_group"][0]])) for entry in items]
            for rank, items in entries.items()}


def profiler_sequences(directory: Path) -> dict[int, list[tuple]]:
    found = {}
    for path in directory.iterdir():
        trace = json.loads(path.read_text())
        events = sorted((event for event in trace["traceEvents"] if event.get("ph") == "X"),
                        key=lambda event: event["ts"])
        calls = [(event["name"], event["args"]["Input Dims"][0], event["args"]["Concrete Inputs"][2])
                 for event in events if event["name"].startswith("c10d::")]
        typed = [(event["name"], event["args"]["Input type"]) for event in events
                 if event["name"] in ("gloo:send", "gloo:recv")]
        found[trace["distributedInfo"]["rank"]] = calls + typed
    return found


def recorded_counts(found: Recording) -> Counter:
    """Operations per commbench collective: each group's operations once (as its lowest rank recorded
    them); each message once."""
    counts: Counter = Counter()
    if found.kind == "profiler":
        for calls in profiler_sequences(found.directory).values():
            counts["ping"] += sum(1 for call in calls if call[0] == "c10d::send")
        return counts
    counted: set[str] = set()
    for _, items in sorted(_flight_entries(found.directory).items()):
        groups = {entry["process_group"][0] for entry in items} - counted
        for entry in items:
            if entry["process_group"][0] in groups:
                counts[ROW_COLLECTIVES[entry["profiling_name"]]] += 1
        counted |= groups
    return counts


# --- the replays --------------------------------------------------------------------------------

@pytest.mark.processes
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_replay_issues_what_the_job_issued_on_every_rank(name, recordings):
    run = recordings.replay(name)
    assert run.result.returncode == 0, run.result.stderr
    read = flight_sequences if run.recording.kind == "flight" else profiler_sequences
    original, replay = read(run.recording.directory), read(run.record_dir)
    assert sorted(replay) == list(range(run.recording.world_size))
    assert all(original[rank] for rank in original)  # the job communicated on every rank
    for rank in original:
        assert replay[rank] == original[rank], f"rank {rank}"


@pytest.mark.processes
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_rows_account_for_every_recorded_operation(name, recordings):
    run = recordings.replay(name)
    assert run.result.returncode == 0, run.result.stderr
    rows = load_run(run.json_path).rows
    operations = [row for row in rows if row.collective != "pass"]
    replayed_counts = Counter()
    for row in operations:
        replayed_counts[row.collective] += row.ops
    assert replayed_counts == recorded_counts(run.recording)
    passes = {row.phase: row for row in rows if row.collective == "pass"}
    assert set(passes) == {"comm", "wall"}
    assert passes["comm"].ops == sum(replayed_counts.values()) and passes["comm"].samples == 2
    assert all(row.wrong == 0 and row.samples == 2 * row.ops for row in operations)  # --check, 2 passes
    assert all(row.group_ranks and row.group_name for row in operations)
    assert (run.json_path.parent / "rows.csv").read_text().count("\n") == len(rows) + 1


@pytest.mark.processes
def test_the_summary_gives_the_pass_time_the_top_operations_and_the_assumptions(recordings):
    run = recordings.replay("mesh_2x2")
    out = run.result.stdout
    assert "pass time: p50" in out and "top operations by share of communication time" in out
    shares = [float(line.split("%")[0].split()[-1]) for line in out.splitlines() if "µs/op" in line]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 100.5
    assert "inferred from which ranks' files hold" in out and "mesh_tp" in out and "mesh_dp" in out
    assert "every reduction replayed as sum" in out
    rows = load_run(run.json_path).rows
    groups = {row.group_name: row.group_ranks for row in rows if row.collective != "pass"}
    assert set(groups.values()) == {"0,1", "2,3", "0,2", "1,3"}
    operations = [row for row in rows if row.collective != "pass"]
    assert f"--check: {len(operations)} rows checked, every element right" in out
    spoiled = [replace(operations[0], wrong=3, first_wrong="rank 1 index 2: expected 4, got 5"),
               *operations[1:]]
    assert check_line(spoiled) == (
        f"--check: {len(operations)} rows checked, 3 wrong elements in 1 of them (first: "
        f"{operations[0].collective} {format_size(operations[0].size_bytes)} in {operations[0].group_name}: "
        "rank 1 index 2: expected 4, got 5)")


@pytest.mark.processes
def test_a_profiler_trace_gives_recorded_and_replayed_times_side_by_side(recordings):
    run = recordings.replay("pipeline")
    rows = [row for row in load_run(run.json_path).rows if row.collective == "ping"]
    assert {row.group_name for row in rows} == {"p2p 0->1", "p2p 1->0"}
    assert all(row.recorded_us is not None and row.time_us_p50 is not None for row in rows)
    assert all(row.dtype == "bfloat16" and row.size_bytes == 2 * 8 * 2 for row in rows)
    assert "assumed to run on the world group" in run.result.stdout


# --- a window of the recording, and another world size (no processes beyond the recordings) -----

@pytest.mark.processes
def test_select_last_n_keeps_the_last_repeating_steps(recordings):
    from commbench.replay.loading import load_trace
    from commbench.replay.validate import validate
    from commbench.replay.window import parse_selection, select

    fsdp = load_trace([str(recordings.recording("fsdp2").directory)])
    per_step = len(fsdp.ops[0]) // replay_programs.STEPS  # FSDP2's steps are alike from the first
    for steps in (1, 2):
        chosen = validate(select(fsdp, parse_selection(f"last:{steps}")))
        assert all(ops == fsdp.ops[rank][-steps * per_step:] for rank, ops in chosen.ops.items())
    ddp = load_trace([str(recordings.recording("ddp").directory)])
    chosen = validate(select(ddp, parse_selection("last:2")))  # DDP's first step differs (one bucket)
    assert [op.name for op in chosen.ops[1]] == ["all_reduce"] * 4
    assert chosen.ops[1] == ddp.ops[1][-4:]
    assert main(["replay", str(recordings.recording("ddp").directory), "--select", "last:3"]) == 2


@pytest.mark.processes
def test_select_seq_keeps_a_range_of_the_world_groups_sequence_ids(recordings):
    from commbench.replay.loading import load_trace
    from commbench.replay.validate import validate
    from commbench.replay.window import parse_selection, select

    ddp = load_trace([str(recordings.recording("ddp").directory)])
    chosen = validate(select(ddp, parse_selection("seq:4-6")))
    assert all([op.seq for op in ops] == [4, 5, 6] for ops in chosen.ops.values())
    mesh = load_trace([str(recordings.recording("mesh_2x2").directory)])
    assert mesh.format == "flight-recorder-json"
    assert main(["replay", str(recordings.recording("mesh_2x2").directory), "--select", "seq:1-2"]) == 2


@pytest.mark.processes
def test_another_world_size_keeps_each_ranks_bytes_and_maps_groups_by_the_rule(recordings):
    from commbench.replay.loading import load_trace
    from commbench.replay.mapping import map_trace
    from commbench.replay.validate import validate

    mesh = validate(load_trace([str(recordings.recording("mesh_2x2").directory)]))
    halved = map_trace(mesh, 2)  # recorded ranks 0 and 1: tp {0,1} stays, each dp group keeps one rank
    assert sorted(group.members for group in halved.groups) == [(0,), (0, 1), (1,)]
    assert [(op.collective, op.shape) for op in halved.ops[0]] == \
        [(op.collective, op.shape) for op in map_trace(mesh, 4).ops[0]]
    gathers = [op for op in halved.ops[0] if op.collective == "all_gather_base"]
    assert gathers and all(op.size_bytes == 2 * 4 * 8 * 2 for op in gathers)  # 2 ranks x [4, 8] bf16
    pipeline = validate(load_trace([str(recordings.recording("pipeline").directory)]))
    alone = map_trace(pipeline, 1)
    assert alone.ops[0] == [] and alone.unmapped == Counter({"send with a peer outside this world": 4,
                                                             "recv with a peer outside this world": 4})
    doubled = map_trace(pipeline, 4)  # two copies: 0<->1 and 2<->3
    assert {op.key[0] for ops in doubled.ops.values() for op in ops} == \
        {"p2p 0->1", "p2p 1->0", "p2p 2->3", "p2p 3->2"}


def test_a_step_is_the_repeating_block_that_covers_most_of_the_end():
    from commbench.replay.window import step_length

    assert step_length(list("xabbabb")) == (3, 2)  # not the 'bb' at the very end
    assert step_length(list("aaaa")) == (1, 4)
    assert step_length(list("xyabab")) == (2, 2)
    assert step_length(list("abcd")) == (0, 0)


def test_a_selection_is_all_seq_or_last():
    from commbench.errors import UsageError
    from commbench.replay.window import Selection, parse_selection

    assert parse_selection(" ALL ") == Selection("all")
    assert parse_selection("seq:3-9") == Selection("seq", 3, 9)
    assert parse_selection("last:2") == Selection("last", 2)
    for wrong in ("seq:9-3", "seq:3", "last:0", "first:2", ""):
        with pytest.raises(UsageError, match="--select"):
            parse_selection(wrong)


# --- bad input: one line, exit status 2 ---------------------------------------------------------

def _one_line_error(capsys: pytest.CaptureFixture, *args: str) -> str:
    status = main(["replay", *args])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("commbench: error: ")
    return err


class RunsCode:
    """A pickle that would run a shell command when loaded naively."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.processes
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "marker"
    traces = tmp_path / "traces"
    traces.mkdir()
    dump = {"entries": [RunsCode(marker)], "version": "2.10"}
    (traces / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump))
    result = commbench("replay", str(traces), timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "refused to load" in result.stderr and "os.system" in \
        result.stderr.replace("posix.system", "os.system")
    assert "Traceback" not in result.stderr and not marker.exists()


def test_the_safe_unpickler_loads_plain_data_only():
    from commbench.errors import UsageError
    from commbench.replay.loading import load_plain_pickle

    plain = {"entries": [{"a": [1, 2.5, None, True, ("x", b"y")]}], "version": "2.10"}
    assert load_plain_pickle(pickle.dumps(plain), Path("p")) == plain
    with pytest.raises(UsageError, match="asks for collections.OrderedDict"):
        load_plain_pickle(pickle.dumps(__import__("collections").OrderedDict(a=1)), Path("p"))


@pytest.mark.processes
def test_truncated_or_corrupt_files_are_one_line(recordings, tmp_path, capsys):
    ddp = recordings.recording("ddp").directory
    damages = (("half", lambda data: data[: len(data) // 2]), ("bytes", lambda data: b"\x00garbage"))
    for name, damage in damages:
        broken = tmp_path / name
        broken.mkdir()
        for path in ddp.iterdir():
            (broken / path.name).write_bytes(damage(path.read_bytes()) if path.name.endswith("1") else
                                             path.read_bytes())
        error = _one_line_error(capsys, str(broken))
        assert "nccl_trace_rank_1" in error
        assert ("truncated or corrupt" in error) if name == "half" else ("not a Flight Recorder" in error)
    profiler = recordings.recording("pipeline").directory
    cut = tmp_path / "cut"
    cut.mkdir()
    for path in profiler.iterdir():
        (cut / path.name).write_text(path.read_text()[:200])
    assert "not valid JSON" in _one_line_error(capsys, str(cut))


@pytest.mark.processes
def test_a_missing_rank_is_named(recordings, tmp_path, capsys):
    mesh = recordings.recording("mesh_2x2").directory
    gap = tmp_path / "gap"
    gap.mkdir()
    for path in mesh.iterdir():
        if not path.name.endswith("_2"):
            (gap / path.name).write_bytes(path.read_bytes())
    assert "no file for rank 2 of a 4-rank job" in _one_line_error(capsys, str(gap))
    # The last rank missing: the names cannot tell, the sizes can (DDP's first all-gather has 2 ranks).
    error = _one_line_error(capsys, str(recordings.recording("ddp").directory / "nccl_trace_rank_0"))
    assert "implies 2 ranks" in error and "missing" in error


@pytest.mark.processes
def test_two_jobs_mixed_are_refused(recordings, tmp_path, capsys):
    ddp, fsdp = recordings.recording("ddp").directory, recordings.recording("fsdp2").directory
    both = tmp_path / "both"
    both.mkdir()
    for source, prefix in ((ddp, "a_"), (fsdp, "b_")):
        for path in source.iterdir():
            (both / f"{prefix}{path.name}").write_bytes(path.read_bytes())
    assert "two files for rank 0" in _one_line_error(capsys, str(both))
    crossed = [str(ddp / "nccl_trace_rank_0"), str(fsdp / "nccl_trace_rank_1")]
    error = _one_line_error(capsys, *crossed)
    assert "group 0:default_pg, operation 1" in error and "the members differ" in error
    assert "two different jobs" in error


@pytest.mark.processes
def test_a_recording_without_communication_is_refused(recordings, tmp_path, capsys):
    recordings.recording("pipeline")  # gloo's Flight Recorder saw the pipeline's sends as nothing
    flight = recordings.root / "pipeline" / "flight"
    assert "no communication recorded" in _one_line_error(capsys, str(flight))


def test_empty_and_missing_inputs_and_bad_options_are_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert "holds no trace files" in _one_line_error(capsys, str(tmp_path / "empty"))
    assert "no such file or directory" in _one_line_error(capsys, str(tmp_path / "absent"))
    assert "no file matches" in _one_line_error(capsys, str(tmp_path / "absent*"))
    (tmp_path / "notes.txt").write_text("hello")
    assert "not a Flight Recorder dump" in _one_line_error(capsys, str(tmp_path / "notes.txt"))
    (tmp_path / "other.json").write_text('{"a": 1}')
    assert "neither a Flight Recorder dump" in _one_line_error(capsys, str(tmp_path / "other.json"))
    assert "--select 'last:0'" in _one_line_error(capsys, str(tmp_path / "other.json"), "--select", "last:0")
    assert "--iters 0 must be at least 1" in _one_line_error(capsys, str(tmp_path / "empty"), "--iters", "0")
