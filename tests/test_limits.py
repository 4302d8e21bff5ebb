"""Limits enforced before work starts (docs/limits.md): what a small input would make unbounded is
refused in one line, exit 2: sizes in a sweep, sizes that overflow, non-finite steps, local ranks beyond
the cores and the process limit, an invalid MASTER_PORT, model repeats, a replay's operations and its
buffers against the memory budget. A spawn that fails part way leaves no rank running."""

import os
import pickle
import signal
import subprocess
import sys

import pytest

from commbench.core.devices import MemoryBudget
from commbench.core.sizes import MAX_SIZES, parse_sizes
from commbench.errors import RunError, UsageError
from commbench.patterns.models import MAX_UNITS, parse_model
from commbench.replay import config as replay_config
from commbench.replay.config import ReplayConfig, load_selected, mapped_plan
from commbench.replay.loading import load_plain_pickle
from commbench.running import spawn
from commbench.running.launch import check_local_ranks
from commbench.running.launcher import detect
from tests.dist_helpers import commbench
from tests.process_helpers import alive


@pytest.mark.parametrize("spec, message", [
    ("1:1T:+1", "holds 1,099,511,627,776 sizes, more than the 10,000 one run measures"),
    ("1K:1G:x1.0000001", "holds 138,629,443 sizes"),
    (",".join(["1K"] * (MAX_SIZES + 1)), f"holds {MAX_SIZES + 1:,} sizes"),
    (str(2**63), "above the largest size commbench measures, 1 PiB"),
    ("9" * 400, "above the largest size commbench measures, 1 PiB"),
    ("9" * 21 + "." + "0" * 400, "above the largest size commbench measures, 1 PiB"),  # quoted short
    ("1." + "0" * 5000, "too many digits"),  # past the digits Python makes a number of
    ("1025T", "above the largest size"),
    ("1K:1M:xnan", "must be a finite number above 1"),
    ("1K:1M:xinf", "must be a finite number above 1"),
    ("1K:1M:x1e400", "must be a finite number above 1"),
])
def test_sizes_beyond_the_limits_are_one_line_usage_errors(spec, message):
    with pytest.raises(UsageError, match=message) as raised:
        parse_sizes(spec)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 300


def test_a_range_of_one_size_too_many_is_refused_before_it_is_built():
    # 2^(0.005 k) for k = 0..10,000 reaches 1024T exactly: 10,001 sizes, counted as such though the
    # logarithms' ratio comes out a hair below 10,000 in floating point
    factor = 2**0.005
    built, size = 0, 1.0
    while size <= 1024**5 * (1 + 1e-12):
        built, size = built + 1, size * factor
    assert built == MAX_SIZES + 1
    with pytest.raises(UsageError, match=f"holds {MAX_SIZES + 1:,} sizes"):
        parse_sizes(f"1:1024T:x{factor!r}")


def test_exactly_the_most_sizes_one_run_measures_are_accepted():
    assert len(parse_sizes(f"1:{MAX_SIZES}:+1")) == MAX_SIZES
    assert len(parse_sizes(",".join(["1K"] * MAX_SIZES))) == MAX_SIZES


def test_a_refused_size_list_is_quoted_whole_when_short_and_by_its_start_when_long():
    with pytest.raises(UsageError) as raised:
        parse_sizes("1:1T:+1")
    assert str(raised.value).startswith("--sizes '1:1T:+1' holds")
    long_list = ",".join(["1K"] * (MAX_SIZES + 1))
    with pytest.raises(UsageError) as raised:
        parse_sizes(long_list)
    assert str(raised.value).startswith("--sizes '1K,1K,1K,") and long_list not in str(raised.value)


def test_sizes_within_the_limits_still_parse():
    assert len(parse_sizes("1K:2000K:+1K")) == 2000
    assert parse_sizes("1024T") == [1024**5]
    assert parse_sizes("0.5" + "0" * 40 + "K") == [512]


def test_local_ranks_beyond_the_cores_are_refused():
    cores = len(os.sched_getaffinity(0))
    check_local_ranks(16 * cores, "cpu")  # 16 ranks a core at most
    with pytest.raises(UsageError, match=f"--nproc 1000: at most {16 * cores} local ranks"):
        check_local_ranks(1000, "cpu")


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_a_master_port_that_is_no_tcp_port_is_refused(port):
    with pytest.raises(UsageError, match=f"MASTER_PORT={port} is not a TCP port"):
        detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})


