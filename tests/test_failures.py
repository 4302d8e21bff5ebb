"""Ranks that die, hang, diverge or are interrupted: the run ends, says which rank, and keeps its rows.

Every test runs the real CLI on 3 local ranks (or starts ranks by hand) and acts on the processes from
outside, as a cluster would: SIGKILL to one rank, a rank that never starts, signals to the launcher.
Times are only bounded generously relative to the --timeout each test sets.
"""

import json
import os
import re
import signal
import tempfile
import time
from pathlib import Path

import pytest

from commbench.coordination import LauncherBoard
from commbench.errors import Terminated
from commbench.running.rank import StopRequests
from commbench.running.spawn import failure_grace, free_port
from tests.dist_helpers import commbench
from tests.process_helpers import (
    alive,
    csv_rows,
    rank_processes,
    signal_own,
    start_commbench,
    started_at,
    wait_for_rows,
    wait_until_gone,
)

TIMEOUT_S = 5
# A death needs no timeout to be noticed: its test gives the start (three ranks importing torch on a
# crowded host) room, and bounds the time from the kill to the exit well inside it.
KILL_TIMEOUT_S = 120
KILL_TO_EXIT_S = 30
# Many quick sizes: the sweep is surely still running when the test acts after its first rows.
LONG_SWEEP = ["--collective", "all_reduce", "--sizes", "1K:2000K:+1K", "--iters", "2", "--warmup", "0",
              "--quiet"]


def _files(tmp_path):
    return tmp_path / "r.csv", tmp_path / "r.json"


def _start(tmp_path, nproc: int = 3, timeout_s: float = TIMEOUT_S):
    csv_path, json_path = _files(tmp_path)
    proc = start_commbench(*LONG_SWEEP, "--timeout", str(timeout_s), "--nproc", str(nproc),
                           "--csv", str(csv_path), "--json", str(json_path), "--output-dir", str(tmp_path))
    ranks = rank_processes(proc.pid, nproc)
    assert sorted(ranks) == list(range(nproc))
    wait_for_rows(csv_path, 2, proc)
    return proc, ranks


def _kept_rows(tmp_path) -> tuple[list[dict], dict]:
    """The CSV rows and the JSON payload, checked to agree row for row."""
    csv_path, json_path = _files(tmp_path)
    payload = json.loads(json_path.read_text())  # whole, never half-written
    rows = csv_rows(csv_path)
    assert len(rows) >= 2
    assert [int(row["size_bytes"]) for row in rows] == [row["size_bytes"] for row in payload["rows"]]
    assert list(tmp_path.glob(".*.tmp")) == []  # no temporary JSON left behind
    return rows, payload


@pytest.mark.processes
def test_killed_rank_is_named_and_earlier_rows_are_kept(tmp_path):
    proc, ranks = _start(tmp_path, timeout_s=KILL_TIMEOUT_S)
    killed_at = time.monotonic()
    os.kill(ranks[2], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=KILL_TIMEOUT_S + 60)
    elapsed = time.monotonic() - killed_at
    assert proc.returncode == 1, stderr
    assert elapsed < KILL_TO_EXIT_S, f"took {elapsed:.1f} s to stop after the kill"
    assert "rank 2 died (SIGKILL)" in stderr
    assert "Traceback (most recent call last)" not in stderr
    _, payload = _kept_rows(tmp_path)
    meta = payload["meta"]
    assert meta["status"] == "failed"
    assert "all_reduce" in meta["error"] and "rank 2 died (SIGKILL)" in meta["error"]
    assert wait_until_gone(list(ranks.values()), 10) == []


