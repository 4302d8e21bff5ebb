"""Where output goes, checked before any work starts: a run's result files and directory, and the image
or page that plot and report write; and result files held by one run at a time (``held_files``).

Every check raises UsageError (one line naming the option and the path, exit status 2) and creates
nothing: it finds the nearest part of the path that exists, which must be a directory, and writes and
removes a temporary file there, so "not a directory", "read-only" and "no such place" (/proc) are all
found before the work, not in a traceback after it.
"""

import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from commbench.errors import UsageError


def check_directory(flag: str, directory: Path, what: str = "results") -> None:
    """UsageError when ``what`` cannot be written in ``directory`` (which may not exist yet)."""
    existing = next(part for part in (directory, *directory.parents) if part.exists() or part == part.parent)
    if not existing.is_dir():
        raise UsageError(f"{flag}: {existing} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise UsageError(f"{flag}: cannot write {what} in {directory}: {exc.strerror or exc}") from None


def check_file(flag: str, path: Path, what: str = "results") -> None:
    """UsageError when the file ``path`` cannot be written: it is a directory, or its directory fails
    check_directory."""
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory: give the file to write")
    check_directory(flag, path.parent, what)


def _lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def _open_locked(flag: str, path: Path) -> int:
    """An open, exclusively locked lock file beside ``path``; UsageError naming the holder when another
    run has it. A lock file a finished run removed as we opened it is not the one to hold: open again."""
    lock_path = _lock_path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(handle, 1024).decode(errors="replace").strip() or "another process"
            os.close(handle)
            raise UsageError(f"{flag} {path} is being written by another commbench run ({holder}): "
                             "wait for it to finish, or give another path") from None
        try:
            if os.stat(lock_path).st_ino == os.fstat(handle).st_ino:
                return handle
        except FileNotFoundError:
            pass
        os.close(handle)


@contextmanager
def held_files(files: list[tuple[str, Path]]) -> Iterator[None]:
    """Hold the result files ``(flag, path)`` for one run: a second run given any of them is refused
    (UsageError naming the first) instead of both writing and one run's rows being lost.

    The lock is flock(2) on ``.NAME.lock`` beside each file, holding the holder's pid, host and start;
    the kernel releases it when the holder exits however it ends, so a lock file a killed run leaves
    behind blocks nothing. It is removed when the run ends.
    """
    handles: list[tuple[Path, int]] = []
    try:
        for flag, path in dict.fromkeys(files):
            handle = _open_locked(flag, path)
            handles.append((_lock_path(path), handle))
            os.ftruncate(handle, 0)
            started = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            os.write(handle, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode())
        yield
    finally:
        for lock_path, handle in reversed(handles):
            lock_path.unlink(missing_ok=True)
            os.close(handle)
