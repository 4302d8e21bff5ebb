"""Watching real processes from a test: a run's rank processes, its files as they fill, and whether
anything it started is still alive (Linux /proc)."""

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.dist_helpers import ROOT, launcherless_env


def start_commbench(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The real CLI in the background, without a launcher's variables unless ``env`` gives them."""
    return subprocess.Popen([sys.executable, "-m", "commbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=launcherless_env(env), cwd=ROOT,
                            stdin=subprocess.DEVNULL)


def _parent_and_rank(pid: int) -> tuple[int, int | None] | None:
    """A process's parent and, for a rank commbench forked, its rank (named commbench-rN)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None
    rank = int(name[len("commbench-r"):]) if name.startswith("commbench-r") else None
    return parent, rank


def rank_processes(parent_pid: int, count: int, timeout: float = 60.0) -> dict[int, int]:
    """rank -> pid of the ``count`` rank processes a spawner started (forked by its fork server, so
    the spawner's grandchildren)."""
    deadline = time.monotonic() + timeout
    while True:
        processes = {int(entry.name): _parent_and_rank(int(entry.name)) for entry in Path("/proc").iterdir()
                     if entry.name.isdigit()}
        children = {pid for pid, info in processes.items() if info is not None and info[0] == parent_pid}
        found = {info[1]: pid for pid, info in processes.items()
                 if info is not None and info[1] is not None and {info[0]} & (children | {parent_pid})}
        if len(found) == count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def started_at(pid: int) -> int | None:
    """When a process started (clock ticks since boot; None: gone): with its pid, who it is, so that a
    pid the system gave again to another process (another run's rank) is never signalled."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def signal_own(pid: int, started: int | None, signum: int) -> bool:
    """Send ``signum`` to ``pid`` only while it is still the process that started at ``started``
    (started_at); whether it was sent."""
    if started is None or started_at(pid) != started:
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_until_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still running after up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def csv_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def wait_for_rows(path: Path, count: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until the CSV holds ``count`` rows; fails if the run ends or time runs out first."""
    deadline = time.monotonic() + timeout
    while len(csv_rows(path)) < count:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (status {proc.returncode}) before {count} rows: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {count} rows in {path} within {timeout} s")
        time.sleep(0.02)
