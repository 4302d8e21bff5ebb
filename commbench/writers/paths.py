"""Where output goes, checked before any work starts: a run's result files and directory, and the image
or page that plot and report write.

Every check raises UsageError (one line naming the option and the path, exit status 2) and creates
nothing: it finds the nearest part of the path that exists, which must be a directory, and writes and
removes a temporary file there, so "not a directory", "read-only" and "no such place" (/proc) are all
found before the work, not in a traceback after it.
"""

import tempfile
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
