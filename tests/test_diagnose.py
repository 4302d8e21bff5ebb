"""commbench diagnose on the dumps of real gloo jobs that go wrong (tests/diagnose_programs.py), run
here, once per module: each verdict names the culprit ranks, the group, the collective and the class.

gloo aborts the process of some ranks on a size or dtype mismatch: those leave no dump, and the verdict
names the culprit from the others'. The reader's property tests mutate these real dumps.
"""

import json
import multiprocessing
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench.cli import main
from commbench.diagnose import verdict as classes
from commbench.diagnose.command import diagnose_files
from commbench.diagnose.loading import load_job
from commbench.diagnose.reading import REQUIRED_FIELDS
from commbench.diagnose.verdict import Finding, Verdict
from commbench.errors import UsageError
from tests import diagnose_programs as programs
from tests.dist_helpers import launcherless_env
from tests.netns import unavailable_reason
from tests.process_helpers import rank_processes, start_commbench, wait_for_rows

pytestmark = pytest.mark.processes


@dataclass
class Ran:
    directory: Path
    exit_codes: dict[int, int]
    verdict: Verdict

    def finding(self, group_desc: str) -> Finding | None:
        report = next(report for report in self.verdict.groups if report.desc == group_desc)
        return report.finding


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every job of diagnose_programs.JOBS, run once, with its verdict."""
    root = tmp_path_factory.mktemp("jobs")
    ran = {}
    for name, (job, ranks, form) in programs.JOBS.items():
        codes = programs.run_job(job, ranks, root / name, form=form)
        ran[name] = Ran(root / name, codes, diagnose_files([str(root / name)]))
    return ran


def test_the_healthy_job_names_nobody(jobs, capsys):
    healthy = jobs["healthy"]
    assert healthy.verdict.findings == [] and healthy.verdict.missing == ()
    assert {report.desc for report in healthy.verdict.groups} == {"default_pg", "pair"}
    assert main(["diagnose", str(healthy.directory)]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("verdict: nothing found")


def test_a_rank_that_issues_another_collective_is_named_with_both_sides(jobs):
    finding = jobs["desyncs"].finding("differs")
    assert (finding.kind, finding.detail, finding.culprits, finding.seq) == (
        classes.MISMATCH, classes.DIFFERENT_COLLECTIVE, (2,), 2)
    assert [(ranks, side.op) for ranks, side in finding.sides] == [((0, 1), "all_reduce"),
                                                                   ((2,), "all_gather")]
    assert all(side.stack.startswith("diagnose_programs.py:") for _, side in finding.sides)


def test_a_rank_stuck_outside_communication_is_behind(jobs):
    finding = jobs["desyncs"].finding("stuck")
    assert (finding.kind, finding.culprits, finding.seq) == (classes.BEHIND, (5,), 2)
    assert "busy outside communication" in finding.reading and "ranks 3-4 entered" in finding.reading


def test_a_rank_that_skips_a_collective_is_named_by_its_call_site(jobs):
    finding = jobs["desyncs"].finding("skips")
    assert (finding.kind, finding.detail, finding.culprits, finding.seq) == (
        classes.MISMATCH, classes.SKIPPED, (7,), 2)
    (mine, theirs) = (side for _, side in finding.sides)
    assert mine.stack != theirs.stack  # the same collective at #2, issued from two lines


def test_a_desync_inside_subgroups_leaves_the_world_group_healthy(jobs):
    verdict = jobs["desyncs"].verdict
    assert jobs["desyncs"].finding("default_pg") is None
    assert verdict.missing == () and verdict.world_size == 8
    assert [finding.group.split(":")[1] for finding in verdict.findings] == ["differs", "skips", "stuck"]


def test_wrong_size_and_dtype_name_the_culprit_though_gloo_aborted_a_member(jobs):
    mismatches = jobs["mismatches"]
    aborted = sorted(rank for rank, code in mismatches.exit_codes.items() if code != 0)
    assert aborted == [1, 4], mismatches.exit_codes  # gloo's enforce killed them: no dump
    assert mismatches.verdict.missing == (1, 4)
    size, dtype = mismatches.finding("size"), mismatches.finding("dtype")
    assert (size.kind, size.detail, size.culprits, size.seq) == (
        classes.MISMATCH, classes.DIFFERENT_SIZE, (2,), 2)
    assert (dtype.kind, dtype.detail, dtype.culprits) == (classes.MISMATCH, classes.DIFFERENT_DTYPE, (5,))
    assert "[16]" in size.reading and "Double" in dtype.reading
    world = mismatches.finding("default_pg")
    assert (world.kind, world.culprits) == (classes.MISSING, (1, 4))


def test_coalesced_operations_in_another_order_are_a_size_mismatch(jobs):
    finding = jobs["stalls"].finding("coalesced")
    assert (finding.kind, finding.detail, finding.culprits, finding.seq) == (
        classes.MISMATCH, classes.DIFFERENT_SIZE, (6,), 1)
    assert [side.sizes for _, side in finding.sides] == ["5, 6", "6, 5"]


def test_a_rank_that_dies_is_named_from_the_others_dumps(jobs):
    stalls = jobs["stalls"]
    assert stalls.exit_codes[7] == 1 and not (stalls.directory / f"{programs.DUMP_PREFIX}7").exists()
    assert stalls.verdict.world_size == 8  # the highest rank died: its world all_gather's output says 8
    assert stalls.verdict.missing == (7,)
    dies = stalls.finding("dies")
    assert (dies.kind, dies.culprits, dies.seq) == (classes.MISSING, (7,), 3)
    assert stalls.finding("default_pg").culprits == (7,)


def test_a_point_to_point_deadlock_shows_its_ranks_behind_and_says_gloo_does_not_record_it(jobs):
    finding = jobs["stalls"].finding("pipe")
    assert (finding.kind, finding.culprits, finding.seq) == (classes.BEHIND, (1, 2), 2)
    assert "send or recv (gloo records none)" in finding.reading


def test_one_rank_issuing_a_collective_more_is_extra_and_a_tie_of_two_names_both(jobs):
    extra, tie = jobs["splits"].finding("extra"), jobs["splits"].finding("tie")
    assert (extra.kind, extra.detail, extra.culprits, extra.seq) == (classes.MISMATCH, classes.EXTRA, (0,), 2)
    assert (tie.kind, tie.culprits, tie.seq) == (classes.MISMATCH, (3, 4), 2) and "no majority" in tie.reading


def test_orders_across_groups_a_dtype_shift_a_lone_member_and_a_death_are_each_named(jobs):
    verdict = jobs["orders"].verdict
    assert jobs["orders"].exit_codes[10] == 1 and verdict.missing == (10,)
    assert [(item.kind, item.group, item.culprits, item.detail) for item in verdict.findings] == [
        (classes.MISMATCH, "2:first", (0, 1), classes.ORDER),
        (classes.MISMATCH, "4:skips", (4,), classes.SKIPPED),
        (classes.MISMATCH, "5:extra", (7,), classes.EXTRA),
        (classes.BEHIND, "6:idle", (), ""),
        (classes.MISSING, "0", (10,), ""),
        (classes.BEHIND, "1:tail", (7,), "")]
    assert verdict.findings[-1].elsewhere == "5:extra"


def test_a_skip_an_extra_first_collective_a_tie_and_a_three_rank_crossing_are_each_named(jobs):
    verdict = jobs["variants"].verdict
    assert jobs["variants"].exit_codes == dict.fromkeys(range(11), 0) and verdict.missing == ()
    assert [(item.kind, item.group, item.culprits, item.detail, item.seq) for item in verdict.findings] == [
        (classes.MISMATCH, "1:skip", (2,), classes.SKIPPED, 2),
        (classes.MISMATCH, "2:extra", (5,), classes.EXTRA, 1),
        (classes.MISMATCH, "3:tie", (6, 7), classes.DIFFERENT_DTYPE, 2),
        (classes.MISMATCH, "4:hold", (8, 9, 10), classes.ORDER, 2)]


def test_ranks_held_in_different_groups_are_told_apart_and_an_empty_dump_is_behind(jobs):
    verdict = jobs["holds"].verdict
    assert jobs["holds"].exit_codes == dict.fromkeys(range(5), 0) and verdict.missing == ()
    found = [(item.kind, item.group, item.culprits, item.seq, item.elsewhere) for item in verdict.findings]
    assert found == [
        (classes.BEHIND, "0:default_pg", (4,), 1, ""), (classes.BEHIND, "4:mix", (1, 3), 2, ""),
        (classes.BEHIND, "2:left", (3,), 2, ""), (classes.BEHIND, "3:right", (3,), 2, ""),
        (classes.BEHIND, "1:gate", (1, 2), 2, "2:left, 3:right")]


def test_members_left_without_a_dump_are_missing_and_where_the_others_wait_is_said(jobs, tmp_path):
    ran = jobs["unreachable"]
    assert ran.exit_codes == dict.fromkeys(range(6), 0) and ran.verdict.missing == ()
    side = ran.finding("side")  # rank 5's buffer of two entries dropped its 'side' all_gather
    assert (side.kind, side.culprits, side.elsewhere) == (classes.MISSING, (), "3:all")
    for path in ran.directory.iterdir():  # ranks 3 and 5 unreachable: every other rank waits in 'all'
        if not path.name.endswith(("_3", "_5")):
            shutil.copy(path, tmp_path / path.name)
    verdict = diagnose_files([str(tmp_path)])
    assert verdict.missing == (3, 5)
    world = next(report for report in verdict.groups if report.desc == "default_pg").finding
    assert (world.kind, world.culprits, world.elsewhere) == (classes.MISSING, (3, 5), "3:all")


def test_minorities_a_gather_s_size_and_a_skip_past_other_behind_ranks_are_named(jobs):
    sides = jobs["sides"]
    assert sides.exit_codes == {**dict.fromkeys(range(12), 0), 10: -6}  # gloo aborted the gather's root
    found = [(item.kind, item.group, item.culprits, item.detail) for item in sides.verdict.findings]
    assert found == [(classes.MISMATCH, "1:three", (0, 4, 5), classes.DIFFERENT_COLLECTIVE),
                     (classes.MISMATCH, "2:next", (9,), classes.SKIPPED),
                     (classes.MISMATCH, "3:gathers", (7, 8), classes.DIFFERENT_SIZE),
                     (classes.BEHIND, "4:queued", (7, 8, 11), ""), (classes.MISSING, "0", (10,), "")]
    assert "ranks 7-8 still in #4 all_reduce [8] Float, which no member completed" in \
        sides.verdict.findings[3].reading
    skip = jobs["call_sites"].finding("default_pg")
    assert (skip.kind, skip.culprits, skip.detail, skip.seq) == (classes.MISMATCH, (4,), classes.SKIPPED, 2)


def test_a_partial_set_of_dumps_gives_the_verdict_it_can_and_names_what_is_missing(jobs, tmp_path):
    for path in jobs["desyncs"].directory.iterdir():
        if not path.name.endswith("_6"):
            shutil.copy(path, tmp_path / path.name)
    verdict = diagnose_files([str(tmp_path)])
    assert verdict.missing == (6,)
    found = {(finding.group.split(":")[1], finding.kind, finding.culprits) for finding in verdict.findings}
    assert ("differs", classes.MISMATCH, (2,)) in found and ("default_pg", classes.MISSING, (6,)) in found


def test_the_command_prints_the_verdict_first_and_json_for_tools(jobs, capsys):
    directory = str(jobs["desyncs"].directory)
    assert main(["diagnose", directory]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("verdict: mismatch: different collective at #2 of group 1:differs: rank 2")
    assert len(lines) < 60
    assert main(["diagnose", directory, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["culprit_found"] and [item["culprits"] for item in found["findings"]] == [[2], [7], [5]]


def test_diagnose_reads_its_dumps_without_importing_torch(jobs):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "commbench", "diagnose",
                           str(jobs["desyncs"].directory)], capture_output=True, text=True, timeout=120,
                          env=launcherless_env(), stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "commbench.diagnose.engine" in imported and not any(name.split(".")[0] == "torch"
                                                                for name in imported)


@pytest.fixture
def netns_available() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def test_a_link_cut_while_every_rank_is_in_a_collective_is_the_communication(netns_available, tmp_path):
    # two hosts (network namespaces) all-reduce; host 1's link goes down before rank 1 enters the fourth:
    # both ranks are in it, alive and cut off, and both dump (a watchdog thread, as NCCL's on a timeout)
    assert programs.run_link("cut_all_reduce", tmp_path) == [0, 0]
    verdict = diagnose_files([str(tmp_path)])
    assert verdict.missing == () and len(verdict.findings) == 1
    finding = verdict.findings[0]
    assert (finding.kind, finding.group, finding.culprits, finding.seq) == (
        classes.COMMUNICATION, "0:default_pg", (), 4)
    assert "every member of group 0:default_pg entered #4 all_reduce" in finding.reading


def test_a_receiver_whose_link_crawls_is_the_communication_at_the_receiver(netns_available, tmp_path):
    # rank 0 broadcasts; host 1's link slows to a crawl: rank 0 hands its fourth broadcast to its socket
    # and goes past it, while rank 1 still waits in it
    assert programs.run_link("crawl_broadcast", tmp_path) == [0, 0]
    verdict = diagnose_files([str(tmp_path)])
    assert verdict.missing == () and len(verdict.findings) == 1
    finding = verdict.findings[0]
    assert (finding.kind, finding.group, finding.culprits, finding.seq) == (
        classes.COMMUNICATION, "0:default_pg", (1,), 4)
    assert verdict.groups[0].stopped_at.seq == 5
    assert "rank 1 still in #4 broadcast" in finding.reading
    assert "which rank 0 completed and went past" in finding.reading


def test_a_crawling_receiver_beside_a_rank_that_went_idle_is_told_apart(netns_available, tmp_path):
    # three hosts; rank 0 broadcasts; host 1's link crawls in the fourth, which rank 2 receives before
    # it computes and rank 0 goes on to a fifth: rank 1 is named as still in the fourth
    assert programs.run_link("crawl_past_one", tmp_path) == [0, 0, 0]
    verdict = diagnose_files([str(tmp_path)])
    assert verdict.missing == () and len(verdict.findings) == 1
    finding = verdict.findings[0]
    assert (finding.kind, finding.group, finding.culprits, finding.seq) == (
        classes.BEHIND, "0:default_pg", (1, 2), 5)
    assert "rank 1 still in #4 broadcast" in finding.reading
    assert "which ranks 0, 2 completed" in finding.reading


def test_a_cut_under_collectives_left_in_flight_is_not_told_as_completed(netns_available, tmp_path):
    # two hosts all-reduce; rank 0 starts the fourth and a fifth without waiting (as NCCL queues them),
    # and host 1's link goes down before rank 1 enters the fourth: nobody completed it
    assert programs.run_link("cut_queued", tmp_path) == [0, 0]
    verdict = diagnose_files([str(tmp_path)])
    assert verdict.missing == () and len(verdict.findings) == 1
    finding = verdict.findings[0]
    assert (finding.kind, finding.group, finding.culprits, finding.seq) == (
        classes.COMMUNICATION, "0:default_pg", (1,), 4)
    assert "rank 1 still in #4 all_reduce" in finding.reading
    assert "which rank 0 left in flight and went past" in finding.reading


# --- what NCCL's dumps hold and gloo's do not: real dumps, edited as NCCL writes them --------------
# (these tests run gloo on CPU: NCCL's dumps cannot be made here)

def _edited(source: Path, into: Path, edit: Callable[[int, dict], None]) -> Path:
    into.mkdir()
    for path in source.iterdir():
        dump = pickle.loads(path.read_bytes())  # our own job's dump
        edit(int(path.name.rsplit("_", 1)[1]), dump)
        (into / path.name).write_bytes(pickle.dumps(dump))
    return into


def test_a_rank_that_lists_other_members_for_a_group_is_named(jobs, tmp_path):
    def listed(rank: int, dump: dict) -> None:  # NCCL's pg_config lists each group's members
        if rank in programs.DESYNC_GROUPS["stuck"]:
            members = [3, 5] if rank == 5 else [3, 4, 5]
            dump["pg_config"] = {"2": {"name": "2", "desc": "stuck", "ranks": json.dumps(members)}}

    verdict = diagnose_files([str(_edited(jobs["desyncs"].directory, tmp_path / "listed", listed))])
    report = next(report for report in verdict.groups if report.desc == "stuck")
    assert report.members_known and report.members == (3, 4, 5)
    assert (report.finding.kind, report.finding.culprits) == (classes.MEMBERSHIP, (5,))


def test_receives_that_wait_on_each_other_are_a_point_to_point_deadlock(jobs, tmp_path):
    def receiving(rank: int, dump: dict) -> None:  # NCCL records a recv as 'nccl:recv 1<-2'
        if rank in (1, 2):  # their last entry: pipe's first all_reduce; a recv on the world group after it
            entry = dict(dump["entries"][-1])
            entry.update(profiling_name=f"nccl:recv {rank}<-{3 - rank}", process_group=("0", "default_pg"),
                         is_p2p=True, p2p_seq_id=1, state="scheduled", retired=False,
                         record_id=entry["record_id"] + 1)
            dump["entries"].append(entry)

    verdict = diagnose_files([str(_edited(jobs["stalls"].directory, tmp_path / "p2p", receiving))])
    finding = next(finding for finding in verdict.findings if finding.kind == classes.P2P)
    assert finding.culprits == (1, 2) and finding.group == "0:default_pg"
    assert "each recvs" in finding.reading


# --- commbench's own runs ------------------------------------------------------------------------

def test_a_commbench_run_that_times_out_prints_the_verdict_and_keeps_the_dumps(tmp_path):
    # rank 1 stops (SIGSTOP) mid-sweep: rank 0 times out waiting for it, dumps its recorder, and its
    # error line carries the verdict on the run directory's dumps; rank 1, stopped, leaves none
    proc = start_commbench("--collective", "all_reduce", "--sizes", "1K:2000K:+1K", "--iters", "2",
                           "--warmup", "0", "--quiet", "--timeout", "3", "--nproc", "2", "--output-dir",
                           str(tmp_path))
    ranks = rank_processes(proc.pid, 2)
    wait_for_rows(next(_wait_for(lambda: list(tmp_path.glob("*/results.csv")))), 2, proc)
    os.kill(ranks[1], signal.SIGSTOP)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 1, stderr
    line = next(line for line in stderr.splitlines() if "on rank 0" in line)
    dumps = next(tmp_path.glob("*/flight-recorder"))
    assert f"; Flight Recorder dumps in {dumps}; diagnose: missing: " in line
    assert "rank 1" in line.split("; diagnose: ")[1]
    assert sorted(path.name for path in dumps.iterdir()) == ["rank_0"]
    verdict = diagnose_files([str(dumps)])  # the run's results.json gives the world: 2 ranks
    assert verdict.world_size == 2 and verdict.missing == (1,) and verdict.findings[0].culprits == (1,)
    assert "Traceback" not in stderr


def _wait_for(found: Callable[[], list], timeout: float = 60.0) -> Iterator:
    deadline = time.monotonic() + timeout
    while not found() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield from found()


# --- bad input: one line, exit status 2, never a traceback ----------------------------------------

def _one_line_error(capsys: pytest.CaptureFixture, *args: str) -> str:
    status = main(["diagnose", *args])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("commbench: error: ")
    return err


def test_bad_arguments_are_one_line(jobs, tmp_path, capsys):
    assert "no such file" in _one_line_error(capsys, str(tmp_path / "absent"))
    (tmp_path / "notes.txt").write_text("not a dump")
    assert "not a Flight Recorder dump" in _one_line_error(capsys, str(tmp_path / "notes.txt"))
    assert "--world-size 0" in _one_line_error(capsys, str(jobs["healthy"].directory), "--world-size", "0")
    twice = tmp_path / "twice"
    twice.mkdir()
    for name in ("fr_rank_0", "other_rank_0"):
        shutil.copy(jobs["healthy"].directory / "fr_rank_0", twice / name)
    assert "two dumps for rank 0" in _one_line_error(capsys, str(twice))


def _children() -> set[int]:
    """This process's child processes (Linux /proc), whoever started them."""
    return {int(pid) for task in Path("/proc/self/task").iterdir()
            for pid in (task / "children").read_text().split()}


