"""What every probe shares: the roots it reads, the time budget it runs within, and external tools run
with a timeout.

Invariants: a probe signals "could not find out" by raising ProbeMissing with a one-line reason, and
nothing else escapes probe_host; no tool runs past the smaller of its own timeout and the budget left.
"""

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

TOOL_TIMEOUT_S = 5.0  # one external tool (nvidia-smi on a big machine takes about a second)
PROBE_BUDGET_S = 10.0  # all probes of one host together


class ProbeMissing(Exception):
    """A probe could not say (a tool absent or failing, a file unreadable): the message says why."""


@dataclass(frozen=True)
class Roots:
    """Where a probe reads: the real machine by default, a directory tree in tests."""

    proc: Path = Path("/proc")
    sys: Path = Path("/sys")
    root: Path = Path("/")  # for /etc/os-release, /.dockerenv, /run/.containerenv
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


@dataclass
class ProbeBudget:
    seconds: float = PROBE_BUDGET_S
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def spent(self) -> bool:
        return self.left() <= 0


def read_text(path: Path) -> str:
    """A small /proc or /sys file, stripped; ProbeMissing when it cannot be read."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError as exc:
        raise ProbeMissing(f"cannot read {path}: {exc.strerror or exc}") from None


def read_optional(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def run_tool(argv: list[str], budget: ProbeBudget, timeout_s: float = TOOL_TIMEOUT_S) -> str:
    """A tool's stdout; ProbeMissing when it is not on PATH, fails or runs past its time."""
    if shutil.which(argv[0]) is None:
        raise ProbeMissing(f"{argv[0]} is not on PATH")
    limit = min(timeout_s, budget.left())
    if limit <= 0:
        raise ProbeMissing(f"{argv[0]} not run: the probe budget of {budget.seconds:g} s was spent")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ProbeMissing(f"{' '.join(argv)} did not answer within {limit:.3g} s") from None
    except OSError as exc:
        raise ProbeMissing(f"{argv[0]} could not run: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        detail = f": {said[0][:160]}" if said else ""
        raise ProbeMissing(f"{' '.join(argv)} exited {done.returncode}{detail}")
    return done.stdout


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    found: list[int] = []
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        first, _, last = part.partition("-")
        found.extend(range(int(first), int(last or first) + 1))
    return found


def numbered(directory: Path, prefix: str) -> list[tuple[int, Path]]:
    """(N, path) for the entries PREFIXN of a directory, in number order ([] when it does not exist)."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
    found = [(int(match[1]), entry) for entry in entries if (match := pattern.match(entry.name))]
    return sorted(found)
