"""Runs on a crowded host that must not fail: many local ranks per core, and the kill test under load.

    python scripts/crowded_runs.py sweep --nproc 32 --times 3
    python scripts/crowded_runs.py kill --times 10 --beside tests/test_end_to_end.py

``sweep`` runs ``commbench --collective all_reduce --sizes 1K:4K --iters 3 --warmup 1 --nproc N`` again
and again; every run must exit 0 (32 ranks on 2 cores once failed with "Operation timed out!" minutes
before --timeout, and named healthy ranks hung). ``kill`` runs the kill test
(tests/test_failures.py::test_killed_rank_is_named_and_earlier_rows_are_kept) again and again while
another pytest selection runs beside it, restarted whenever it ends; every run must pass (a killed rank
was once named "did not report"). Each run's exit status, wall time and the load average before and
after are printed; the script exits 1 when any run failed. Minutes per run at 32 ranks on 2 cores, so
this is a script to run and record, not a test in the suite.
"""

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ["--collective", "all_reduce", "--sizes", "1K:4K", "--iters", "3", "--warmup", "1"]
KILL_TEST = "tests/test_failures.py::test_killed_rank_is_named_and_earlier_rows_are_kept"


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def timed_run(command: list[str], timeout_s: float, cwd: Path) -> tuple[int, float, str]:
    """Exit status (124: past the timeout), seconds, and the last lines of its output."""
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                              env=environment(), stdin=subprocess.DEVNULL)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = 124, f"{exc.stdout or ''}{exc.stderr or ''}"
    lines = str(output).splitlines()
    # a failed test's own lines (pytest's "E ..."), then the last lines: what failed and why
    errors = [line for line in lines if line.startswith("E ")][:30]
    return code, time.monotonic() - started, "\n".join(errors + lines[-6:])


def sweep(args: argparse.Namespace) -> int:
    command = [sys.executable, "-m", "commbench", *SWEEP, "--nproc", str(args.nproc), "--quiet",
               "--timeout", str(args.timeout), "--output-dir", str(args.output_dir)]
    print(f"{' '.join(command[1:])}; {os.cpu_count()} CPUs; {args.times} runs", flush=True)
    failed = 0
    for run in range(1, args.times + 1):
        before = load()
        code, seconds, tail = timed_run(command, args.timeout + 600, ROOT)
        failed += code != 0
        print(f"run {run}/{args.times}: exit {code} in {seconds:.1f} s (load average {before} before, "
              f"{load()} after)", flush=True)
        if code != 0:
            print(tail, flush=True)
    print(f"{args.times - failed} of {args.times} runs exited 0")
    return 1 if failed else 0


def start_beside(selection: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection],
                            cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)


def kill(args: argparse.Namespace) -> int:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", KILL_TEST]
    print(f"{KILL_TEST} x {args.times}, beside pytest {' '.join(args.beside)}", flush=True)
    beside = start_beside(args.beside)
    suites = 1
    failed = 0
    try:
        for run in range(1, args.times + 1):
            if beside.poll() is not None:
                beside, suites = start_beside(args.beside), suites + 1
            before = load()
            code, seconds, tail = timed_run(command, 900, ROOT)
            failed += code != 0
            print(f"run {run}/{args.times}: {'passed' if code == 0 else f'FAILED (exit {code})'} in "
                  f"{seconds:.1f} s (load average {before} before, {load()} after; suite beside "
                  f"{'running' if beside.poll() is None else 'done'})", flush=True)
            if code != 0:
                print(tail, flush=True)
    finally:
        if beside.poll() is None:
            os.killpg(beside.pid, signal.SIGTERM)  # its own session: the suite and the ranks it started
            beside.wait()
    print(f"{args.times - failed} of {args.times} runs passed; {suites} runs of the suite beside them")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("sweep", help="the same small sweep on many local ranks, again and again")
    runs.add_argument("--nproc", type=int, default=32)
    runs.add_argument("--times", type=int, default=3)
    runs.add_argument("--timeout", type=int, default=300, help="commbench's --timeout")
    runs.add_argument("--output-dir", type=Path, default=Path("/tmp/commbench-crowded"))
    killing = commands.add_parser("kill", help="the kill test again and again, another suite beside it")
    killing.add_argument("--times", type=int, default=10)
    killing.add_argument("--beside", nargs="+", default=["tests/test_end_to_end.py"],
                         help="the pytest selection run beside it")
    args = parser.parse_args()
    return sweep(args) if args.command == "sweep" else kill(args)


if __name__ == "__main__":
    sys.exit(main())
