"""What a new user meets in the first hour: sizes with nothing to measure, Ctrl-C, --quiet, more ranks
than cores, a bad output location, and the hints for near-miss names (issue "first hour")."""

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import commbench
from commbench.running.rank import StopRequests
from commbench.running.spawn import _Supervisor
from tests.dist_helpers import ROOT, launcherless_env
from tests.dist_helpers import commbench as run_cli
from tests.process_helpers import start_commbench, wait_for_rows

# --- sizes ----------------------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("args", [["--sizes", "0"], ["--sizes", "2", "--collective", "reduce_scatter_base",
                                                      "--nproc", "3"]])
def test_a_sweep_with_nothing_to_measure_is_a_usage_error(tmp_path, args):
    result = run_cli(*args, "--output-dir", str(tmp_path))
    assert result.returncode == 2, result.stdout
    assert "nothing to measure at" in result.stderr and "skipped sizes below" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


@pytest.mark.processes
def test_decimal_looking_units_are_binary_and_the_header_says_so(tmp_path):
    result = run_cli("--sizes", "1KB,2kb,1KiB", "--iters", "2", "--warmup", "0",
                     "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "sizes in binary units (1K = 1024 B)" in result.stdout
    payload = json.loads(next(tmp_path.glob("*/results.json")).read_text())
    assert [row["size_bytes"] for row in payload["rows"]] == [1024, 2048]  # 1KB and 1KiB are one size


# --- Ctrl-C -----------------------------------------------------------------------------------------

@pytest.mark.processes
def test_ctrl_c_shows_what_was_measured_and_where_it_is(tmp_path):
    csv_path, json_path = tmp_path / "r.csv", tmp_path / "r.json"
    proc = start_commbench("--sizes", "1K:2000K:+1K", "--iters", "2", "--warmup", "0", "--csv", str(csv_path),
                           "--json", str(json_path))
    wait_for_rows(csv_path, 2, proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    kept = len(json.loads(json_path.read_text())["rows"])
    assert f"interrupted by SIGINT: {kept} rows measured and kept" in stdout
    assert "all_reduce · float32" in stdout and "1 KiB" in stdout  # the table so far
    assert f"results: {csv_path}, {json_path}" in stdout
    assert json.loads(json_path.read_text())["meta"]["status"] == "interrupted"


@pytest.mark.processes
def test_a_signal_after_the_ranks_completed_does_not_turn_the_run_into_an_interrupted_one():
    done = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(2)]
    stopped = [subprocess.Popen([sys.executable, "-c", "raise SystemExit(130)"]) for _ in range(2)]
    for proc in done + stopped:
        proc.wait()
    assert _Supervisor(done, [signal.SIGINT], None)._status(1.0) == 0
    assert _Supervisor(stopped, [signal.SIGINT], None)._status(1.0) == 130


def test_a_rank_whose_work_is_done_ignores_a_late_signal():
    stops = StopRequests()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        stops.install()
        stops.done = True
        os.kill(os.getpid(), signal.SIGINT)  # would raise Terminated before the work asked
        time.sleep(0.01)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert stops.signum == 0


# --- what is printed ----------------------------------------------------------------------------------

@pytest.mark.processes
def test_quiet_prints_only_where_the_files_are_on_stderr(tmp_path):
    result = run_cli("--sizes", "1K", "--iters", "2", "--quiet", "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (run_dir,) = tmp_path.iterdir()
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"results: {run_dir / 'results.csv'}, {run_dir / 'results.json'}"]


def _stderr_on_a_terminal(command: list[str], cores: set[int] | None = None) -> tuple[int, list[str]]:
    """Run ``command`` with stderr on a pseudo-terminal (stdout to a pipe): its status and stderr lines."""
    leader, follower = pty.openpty()

    def set_up() -> None:
        if cores is not None:
            os.sched_setaffinity(0, cores)

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL,
                            env=launcherless_env(), cwd=ROOT, preexec_fn=set_up)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closes with the last process holding it
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.communicate(timeout=120)
    os.close(leader)
    return proc.returncode, b"".join(chunks).decode().replace("\r\n", "\n").splitlines()


@pytest.mark.processes
def test_more_local_ranks_than_cores_is_warned_and_a_terminal_sees_the_start(tmp_path):
    command = [sys.executable, "-m", "commbench", "--sizes", "1K", "--iters", "2", "--nproc", "2",
               "--output-dir", str(tmp_path)]
    status, lines = _stderr_on_a_terminal(command, cores={0})
    assert status == 0, lines
    assert lines[0].startswith("commbench: warning: 2 local ranks share 1 CPU cores")
    assert lines[1] == "commbench: starting 2 local ranks (gloo on cpu)"
    result = run_cli("--sizes", "1K", "--iters", "2", "--output-dir", str(tmp_path))  # no terminal, no line
    assert result.returncode == 0 and "starting" not in result.stderr


