"""How a run writes its files as rows arrive (reading them back: results/saved.py).

Rows are written as measured: the CSV synced per row (per block of rows measured together, such as a
fabric round's), the JSON rewritten atomically (temporary file, fsync, rename) per row up to
JSON_EVERY_ROW_UP_TO rows, then at most every JSON_INTERVAL_S, and for fits, sections and the end. A
stopped run keeps every row it finished; no reader sees a half-written JSON. Each row's JSON text is made
once, when it arrives, one row per line, and a block of rows measured together is one line of its
columns (results.columns.RowBlock.saved: a fabric round's 2N rows share all but a few fields). The texts
wait in a spool that moves from memory to an unnamed temporary file past SPOOL_IN_MEMORY bytes, and a
rewrite copies them into the new JSON, which it writes a piece at a time (json_pieces): the writer holds
no rows and makes no text of the whole file, so a full fabric pass's two million rows cost rank 0 no
memory here (re-encoding every row each time cost seconds per size at thousands of ranks).
"""

import csv
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import IO, Any

import numpy as np

from commbench.results.columns import RowBlock
from commbench.results.model import CSV_COLUMNS, Row, RunMeta

SCHEMA_VERSION = 2  # 2: rows measured together as blocks of columns; fabric's matrices as measured pairs
SPOOL_IN_MEMORY = 16 * 2**20  # bytes of row texts kept in memory before the spool moves to a file
ARRAY_CHUNK = 2**16  # values of a numpy array turned into text at a time
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


def json_pieces(value: Any, level: int = 0) -> Iterator[str]:
    """readable_json's text in pieces, each value's apart, so that no large value is ever one string: a
    numpy array is written ARRAY_CHUNK values at a time (a full fabric pass's matrices hold a million
    entries each, and as Python lists and one text took hundreds of MB of rank 0's memory)."""
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
    write_atomic(path, lambda out: out.write(text.encode()))


def write_atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """``write(file)`` into a temporary file beside ``path``, then a newline, fsync, and the rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
            out.write(b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class ResultWriter:
    """Writes a run's CSV and JSON as rows arrive."""

    def __init__(self, meta: RunMeta, csv_path: Path, json_path: Path) -> None:
        self.meta = meta
        self.csv_path = csv_path
        self.json_path = json_path
        self.row_count = 0
        self.fits: list[dict[str, Any]] = []
        self.sections: dict[str, Any] = {}  # named parts beside the rows (fabric's matrices, suspects)
        self._json_due = 0.0  # time.monotonic() after which a new row rewrites the JSON
        json_path.parent.mkdir(parents=True, exist_ok=True)
        # each row's (each block's) JSON text, made once, joined by ",\n"; unnamed once on disk
        self._texts = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, dir=json_path.parent)
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._csv_file = open(csv_path, "w", newline="")  # noqa: SIM115 - held open for the run
        self._csv = csv.writer(self._csv_file)
        self._csv.writerow(CSV_COLUMNS)
        self._csv_file.flush()
        self._write_json()

    def add(self, row: Row) -> None:
        self._csv.writerow(["" if (value := getattr(row, name)) is None else value for name in CSV_COLUMNS])
        self._add(row_json(row), 1)

    def add_block(self, block: RowBlock) -> None:
        """Rows measured together: one line of columns in the JSON, each row's CSV line, one sync."""
        if not len(block):
            return
        self._csv.writerows(zip(*block.columns(CSV_COLUMNS, none=""), strict=True))
        self._add(_one_line(block.saved()), len(block))

    def _add(self, text: str, count: int) -> None:
        """A row's (a block's) JSON text, after its CSV lines: one sync, and the JSON when it is due."""
        self._texts.write(((",\n" if self.row_count else "") + text).encode())
        self.row_count += count
        self._csv_file.flush()
        os.fsync(self._csv_file.fileno())
        if self.row_count <= JSON_EVERY_ROW_UP_TO or time.monotonic() >= self._json_due:
            self._write_json()

    def add_fits(self, fits: list[dict[str, Any]]) -> None:
        """The α-β fits of a group of rows that just finished."""
        self.fits.extend(fits)
        self._write_json()

    def set_section(self, name: str, payload: dict[str, Any]) -> None:
        """Write ``payload`` as the top-level key ``name`` of the JSON, replacing an earlier one."""
        self.sections[name] = payload
        self._write_json()

    def finish(self, status: str, finished_at: str, error: str | None = None) -> None:
        self.meta.status = status
        self.meta.finished_at = finished_at
        self.meta.error = error
        self._write_json()
        self._csv_file.close()
        self._texts.close()

    def _write_json(self) -> None:
        started = time.monotonic()
        marker = json.dumps(f"rows written here {id(self)}")  # a string no part of the payload holds
        meta = {field.name: getattr(self.meta, field.name) for field in fields(self.meta)}  # no deep copy
        payload = {"schema": SCHEMA_VERSION, "meta": meta, "rows": json.loads(marker), "fits": self.fits,
                   **self.sections}

        def write(out: IO[bytes]) -> None:
            for piece in json_pieces(payload):
                if piece != marker:
                    out.write(piece.encode())
                elif self.row_count:
                    out.write(b"[\n")
                    self._texts.seek(0)
                    shutil.copyfileobj(self._texts, out)
                    self._texts.seek(0, os.SEEK_END)
                    out.write(b"\n]")
                else:
                    out.write(b"[]")

        write_atomic(self.json_path, write)
        self._json_due = time.monotonic() + max(JSON_INTERVAL_S, 10 * (time.monotonic() - started))
