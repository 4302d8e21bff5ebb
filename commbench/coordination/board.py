"""What a spawning launcher knows of its local ranks, told to them through files in a directory of its
own (``COMMBENCH_LAUNCHER_BOARD``). Its ranks share its host by construction, so a file reaches them at
once: no torch to import in the launcher (seconds, tens of seconds on a crowded host) and no round trip
through the rendezvous store (which rank 0 hosts, and which goes with it).

Files:
  dead-<rank>   the signal's name (``SIGKILL``) of a rank that died by a signal the launcher did not send
  passes        how many supervision passes the launcher has finished; a pass reaps every rank that had
                exited when it began and writes their deaths before it counts itself
  results       written by rank 0: its results.json and results.csv, a line each, so that the launcher
                can record how the run ended when rank 0 could not (killed, or stopped as hung)

A rank that failed waits until ``passes`` has grown by 2 since its own report: the second of those
passes began after the report, so a rank whose death caused the failure has been named by then, however
loaded the host (a fixed grace is a race against the launcher's scheduling).

Torch-free and low in the layers: the launcher (running/spawn.py) writes it, the ranks' check-ins
(store.py) read it.
"""

import os
import shutil
import tempfile
from pathlib import Path

BOARD_ENV = "COMMBENCH_LAUNCHER_BOARD"
_PREFIX = "commbench-launcher-"


class LauncherBoard:
    """The launcher's side (``create``, ``record_*``, ``remove``) and the ranks' side (``deaths``,
    ``passes``) of one board."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls) -> "LauncherBoard":
        """A new board, named by this launcher's pid; boards of launchers that are gone (one killed by
        SIGKILL never removes its own) are swept away first."""
        _sweep_orphans(Path(tempfile.gettempdir()))
        return cls(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))

    def _write(self, name: str, text: str) -> None:
        temporary = self.path / f".{name}.tmp"
        temporary.write_text(text)
        os.replace(temporary, self.path / name)  # a reader sees the whole text or none

    def record_death(self, rank: int, reason: str) -> None:
        self._write(f"dead-{rank}", reason)

    def record_pass(self, count: int) -> None:
        self._write("passes", str(count))

    def record_results(self, json_path: str | Path, csv_path: str | Path) -> None:
        self._write("results", f"{Path(json_path).absolute()}\n{Path(csv_path).absolute()}")

    def results(self) -> tuple[Path, Path] | None:
        """Rank 0's results.json and results.csv, once it has opened them; None before."""
        try:
            json_path, csv_path = (self.path / "results").read_text().split("\n")
        except (OSError, ValueError):
            return None
        return Path(json_path), Path(csv_path)

    def deaths(self) -> dict[int, str]:
        """rank -> the signal that killed it, as the launcher recorded them."""
        try:
            names = os.listdir(self.path)
        except OSError:  # the launcher is gone, and its board with it
            return {}
        found: dict[int, str] = {}
        for name in names:
            if name.startswith("dead-"):
                try:
                    found[int(name[len("dead-"):])] = (self.path / name).read_text()
                except (OSError, ValueError):
                    continue
        return found

    def passes(self) -> int | None:
        """The launcher's finished passes (0 before its first); None when there is no board to read (the
        launcher is gone)."""
        try:
            return int((self.path / "passes").read_text())
        except FileNotFoundError:
            return 0 if self.path.is_dir() else None
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _sweep_orphans(directory: Path) -> None:
    try:
        entries = list(directory.glob(f"{_PREFIX}*"))
    except OSError:
        return
    for entry in entries:
        pid_text = entry.name[len(_PREFIX):].split("-", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)) and _ours(entry):
            shutil.rmtree(entry, ignore_errors=True)


def _ours(entry: Path) -> bool:
    try:
        return entry.stat().st_uid == os.getuid()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
