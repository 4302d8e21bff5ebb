"""How local ranks start: forked from one server that imported torch once, or each a fresh interpreter.

    python scripts/bench_spawn.py [--nproc 2,4] [--rounds 3]

Runs the same small sweep (`commbench --sizes 1K --iters 1 --warmup 0 --quiet --nproc N`) with
COMMBENCH_RANK_START=exec and =fork, alternating, and prints per N the best wall time of each way, the
CPU time the whole machine spent during the run (from /proc/stat: on a shared machine, others' work
counts too) and the ratios fork/exec. Linux only (the fork server is).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def busy_seconds() -> float:
    """CPU time spent by the whole machine so far (user, nice, system, irq, softirq), in seconds."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def one_run(how: str, nproc: int, directory: str) -> tuple[float, float]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}
    env["COMMBENCH_RANK_START"] = how
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "commbench", "--sizes", "1K", "--iters", "1", "--warmup", "0",
               "--quiet", "--nproc", str(nproc), "--output-dir", directory]
    started, busy = time.perf_counter(), busy_seconds()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=directory, timeout=600,
                          stdin=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - started, busy_seconds() - busy
    if done.returncode != 0:
        sys.exit(f"bench_spawn: {how} with {nproc} ranks failed: {done.stderr.strip()[-500:]}")
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", default="2,4", help="comma list of local rank counts")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each way per rank count")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        print("bench_spawn: the fork server is Linux's; elsewhere ranks always start fresh", file=sys.stderr)
        return 2
    print(f"load average {' '.join(f'{value:.1f}' for value in os.getloadavg())} before")
    print(f"{'ranks':>5} {'exec wall':>10} {'fork wall':>10} {'fork/exec':>9} {'exec CPU':>9} "
          f"{'fork CPU':>9} {'fork/exec':>9}")
    with tempfile.TemporaryDirectory() as directory:
        for nproc in (int(value) for value in args.nproc.split(",")):
            found: dict[str, list[tuple[float, float]]] = {"exec": [], "fork": []}
            for _ in range(args.rounds):
                for how in ("exec", "fork"):
                    found[how].append(one_run(how, nproc, directory))
            exec_wall, fork_wall = (min(wall for wall, _ in found[how]) for how in ("exec", "fork"))
            exec_cpu, fork_cpu = (min(cpu for _, cpu in found[how]) for how in ("exec", "fork"))
            print(f"{nproc:>5} {exec_wall:>9.2f}s {fork_wall:>9.2f}s {fork_wall / exec_wall:>9.2f} "
                  f"{exec_cpu:>8.2f}s {fork_cpu:>8.2f}s {fork_cpu / exec_cpu:>9.2f}")
    print(f"load average {' '.join(f'{value:.1f}' for value in os.getloadavg())} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