@pytest.mark.processes
@pytest.mark.parametrize("where, message", [
    (["--output-dir", "/proc/commbench-results"], "cannot write results in /proc/commbench-results"),
    (["--output-dir", "FILE"], "is a file, not a directory"),
    (["--json", "DIR", "--csv", "DIR/r.csv"], "is a directory: give the file to write"),
])
def test_a_bad_output_location_is_refused_before_any_rank_starts(tmp_path, where, message):
    (tmp_path / "FILE").write_text("")
    (tmp_path / "DIR").mkdir()
    args = [str(tmp_path / part) if part in ("FILE", "DIR", "DIR/r.csv") else part for part in where]
    result = run_cli("--sizes", "1K", *args)
    assert result.returncode == 2
    assert message in result.stderr and "starting" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


# --- result files two runs are given ---------------------------------------------------------------

@pytest.mark.processes
def test_a_second_run_given_the_same_result_file_is_refused_naming_the_first(tmp_path):
    csv_path, json_path = tmp_path / "r.csv", tmp_path / "r.json"
    first = start_commbench("--sizes", "1K:2000K:+1K", "--iters", "2", "--warmup", "0",
                            "--csv", str(csv_path), "--json", str(json_path))
    try:
        wait_for_rows(csv_path, 2, first)
        second = run_cli("--sizes", "4K", "--iters", "2", "--json", str(json_path),
                         "--output-dir", str(tmp_path / "second"))
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert second.returncode == 2 and not (tmp_path / "second").exists()
    (line,) = second.stderr.splitlines()
    assert line.startswith(f"commbench: error: --json {json_path} is being written by another commbench run "
                           f"(pid {first.pid} on ")
    assert first.returncode == 130
    saved = json.loads(json_path.read_text())
    assert saved["rows"] and {row["size_bytes"] for row in saved["rows"]} != {4096}  # the first run's rows
    assert not list(tmp_path.glob(".*.lock"))  # released and removed when the first run ended
    third = run_cli("--sizes", "4K", "--iters", "2", "--json", str(json_path), "--csv", str(csv_path))
    assert third.returncode == 0, third.stderr
    assert [row["size_bytes"] for row in json.loads(json_path.read_text())["rows"]] == [4096]


# --- saved runs named by their output directory ----------------------------------------------------

@pytest.mark.processes
def test_compare_and_load_take_output_directories_that_hold_one_run(tmp_path):
    for name in ("A", "B"):
        made = run_cli("--sizes", "1K,4K", "--iters", "2", "--warmup", "0", "--quiet",
                       "--output-dir", f"runs/{name}", cwd=tmp_path)
        assert made.returncode == 0, made.stderr
    compared = run_cli("compare", "runs/A", "runs/B", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    (run_a,) = (tmp_path / "runs" / "A").iterdir()
    assert f"base {run_a.name}" in compared.stdout and "all_reduce" in compared.stdout
    frame = commbench.load(tmp_path / "runs" / "A")
    assert frame["run_id"].unique().tolist() == [run_a.name] and len(frame) == 2


# --- names --------------------------------------------------------------------------------------

@pytest.mark.processes
@pytest.mark.parametrize("args, message", [
    (["--groups", "intranode"], "unknown --groups 'intranode' (did you mean intra-node?)"),
    (["sweep", "smoke.yaml"], "(did you mean `commbench sweep smoke`? shipped sweeps run by bare name)"),
    (["sweep", "no-such-sweep.yaml"], "the shipped sweeps are bandwidth, fsdp, full, latency, smoke"),
])
def test_near_misses_get_a_hint(args, message):
    result = run_cli(*args)
    assert result.returncode == 2 and message in result.stderr


# --- the working directory -----------------------------------------------------------------------

def _console_script() -> str:
    return str(Path(sys.executable).parent / "commbench")


@pytest.mark.processes
def test_a_folder_named_commbench_in_the_working_directory_does_not_hide_the_package_from_the_ranks(tmp_path):
    """The directory holding a checkout: ``commbench/`` there is no package, yet the ranks start."""
    (tmp_path / "commbench" / "commbench").mkdir(parents=True)
    result = subprocess.run([_console_script(), "--sizes", "1K:4K", "--iters", "2", "--warmup", "0",
                             "--output-dir", str(tmp_path / "out")], capture_output=True, text=True,
                            timeout=240, env=launcherless_env(), cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "results:" in result.stdout


@pytest.mark.processes
def test_python_m_commbench_says_in_one_line_which_folder_hides_the_package(tmp_path):
    (tmp_path / "commbench" / "commbench").mkdir(parents=True)
    probe = subprocess.run([sys.executable, "-c", "import commbench; print(commbench.__spec__.origin)"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60)
    result = subprocess.run([sys.executable, "-m", "commbench", "--version"], capture_output=True, text=True,
                            timeout=60, env=launcherless_env(), cwd=tmp_path, stdin=subprocess.DEVNULL)
    if probe.stdout.strip() != "None":  # a regular (not editable) install wins over the folder anyway
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"commbench: error: the folder {tmp_path / 'commbench'} hides the installed commbench package "
        "(python -m puts the working directory first on the import path): run from another directory, "
        "or set PYTHONSAFEPATH=1 for the ranks (export it; mpirun: -x PYTHONSAFEPATH=1)"]


def test_the_version_is_importable():
    from importlib.metadata import version

    assert commbench.__version__ == version("commbench")