@pytest.mark.processes
def test_rank_hung_inside_a_collective_ends_the_run(tmp_path):
    # SIGSTOP: the rank stays alive but does nothing, as a hung one would. The others' collective
    # times out, they say so and name the silent rank; the launcher stops it and names it too.
    proc, ranks = _start(tmp_path)
    hung_at = time.monotonic()
    os.kill(ranks[2], signal.SIGSTOP)
    _, stderr = proc.communicate(timeout=TIMEOUT_S + 60)
    elapsed = time.monotonic() - hung_at
    assert proc.returncode == 1, stderr
    assert elapsed < TIMEOUT_S + 20, f"took {elapsed:.1f} s with --timeout {TIMEOUT_S}"
    # Inside a collective, the others' collective times out and rank 2 says nothing afterwards; between
    # two sizes, the others' check-in times out waiting for it. Either way rank 2 is named.
    assert ("failed at size" in stderr and "rank 2 did not report" in stderr) or \
        ("timed out after 5 s" in stderr and "rank 2 did not arrive (rank 2 still in all_reduce" in stderr)
    assert re.search(r"rank 2 did not stop within [0-9.]+ s of rank \d failing \(hung\)", stderr), stderr
    _, payload = _kept_rows(tmp_path)
    assert payload["meta"]["status"] == "failed" and "all_reduce" in payload["meta"]["error"]
    assert wait_until_gone(list(ranks.values()), 10) == []