def test_a_model_repeat_beyond_the_units_commbench_plans_is_refused():
    unit = {"name": "block", "params": {"w": [8, 8]}}
    assert len(parse_model({"units": [{**unit, "repeat": MAX_UNITS}]}, "m.yaml").units) == MAX_UNITS
    for repeat in (100_000_000, MAX_UNITS + 1):
        with pytest.raises(UsageError, match=f"'repeat: {repeat}' makes the model more than {MAX_UNITS}"):
            parse_model({"units": [{**unit, "repeat": repeat}]}, "m.yaml")
    with pytest.raises(UsageError, match="'repeat' must be a whole number of at least 1, got 0"):
        parse_model({"units": [{**unit, "repeat": 0}]}, "m.yaml")


@pytest.mark.processes
def test_the_command_line_refuses_limits_at_once_without_a_traceback():
    # the launcher checks these before any rank (or torch) starts
    for args, env, said in ((["--sizes", "1:1T:+1"], None, "more than the 10,000 one run measures"),
                            (["--sizes", "9" * 400], None, "above the largest size commbench measures"),
                            (["--nproc", "1000"], None, "--nproc 1000: at most"),
                            (["--sizes", "1K"], {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                                 "MASTER_PORT": "99999"}, "MASTER_PORT=99999 is not a TCP")):
        result = commbench(*args, "--quiet", env=env, timeout=60)
        assert result.returncode == 2, result.stderr
        assert said in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.processes
def test_ranks_beyond_the_process_limit_are_refused():
    # RLIMIT_NPROC counts threads; lowered in a child, where the check reads it
    program = ("import resource; resource.setrlimit(resource.RLIMIT_NPROC, (40, 40)); "
               "from commbench.running.launch import check_local_ranks; check_local_ranks(4, 'cpu')")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert "UsageError: --nproc 4: 4 ranks run about 64 threads, more than the process limit of 40" \
        in result.stderr


@pytest.mark.processes
def test_a_spawn_that_fails_part_way_leaves_no_rank_running(monkeypatch):
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def third_fails(command, **options):  # the process limit, reached at the third rank
        if len(started) == 2:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        started.append(real_popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                  process_group=0))
        return started[-1]

    monkeypatch.setattr(spawn.subprocess, "Popen", third_fails)
    try:
        with pytest.raises(RunError, match="could not start local rank 2 of 4 .*no rank was left running"):
            spawn._start_ranks(["--sizes", "1K"], [{}] * 4, "exec")
        assert [proc.poll() for proc in started] == [-signal.SIGKILL] * 2
        assert not any(alive(proc.pid) for proc in started)
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()


def _mutated_dumps(source, target, mutate) -> str:
    """Copies of a real program's Flight Recorder dumps, each changed by ``mutate(payload)``."""
    target.mkdir()
    for path in sorted(source.iterdir()):
        payload = load_plain_pickle(path.read_bytes(), path)
        mutate(payload)
        (target / path.name).write_bytes(pickle.dumps(payload))
    return str(target)


def test_a_replay_beyond_the_operations_it_runs_is_refused_before_it_starts(recordings, monkeypatch):
    # the limit lowered to below what the real recording holds (ten operations a rank): a recording of a
    # hundred thousand would take a minute to make or read here
    directory = str(recordings.recording("ddp").directory)
    assert load_selected(ReplayConfig(traces=[directory])).ops[0]
    monkeypatch.setattr(replay_config, "MAX_REPLAY_OPS", 5)
    with pytest.raises(UsageError, match="rank 0's recording holds 10 operations in the window, more than "
                                         "the 5 a replay runs: choose a window with --select"):
        load_selected(ReplayConfig(traces=[directory]))
    assert len(load_selected(ReplayConfig(traces=[directory], select="last:2")).ops[0]) <= 5


def test_a_replay_counts_its_buffers_against_the_memory_budget(recordings, tmp_path):
    from commbench.replay.execute import buffer_need
    from commbench.replay.run import check_memory

    def huge(payload):  # an all_reduce of 10^15 elements, as a job on a far bigger machine might record
        entry = next(entry for entry in payload["entries"] if entry["profiling_name"] == "gloo:all_reduce")
        entry["input_sizes"] = entry["output_sizes"] = [[10**15]]

    directory = _mutated_dumps(recordings.recording("ddp").directory, tmp_path / "huge", huge)
    plan = mapped_plan(load_selected(ReplayConfig(traces=[directory])), 2)
    # float32: counted on the meta device, nothing allocated; every rank's need, as the ranks compare them
    assert [buffer_need(plan, rank) >= 4 * 10**15 for rank in (0, 1)] == [True, True]
    budget = MemoryBudget(64 << 30, "test budget", explicit=True)
    with pytest.raises(UsageError, match="the replay needs 3.55 PiB of buffers on rank 0, more than the "
                                         "memory budget \\(test budget"):
        check_memory([buffer_need(plan, rank) for rank in (0, 1)], budget)
