"""How a run writes its files as rows arrive (reading them back: results/saved.py).

Rows are written as measured: the CSV synced per row (per block of rows measured together, such as a
fabric round's; a character device or a FIFO is written to, not synced), the JSON rewritten atomically
(temporary file, fsync, rename: ``write_atomic``, which keeps the file's mode and never replaces a
special file) per row up to JSON_EVERY_ROW_UP_TO rows, then at most every JSON_INTERVAL_S, and for
fits, sections and the end. A stopped run keeps every row it finished; no reader sees a half-written
JSON. Each row's JSON text is made once, when it arrives, one row per line, and a block of rows measured
together is one line of its columns (results.columns.RowBlock.saved: a fabric round's 2N rows share all
but a few fields). The texts wait in a spool that moves from memory to an unnamed temporary file past
SPOOL_IN_MEMORY bytes, and a rewrite copies them into the new JSON, which it writes a piece at a time
(json_pieces): the writer holds no rows and makes no text of the whole file, so a full fabric pass's two
million rows cost rank 0 no memory here (re-encoding every row each time cost seconds per size at
thousands of ranks).

When a file cannot grow (a full disk, a quota, the file size limit), the rows of the batch that did
not fit are taken back out of the CSV, so both files hold the same rows, and the run fails saying why
(``NoRoom``); its final status is written if there is room for it, else the JSON keeps its last rows
and the CSV is cut to the same.

A run whose rank 0 could not record its end (killed, or stopped by its launcher as hung) is settled by
the launcher that started it (``finish_abandoned``): its status, and the rows the CSV holds beyond the
JSON's last rewrite.
"""

import csv
import errno
import glob
import json
import math
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import IO, Any

import numpy as np

from commbench.core.untrusted import file_kind
from commbench.errors import RunError, UsageError
from commbench.results.columns import RowBlock
from commbench.results.model import CSV_COLUMNS, Row, RunMeta
from commbench.results.saved import row_from_saved

SCHEMA_VERSION = 3  # 2: rows measured together as blocks of columns, fabric's matrices as measured pairs;
# 3: a block's numbers, text and lists of numbers as packed arrays (docs/results.md)
SPOOL_IN_MEMORY = 16 * 2**20  # bytes of row texts kept in memory before the spool moves to a file
# A part beside the rows (the fits, a section) whose text is at most this long is laid out once, when it
# is set, not at every rewrite (a sweep of many tables rewrote its growing fits and explanation for every
# row, in Python, which cost a third of rank 0's time); a longer one (fabric's matrices) is laid out a
# piece at a time at every rewrite, never held as one text.
LAID_OUT_UP_TO = 4 * 2**20
ARRAY_CHUNK = 2**16  # values of a numpy array turned into text at a time
# Why a file could not grow, by the error the system gave.
NO_ROOM = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
           errno.EFBIG: "the file size limit (ulimit -f) is reached"}
JSON_EVERY_ROW_UP_TO = 256  # rows: up to here the JSON is rewritten for every row (each holds every row)
JSON_INTERVAL_S = 1.0  # beyond, at most this often, and at most once per 10 times the last rewrite's time