def _hostile_pickles() -> dict[str, bytes]:
    """Pickles of plain data that crash or stall Python once unpickled, each a dict whose key is the
    tuple: hashing it (the unpickler does, to set the key) recurses past the C stack, or follows 2^60
    paths through tuples that share their items through the memo (a few hundred bytes)."""
    shared: tuple = (1,)
    for _ in range(60):
        shared = (shared, shared)
    return {"deep": b"\x80\x02}" + b"N" + b"\x85" * 200_000 + b"K\x01s.",  # {((((None,),),...): 1}
            "shared": b"\x80\x02}" + pickle.dumps(shared, protocol=2)[2:-1] + b"K\x01s."}


@pytest.mark.parametrize("kind", ["deep", "shared"])
def test_a_pickle_that_crashes_or_stalls_its_reader_is_refused_by_name_and_no_reader_survives(
        jobs, tmp_path, kind):
    """Read by worker processes, pickles are not walked first: the one whose reading kills its worker
    (a crash, or the CPU limit) is named as unreadable, among good dumps, and every worker ends."""
    source = jobs["desyncs"].directory
    for rank in range(40):  # real dumps, copied to 40 ranks
        shutil.copy(source / f"{programs.DUMP_PREFIX}{rank % 8}", tmp_path / f"{programs.DUMP_PREFIX}{rank}")
    before = _children()
    assert len(load_job([str(tmp_path)], workers=2).dumps) == 40
    hostile = tmp_path / f"{programs.DUMP_PREFIX}17"
    hostile.write_bytes(_hostile_pickles()[kind])
    with pytest.raises(UsageError) as refused:
        load_job([str(tmp_path)], workers=2)
    message = str(refused.value)
    assert message.startswith(f"{hostile}: refused to load: ") and "\n" not in message
    assert ("crashed its worker process (SIGSEGV" if kind == "deep" else "s of CPU") in message
    assert multiprocessing.active_children() == []
    assert _children() <= before


