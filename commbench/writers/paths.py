"""Where output goes, checked before any work starts: a run's result files and directory, and the image
or page that plot and report write; that no output is one of the command's own inputs
(``check_not_an_input``); and result files held by one run at a time (``held_files``).

Every check raises UsageError (one line naming the option and the path, exit status 2) and creates
nothing: it finds the nearest part of the path that exists, which must be a directory, and writes and
removes a temporary file there, so "not a directory", "read-only" and "no such place" (/proc) are all
found before the work, not in a traceback after it.
"""

import fcntl
import glob
import os
import socket
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from commbench.core.untrusted import file_kind, is_directory, present
from commbench.errors import UsageError


def check_directory(flag: str, directory: Path, what: str = "results") -> None:
    """UsageError when ``what`` cannot be written in ``directory`` (which may not exist yet)."""
    existing = next(part for part in (directory, *directory.parents) if present(part) or part == part.parent)
    if not is_directory(existing):
        raise UsageError(f"{flag}: {existing} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise UsageError(f"{flag}: cannot write {what} in {directory}: {exc.strerror or exc}") from None


def check_file(flag: str, path: Path, what: str = "results", rewritten: bool = False) -> None:
    """UsageError when the file ``path`` cannot be written: it is a directory, or its directory fails
    check_directory. A special file is written through, never replaced: a character device (/dev/null)
    always, a FIFO unless the output is ``rewritten`` as it grows (results.json, whose every version
    would follow the last down the pipe); a socket or a block device never."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        found = None
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write {what} there: {exc.strerror or exc}") from None
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise UsageError(f"{flag} {path} is a directory: give the file to write")
    if found is None or stat.S_ISREG(found.st_mode):
        check_directory(flag, path.parent, what)
    elif stat.S_ISFIFO(found.st_mode) and rewritten:
        raise UsageError(f"{flag} {path} is a FIFO (named pipe): {what} is rewritten whole as it grows, so "
                         "it goes to a regular file, or to a character device such as /dev/null to keep none")
    elif not stat.S_ISCHR(found.st_mode) and not stat.S_ISFIFO(found.st_mode):
        raise UsageError(f"{flag} {path} is {file_kind(found.st_mode)}: {what} goes to a regular file, a "
                         "character device (/dev/null) or a FIFO")


def check_not_an_input(flag: str, path: Path, inputs: Iterable[Path]) -> None:
    """UsageError when the output ``path`` is one of the files the command reads: writing it would
    destroy what it is made from (``report RUN/results.json -o RUN/results.json``)."""
    check_not_among(flag, [path], identities(inputs))


def identities(paths: Iterable[Path]) -> dict[tuple[int, int], Path]:
    """The existing files among ``paths`` by their identity (device, inode): the same file however its
    path is spelled (a link, '..', a relative path)."""
    found: dict[tuple[int, int], Path] = {}
    for path in paths:
        identity = _identity(path)
        if identity is not None:
            found.setdefault(identity, path)
    return found


def check_not_among(flag: str, outputs: Iterable[Path], inputs: dict[tuple[int, int], Path]) -> None:
    """``check_not_an_input`` for many outputs (--record's file per rank), against inputs' identities."""
    for output in outputs:
        identity = _identity(output)
        source = inputs.get(identity) if identity is not None else None
        if source is not None:
            same = "" if str(source) == str(output) else f" ({source})"
            raise UsageError(f"{flag} {output} is also an input of this command{same}: writing it would "
                             "destroy it; give another path")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    return info.st_dev, info.st_ino


def files_named(argv: Iterable[str], skip: Iterable[str] = ()) -> list[Path]:
    """The existing files a command line names as arguments (``--opt=FILE`` included, a directory as
    the files in it, a glob as its matches), apart from the values of the options ``skip``."""
    tokens: list[str] = []
    skipping = False
    skipped = set(skip)
    for token in argv:
        if skipping:
            skipping = False
            continue
        name, equals, value = token.partition("=")
        if name in skipped:
            skipping = not equals
            continue
        tokens.append(value if equals and token.startswith("--") else token)
    found: list[Path] = []
    for token in tokens:
        for match in (glob.glob(token) if glob.has_magic(token) else [token]):
            path = Path(match)
            if is_directory(path):
                found.extend(child for child in path.iterdir() if not child.name.startswith("."))
            elif present(path):
                found.append(path)
    return found





def _special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


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
            if _special(path):  # written through by any number of runs (/dev/null): nothing to hold
                continue
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