def clean_for_json(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [clean_for_json(item) for item in value]
    if isinstance(value, dict):
        return {key: clean_for_json(item) for key, item in value.items()}
    return value


def readable_json(value: Any, level: int = 0) -> str:
    """JSON with dicts, and lists of containers, one item per line (indented by one space a level);
    lists of plain values on one line: a matrix's entries, a run's host names (a line per value
    made a 1,024-rank matrix a million lines, written by Python's slow indenting encoder). A numpy
    array of numbers is such a list. NaN and infinity are written as null."""
    return "".join(json_pieces(value, level))


class LaidOut(str):
    """A value's text as json_pieces lays it out at its level, made once: written as it is."""


def json_pieces(value: Any, level: int = 0) -> Iterator[str]:
    """readable_json's text in pieces, each value's apart, so that no large value is ever one string: a
    numpy array is written ARRAY_CHUNK values at a time (a full fabric pass's matrices hold a million
    entries each, and as Python lists and one text took hundreds of MB of rank 0's memory)."""
    if isinstance(value, LaidOut):
        yield value
        return
    if isinstance(value, np.ndarray):
        yield "["
        for start in range(0, len(value), ARRAY_CHUNK):
            yield (", " if start else "") + _one_line(value[start:start + ARRAY_CHUNK].tolist())[1:-1]
        yield "]"
        return
    # a list is laid out by its first item: a matrix's rows are alike (looking at every value took seconds)
    nested = isinstance(value, list) and value and isinstance(value[0], dict | list)
    if not (isinstance(value, dict) and value or nested):
        yield _one_line(value)
        return
    pad = "\n" + " " * (level + 1)
    keyed = isinstance(value, dict)
    yield "{" if keyed else "["
    for index, (key, item) in enumerate(value.items() if keyed else enumerate(value)):
        yield ("," if index else "") + pad + (f"{json.dumps(str(key))}: " if keyed else "")
        yield from json_pieces(item, level + 1)
    yield "\n" + " " * level + ("}" if keyed else "]")


def write_json_atomic(path: Path, payload: Any) -> None:
    write_text_atomic(path, readable_json(payload))


def row_json(row: Row) -> str:
    """A row's JSON object on one line (NaN and infinity as null)."""
    values = {field.name: getattr(row, field.name) for field in fields(row)}  # no deep copy of the lists
    return _one_line(values)


def _one_line(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(clean_for_json(value))


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` and a newline, in UTF-8, as ``write_atomic`` writes."""
    write_atomic(path, (text + "\n").encode("utf-8"))


def write_atomic(path: Path, data: bytes | Callable[[IO[bytes]], object]) -> None:
    """Replace what ``path`` holds with ``data`` (or what ``data(file)`` writes into the file, a piece at
    a time) so that no reader sees half of it: a temporary file beside it, synced, renamed over it. The
    file keeps its mode (its owner too, for root); a new one has 0666 less the umask, as any program's. A
    path that is a symlink to a file replaces that file and keeps the link. A character device
    (/dev/null) or a FIFO is written through, never replaced; another special file (a socket, a block
    device) is a UsageError (writers/paths.check_file finds it before any work)."""
    write = data if callable(data) else lambda out: out.write(data)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    found = _stat(target)
    if found is not None and not stat.S_ISREG(found.st_mode):
        with open_output(target, binary=True) as out:
            write(out)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = _temporary_beside(target)
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
            out.flush()
            if found is not None:
                os.fchmod(out.fileno(), stat.S_IMODE(found.st_mode))
                if os.geteuid() == 0 and (found.st_uid, found.st_gid) != (os.getuid(), os.getgid()):
                    os.fchown(out.fileno(), found.st_uid, found.st_gid)
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def open_output(path: Path, binary: bool = False) -> IO:
    """``path`` opened for writing from its start, for a writer that streams (the CSV) or a special
    file written through. A FIFO is opened without waiting: with no process reading it, a UsageError
    says so instead of the command waiting forever; a socket or a block device is a UsageError too."""
    found = _stat(path)
    if found is not None and stat.S_ISFIFO(found.st_mode):
        try:
            handle = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                raise UsageError(f"{path}: no process reads this FIFO (named pipe): start its reader first, "
                                 "or give a regular file") from None
            raise
        os.set_blocking(handle, True)  # a reader is there: write as a pipe is written, waiting for it
    elif found is not None and not stat.S_ISREG(found.st_mode) and not stat.S_ISCHR(found.st_mode):
        raise UsageError(f"{path} is {file_kind(found.st_mode)}: commbench writes to a regular file, a "
                         "character device (/dev/null) or a FIFO")
    else:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    return os.fdopen(handle, "wb") if binary else os.fdopen(handle, "w", encoding="utf-8", newline="")


def can_sync(handle: int) -> bool:
    """Whether fsync means anything for this open file (a regular one): a character device such as
    /dev/null refuses it (EINVAL), and a pipe has nothing to sync."""
    return stat.S_ISREG(os.fstat(handle).st_mode)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _temporary_beside(path: Path) -> tuple[int, Path]:
    """A new file beside ``path``, created with 0666 so the umask applies (mkstemp makes 0600)."""
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), temporary
        except FileExistsError:
            continue


class NoRoom(RunError):
    """A result file could not grow: the files keep the rows measured before, and say the same."""


class ResultWriter:
    """Writes a run's CSV and JSON as rows arrive."""

    def __init__(self, meta: RunMeta, csv_path: Path, json_path: Path) -> None:
        self.meta = meta
        self.csv_path = csv_path
        self.json_path = json_path
        self.row_count = 0
        self.fits: list[dict[str, Any]] = []
        self.sections: dict[str, Any] = {}  # named parts beside the rows (fabric's matrices, suspects)
        self._laid_out: dict[str, Any] = {}  # top-level key -> its value as written: LaidOut when short
        self._deferred: bool | None = None  # in one_rewrite(): whether a rewrite is due at its end
        self._json_due = 0.0  # time.monotonic() after which a new row rewrites the JSON
        json_path.parent.mkdir(parents=True, exist_ok=True)
        # each row's (each block's) JSON text, made once, joined by ",\n"; unnamed once on disk, beside the
        # JSON when that is a regular file (not in /dev for /dev/null)
        found = _stat(json_path)
        spool_dir = json_path.parent if found is None or stat.S_ISREG(found.st_mode) else None
        self._texts = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, dir=spool_dir)
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._csv_file = open_output(csv_path)  # held open for the run
        self._csv_syncs = can_sync(self._csv_file.fileno())
        self._csv = csv.writer(self._csv_file)
        target = csv_path
        try:
            self._csv.writerow(CSV_COLUMNS)
            self._csv_file.flush()
            self._csv_end = self._csv_in_json = self._csv_position()  # the rows' end; the JSON's rows' end
            target = json_path
            self._write_json()
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            raise NoRoom(f"rank 0 could not write {target}: {exc.strerror} ({NO_ROOM[exc.errno]})") from None

    def add(self, row: Row) -> None:
        self._add([["" if (value := getattr(row, name)) is None else value for name in CSV_COLUMNS]],
                  row_json(row), 1)

    def add_block(self, block: RowBlock) -> None:
        """Rows measured together: one line of columns in the JSON, each row's CSV line, one sync."""
        if len(block):
            self._add(zip(*block.columns(CSV_COLUMNS, none=""), strict=True), _one_line(block.saved()),
                      len(block))

    def _add(self, lines: Iterable[Iterable[Any]], text: str, count: int) -> None:
        """Rows' CSV lines, then their JSON text (a row's, a block's): one sync, and the JSON when it is
        due. NoRoom when a file cannot grow: the rows are taken back out of the CSV and the spool."""
        kept, spooled, target = self.row_count, self._texts.tell(), self.csv_path
        try:
            self._csv.writerows(lines)
            self._csv_file.flush()
            if self._csv_syncs:
                os.fsync(self._csv_file.fileno())
            self._texts.write(((",\n" if kept else "") + text).encode())
            self.row_count += count
            if self.row_count <= JSON_EVERY_ROW_UP_TO or time.monotonic() >= self._json_due:
                target = self.json_path
                self._write_json()
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            self.row_count = kept
            self._texts.seek(spooled)
            self._texts.truncate()
            self._cut_csv(self._csv_end)
            raise NoRoom(f"rank 0 could not write {target}: {exc.strerror} ({NO_ROOM[exc.errno]}); the files "
                         f"keep the {kept} rows measured before") from None
        self._csv_end = self._csv_position()

    def _csv_position(self) -> int:
        """Where the CSV's rows end: 0 for a device or a FIFO, which have no position and nothing to cut."""
        return self._csv_file.tell() if self._csv_syncs else 0

    def _cut_csv(self, offset: int) -> None:
        """The CSV cut back to ``offset`` bytes (a whole number of rows) and reopened to append."""
        if not self._csv_syncs:  # a device or a FIFO: nothing to cut
            return
        try:
            self._csv_file.close()
        except OSError:  # its buffer could not be written: what it held is cut off anyway
            pass
        os.truncate(self.csv_path, offset)
        self._csv_file = open(self.csv_path, "a", newline="")  # noqa: SIM115 - held open for the run
        self._csv = csv.writer(self._csv_file)

    def add_fits(self, fits: list[dict[str, Any]]) -> None:
        """The α-β fits of a group of rows that just finished."""
        self.fits.extend(fits)
        self._laid_out.pop("fits", None)
        self._write_json()

    def set_section(self, name: str, payload: dict[str, Any]) -> None:
        """Write ``payload`` as the top-level key ``name`` of the JSON, replacing an earlier one."""
        self.sections[name] = payload
        self._laid_out.pop(name, None)
        self._write_json()

    @contextmanager
    def one_rewrite(self) -> Iterator[None]:
        """The fits and sections set inside, written by one rewrite of the JSON at the end (none when
        nothing was set, or when the block raised: the rows are on disk already)."""
        self._deferred = False
        try:
            yield
            due = self._deferred
        finally:
            self._deferred = None
        if due:
            self._write_json()

    def _beside_rows(self, key: str, value: Any) -> Any:
        """``value`` (the top-level ``key``'s) as the rewrite writes it: its LaidOut text, made on the
        first rewrite after it was set, while that text is at most LAID_OUT_UP_TO long."""
        if key not in self._laid_out:
            pieces, length = [], 0
            for piece in json_pieces(value, 1):
                pieces.append(piece)
                length += len(piece)
                if length > LAID_OUT_UP_TO:
                    self._laid_out[key] = value
                    break
            else:
                self._laid_out[key] = LaidOut("".join(pieces))
        return self._laid_out[key]

    def finish(self, status: str, finished_at: str, error: str | None = None) -> None:
        """Record how the run ended. When there is no room even for that, the JSON keeps its last rows
        (and status) and the CSV is cut to the same rows."""
        self.meta.status = status
        self.meta.finished_at = finished_at
        self.meta.error = error
        try:
            self._write_json()
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            self._cut_csv(self._csv_in_json)
        self._csv_file.close()
        self._texts.close()

    def _write_json(self) -> None:
        if self._deferred is not None:
            self._deferred = True
            return
        started = time.monotonic()
        meta = {field.name: getattr(self.meta, field.name) for field in fields(self.meta)}  # no deep copy
        beside = {"fits": self.fits, **self.sections}
        payload = {"schema": SCHEMA_VERSION, "meta": meta, "rows": None,
                   **{key: self._beside_rows(key, value) for key, value in beside.items()}}
        write_results(self.json_path, payload, self.row_count, self._copy_rows)
        if not self._csv_file.closed:
            self._csv_in_json = self._csv_position()
        self._json_due = time.monotonic() + max(JSON_INTERVAL_S, 10 * (time.monotonic() - started))

    def _copy_rows(self, out: IO[bytes]) -> None:
        self._texts.seek(0)
        shutil.copyfileobj(self._texts, out)
        self._texts.seek(0, os.SEEK_END)


def write_results(path: Path, payload: dict[str, Any], row_count: int,
                  write_rows: Callable[[IO[bytes]], object]) -> None:
    """results.json, atomically: ``payload`` laid out readably a piece at a time, its "rows" (where the
    key stands) a list of ``row_count`` entries, one per line, that ``write_rows`` writes."""
    marker = json.dumps(f"rows written here {id(payload)}")  # a string no part of the payload holds
    laid_out = {**payload, "rows": json.loads(marker)}

    def write(out: IO[bytes]) -> None:
        for piece in json_pieces(laid_out):
            if piece != marker:
                out.write(piece.encode())
            elif row_count:
                out.write(b"[\n")
                write_rows(out)
                out.write(b"\n]")
            else:
                out.write(b"[]")
        out.write(b"\n")

    write_atomic(path, write)


def finish_abandoned(json_path: Path, csv_path: Path, status: str, finished_at: str, error: str) -> bool:
    """Record how a run ended when its rank 0 could not: results.json's status, end time and error, and
    the rows of the CSV (synced per row) that the JSON's last rewrite did not hold yet. False when there
    is nothing to settle: rank 0 recorded the end itself, or wrote no results.json. A CSV line cut short
    by the death, and any after it, are left out of the JSON, and a rewrite it cut short leaves no
    temporary file behind."""
    for temporary in json_path.parent.glob(f".{glob.escape(json_path.name)}.{'?' * 8}.tmp"):
        temporary.unlink(missing_ok=True)  # write_atomic's (_temporary_beside's 8 letters), its writer gone
    try:
        payload = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return False
    meta = payload.get("meta") if isinstance(payload, dict) else None
    rows = payload.get("rows") if isinstance(payload, dict) else None
    if not isinstance(meta, dict) or meta.get("status") != "running" or not isinstance(rows, list):
        return False
    row_texts = [json.dumps(row) for row in rows]
    # a block of rows measured together stands for block_of rows of the CSV
    held = sum(row["block_of"] if isinstance(row, dict) and isinstance(row.get("block_of"), int) else 1
               for row in rows)
    try:
        with open(csv_path, newline="") as handle:
            lines = list(csv.DictReader(handle))
    except (OSError, csv.Error):
        lines = []
    for line in lines[held:]:
        try:
            row_texts.append(row_json(row_from_saved(line, from_text=True)))
        except (ValueError, KeyError, TypeError):
            break
    meta.update(status=status, finished_at=finished_at, error=error)
    write_results(json_path, payload, len(row_texts), lambda out: out.write(",\n".join(row_texts).encode()))
    return True