def _end_run(proc, started: dict[int, int | None]) -> None:
    """Kill what is left of a test's run (a stopped rank is continued first, so it goes at once): only
    the processes it started, each by its pid and start time (``started``), never a pid given again."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()
    for pid, start in started.items():
        if alive(pid) and signal_own(pid, start, signal.SIGCONT):
            signal_own(pid, start, signal.SIGKILL)


# Rank 0 hosts the rendezvous store: torch's client waits forever for its answers once it is frozen, so
# the others bound every store request themselves (coordination/store.py); its floor is 10 s.
FROZEN_TIMEOUT_S = 10


@pytest.mark.processes
def test_frozen_rank_0_ends_the_run_within_the_timeout_and_is_named(tmp_path):
    # SIGSTOP rank 0, which serves the store: rank 1 stops waiting for it, names it, and the
    # launcher stops it and records in its results.json how the run ended.
    proc, ranks = _start(tmp_path, nproc=2, timeout_s=FROZEN_TIMEOUT_S)
    started = {pid: started_at(pid) for pid in ranks.values()}
    try:
        frozen_at = time.monotonic()
        assert signal_own(ranks[0], started[ranks[0]], signal.SIGSTOP)
        _, stderr = proc.communicate(timeout=FROZEN_TIMEOUT_S + 90)
        elapsed = time.monotonic() - frozen_at
    finally:
        _end_run(proc, started)
    assert proc.returncode == 1, stderr
    assert elapsed < 60, f"took {elapsed:.1f} s with --timeout {FROZEN_TIMEOUT_S}"
    assert "(hosted by rank 0): its host is stopped, hung or overloaded" in stderr, stderr
    assert re.search(r"rank 0 did not stop within [0-9.]+ s of rank \d failing \(hung\)", stderr), stderr
    assert "frame #" not in stderr and "Traceback" not in stderr
    _, payload = _kept_rows(tmp_path)
    assert payload["meta"]["status"] == "failed"
    assert "rank 0 did not stop" in payload["meta"]["error"] and payload["meta"]["finished_at"]
    assert wait_until_gone(list(ranks.values()), 10) == []


@pytest.mark.processes
def test_killed_rank_0_leaves_a_final_status_and_every_row(tmp_path):
    # rank 0 writes the files: its launcher records the end it could not, with the CSV's rows
    proc, ranks = _start(tmp_path, nproc=2, timeout_s=KILL_TIMEOUT_S)
    started = {pid: started_at(pid) for pid in ranks.values()}
    try:
        assert signal_own(ranks[0], started[ranks[0]], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=KILL_TIMEOUT_S + 60)
    finally:
        _end_run(proc, started)
    assert proc.returncode == 1, stderr
    assert "rank 0 died (SIGKILL)" in stderr
    _, payload = _kept_rows(tmp_path)
    assert payload["meta"]["status"] == "failed" and payload["meta"]["error"] == "rank 0 died (SIGKILL)"
    assert wait_until_gone(list(ranks.values()), 10) == []


@pytest.mark.processes
def test_rank_that_skips_a_size_is_named_at_the_timeout(tmp_path):
    # Three ranks started as a launcher would, rank 2 with a sweep that leaves 4 KiB out (as a rank
    # given another sweep file would): ranks 0 and 1 wait at 4 KiB and name rank 2, which went on to 8 KiB.
    csv_path, json_path = _files(tmp_path)
    port, timeout_s = str(free_port()), 5
    sizes = {0: "1K:16K", 1: "1K:16K", 2: "1K,2K,8K,16K"}
    procs = [start_commbench("--collective", "all_reduce", "--sizes", sizes[rank], "--quiet",
                             "--timeout", str(timeout_s), "--csv", str(csv_path), "--json", str(json_path),
                             "--output-dir", str(tmp_path),
                             env={"RANK": str(rank), "WORLD_SIZE": "3", "LOCAL_RANK": str(rank),
                                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank in range(3)]
    try:
        wait_for_rows(csv_path, 2, procs[0])  # 1 KiB and 2 KiB: next, the ranks part at 4 KiB
        diverged = time.monotonic()
        stderrs = [proc.communicate(timeout=timeout_s + 60)[1] for proc in procs]
        elapsed = time.monotonic() - diverged
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert [proc.returncode for proc in procs] == [1, 1, 1], stderrs
    assert elapsed < timeout_s + 20, f"took {elapsed:.1f} s after the last row with --timeout {timeout_s}"
    instead = "rank 2 at all_reduce (float32, sum, in-place) at size 8 KiB instead"
    for stderr in stderrs[:2]:
        (waiting,) = [line for line in stderr.splitlines() if "at size 4 KiB: timed out after 5 s" in line]
        assert "rank 2 did not arrive" in waiting and instead in waiting, stderr
    assert all("Traceback" not in stderr for stderr in stderrs)
    payload = json.loads(json_path.read_text())
    assert [row["size_bytes"] for row in payload["rows"]] == [1024, 2048]  # measured before the skip
    assert [row["size_bytes"] for row in csv_rows(csv_path)] == ["1024", "2048"]
    assert payload["meta"]["status"] == "failed"
    assert "at size 4 KiB" in payload["meta"]["error"] and "rank 2 did not arrive" in payload["meta"]["error"]


@pytest.mark.processes
def test_rank_that_never_joins_is_named(tmp_path):
    port = str(free_port())
    timeout_s = 4
    started = time.monotonic()
    procs = [start_commbench("--sizes", "1K", "--timeout", str(timeout_s), "--quiet",
                             "--output-dir", str(tmp_path),
                             env={"RANK": str(rank), "WORLD_SIZE": "3", "LOCAL_RANK": str(rank),
                                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank in (0, 1)]  # rank 2 never starts
    outputs = [proc.communicate(timeout=timeout_s + 60) for proc in procs]
    elapsed = time.monotonic() - started
    # --timeout ended the wait, not the default's 300 s: the rest of the time is two ranks importing
    # torch, which took up to 35 s on a loaded 2-core runner
    assert elapsed < timeout_s + 90
    for rank, (proc, (_, stderr)) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 1, stderr
        assert f"process-group start timed out after {timeout_s} s on rank {rank}: rank 2 of 3 did not join" \
            in stderr
    assert not list(tmp_path.iterdir())  # nothing was measured, so no files


@pytest.mark.processes
def test_a_start_that_times_out_says_so_and_names_the_timeout(tmp_path):
    # 1 ms is too short for the ranks to meet: every rank says the start timed out, naming the timeout
    # (a rank whose op failed because a peer that timed out went first gives that peer's account, which
    # names it); no C++ frames, and no port blamed
    result = commbench("--sizes", "1K", "--timeout", "0.001", "--output-dir", str(tmp_path), timeout=120)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert lines and all("0.001 s" in line for line in lines), result.stderr
    # the process group's start, or (when that made it in time) the start's first exchange of host names
    assert any("timed out after 0.001 s" in line or "did not start within 0.001 s (--timeout)" in line
               or "the run's start (host names, groups) failed on rank" in line
               and "did not complete within 0.001 s (--timeout)" in line for line in lines)
    for misleading in ("frame #", "port is taken", "Traceback"):
        assert misleading not in result.stderr


@pytest.mark.processes
def test_sigint_to_the_launcher_keeps_the_rows_and_exits_130(tmp_path):
    proc, ranks = _start(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=TIMEOUT_S + 60)
    assert proc.returncode == 130, stderr
    _, payload = _kept_rows(tmp_path)
    assert payload["meta"]["status"] == "interrupted"
    assert payload["meta"]["error"] == "stopped by SIGINT"
    assert wait_until_gone(list(ranks.values()), 10) == []


@pytest.mark.processes
def test_sigterm_to_rank_0_alone_stops_every_rank(tmp_path):
    # As under mpirun or srun, where a signal may reach one rank: the others stop with it at the next
    # size instead of waiting for it in a collective.
    proc, ranks = _start(tmp_path)
    os.kill(ranks[0], signal.SIGTERM)
    _, stderr = proc.communicate(timeout=TIMEOUT_S + 60)
    assert proc.returncode == 143, stderr
    _, payload = _kept_rows(tmp_path)
    assert payload["meta"]["status"] == "interrupted"
    assert "stopped by SIGTERM" in payload["meta"]["error"]
    assert wait_until_gone(list(ranks.values()), 10) == []


@pytest.mark.processes
def test_killed_launcher_leaves_no_orphans(tmp_path):
    proc, ranks = _start(tmp_path)
    proc.kill()  # no chance to forward anything: the ranks learn from PR_SET_PDEATHSIG
    proc.communicate(timeout=30)
    assert wait_until_gone(list(ranks.values()), TIMEOUT_S + 10) == []
    _, payload = _kept_rows(tmp_path)
    assert payload["meta"]["status"] == "interrupted"


def test_second_signal_stops_at_once():
    stops = StopRequests()
    with pytest.raises(Terminated):  # before the work first asks, a signal stops at once
        stops._handle(signal.SIGINT, None)
    assert stops.requested() == 0
    stops._handle(signal.SIGINT, None)
    assert stops.requested() == signal.SIGINT  # the first only asks the sweep to stop
    with pytest.raises(Terminated) as raised:
        stops._handle(signal.SIGTERM, None)
    assert raised.value.exit_code == 143


def test_a_crowded_host_gives_failed_runs_ranks_more_time_to_exit():
    assert failure_grace(8, cores=8) == failure_grace(2, cores=8) == 4.0
    assert failure_grace(32, cores=2) == 64.0  # every exit waits its turn for a core


def test_boards_of_launchers_that_are_gone_are_swept_at_the_next_launch(tmp_path, monkeypatch):
    # a launcher killed by SIGKILL never removes its board; the next one does
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can have it
    stale = tmp_path / f"commbench-launcher-{gone}-x"
    live = tmp_path / f"commbench-launcher-{os.getpid()}-y"
    stale.mkdir()
    live.mkdir()
    board = LauncherBoard.create()
    assert board.path.parent == tmp_path and board.path.is_dir()
    assert not stale.exists() and live.exists()
    assert board.passes() == 0 and board.deaths() == {}
    board.record_death(2, "SIGKILL")
    board.record_pass(3)
    assert board.deaths() == {2: "SIGKILL"} and board.passes() == 3
    board.remove()
    assert board.passes() is None and board.deaths() == {}
