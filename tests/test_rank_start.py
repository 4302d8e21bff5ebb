"""How spawned local ranks start: forked from a server that imported torch once (Linux), or each a fresh
interpreter (elsewhere, and with COMMBENCH_RANK_START=exec). Both ways run the same ranks."""

import json
import subprocess
import sys

import pytest

from commbench.errors import UsageError
from commbench.running.spawn import RANK_START_ENV, rank_start
from tests.dist_helpers import commbench, launcherless_env


@pytest.mark.parametrize("environ, platform, expected", [
    ({}, "linux", "fork"),
    ({}, "darwin", "exec"),  # forking after Apple's frameworks loaded is unsafe
    ({}, "win32", "exec"),
    ({RANK_START_ENV: "exec"}, "linux", "exec"),
    ({RANK_START_ENV: "fork"}, "linux", "fork"),
])
def test_ranks_fork_on_linux_unless_told_otherwise(environ, platform, expected):
    assert rank_start(environ, platform) == expected


def test_an_unknown_way_to_start_ranks_is_refused():
    with pytest.raises(UsageError, match="COMMBENCH_RANK_START='spawn' is not a way to start ranks"):
        rank_start({RANK_START_ENV: "spawn"}, "linux")


@pytest.mark.processes
@pytest.mark.parametrize("how", ["exec", "fork"])
def test_either_way_the_ranks_measure_and_check_the_same_sweep(how, tmp_path):
    json_path = tmp_path / "run.json"
    result = commbench("--collective", "all_reduce,all_gather_base", "--sizes", "1536,3072", "--iters", "2",
                       "--check", "--nproc", "3", "--quiet", "--json", str(json_path), "--csv",
                       str(tmp_path / "run.csv"), env={RANK_START_ENV: how})
    assert result.returncode == 0, result.stderr
    payload = json.loads(json_path.read_text())
    assert payload["meta"]["world_size"] == 3 and payload["meta"]["launcher"] == "local"
    assert [(row["collective"], row["size_bytes"], row["wrong"]) for row in payload["rows"]] == [
        ("all_reduce", 1536, 0), ("all_reduce", 3072, 0), ("all_gather_base", 1536, 0),
        ("all_gather_base", 3072, 0)]


@pytest.mark.processes
def test_a_wrong_way_to_start_ranks_is_one_line_and_status_2(tmp_path):
    result = commbench("--sizes", "1K", "--nproc", "2", "--output-dir", str(tmp_path),
                       env={RANK_START_ENV: "thread"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "commbench: error: COMMBENCH_RANK_START='thread' is not a way to start ranks: fork or exec"]
    assert not list(tmp_path.iterdir())


# A Ctrl-C that lands while the launcher starts the fork server is raised once the server is up, never
# lost. The launcher has a second thread (as torch's make): a process's signal goes to any thread not
# blocking it, so blocking SIGINT in one thread while ignoring it lost the signal when the other thread
# took it first (under load in the flake hunt; here the half second gives it the time).
_CTRL_C_AS_THE_SERVER_STARTS = """
import multiprocessing.forkserver, os, signal, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal, whatever the runner ignores
from commbench.running import spawn
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
real = multiprocessing.forkserver.ensure_running
def started_then_interrupted():
    real()
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.5)  # time for the other thread to take the signal
multiprocessing.forkserver.ensure_running = started_then_interrupted
try:
    spawn.forking_context()
    time.sleep(2)
    print("lost")
except KeyboardInterrupt:
    print("held, then raised")
"""


@pytest.mark.processes
def test_a_ctrl_c_while_the_fork_server_starts_is_held_and_raised_not_lost():
    done = subprocess.run([sys.executable, "-c", _CTRL_C_AS_THE_SERVER_STARTS], capture_output=True,
                          text=True, timeout=120, env=launcherless_env(), stdin=subprocess.DEVNULL)
    assert done.stdout.strip() == "held, then raised", done.stdout + done.stderr