WRONG_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(2**63 - 1, 2**70),
                         st.floats(allow_nan=True),
                         st.text(max_size=4), st.lists(st.integers(-2, 2), max_size=3),
                         st.lists(st.lists(st.text(max_size=2), max_size=2), max_size=2),
                         st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


def _check_reads_or_says_why(directory: Path, damaged: str) -> None:
    try:
        diagnose_files([str(directory)])
    except UsageError as exc:
        assert "\n" not in str(exc) and damaged in str(exc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_field_reads_or_is_one_line_naming_the_file(jobs, tmp_path_factory, data):
    source = jobs["desyncs"].directory / f"{programs.DUMP_PREFIX}3"
    dump = pickle.loads(source.read_bytes())  # our own job's dump
    entry = data.draw(st.sampled_from(dump["entries"]))
    key = data.draw(st.sampled_from([*REQUIRED_FIELDS, "frames"]))
    if data.draw(st.booleans()):
        entry.pop(key, None)
    else:
        entry[key] = data.draw(WRONG_VALUES)
    if data.draw(st.booleans()):
        dump[data.draw(st.sampled_from(["pg_config", "pg_status", "version"]))] = data.draw(WRONG_VALUES)
    directory = tmp_path_factory.mktemp("damaged")
    (directory / source.name).write_bytes(pickle.dumps(dump))
    _check_reads_or_says_why(directory, source.name)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 1.0), as_json=st.booleans())
def test_a_truncated_dump_is_one_line_naming_the_file(jobs, tmp_path_factory, cut, as_json):
    source = jobs["stalls"].directory / f"{programs.DUMP_PREFIX}4"
    data = source.read_bytes()
    if as_json:
        data = json.dumps(pickle.loads(data), default=list).encode()
    directory = tmp_path_factory.mktemp("cut")
    (directory / source.name).write_bytes(data[: int(len(data) * cut)])
    if int(len(data) * cut) < len(data):
        with pytest.raises(UsageError, match=source.name):
            diagnose_files([str(directory)])
    else:
        _check_reads_or_says_why(directory, source.name)
