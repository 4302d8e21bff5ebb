"""How a run writes its files as rows arrive (reading them back: results/saved.py).

Rows are written as measured: the CSV synced per row (per batch of rows measured together, such as a
fabric round's), the JSON rewritten atomically (temporary file, fsync, rename) per row up to
JSON_EVERY_ROW_UP_TO rows, then at most every JSON_INTERVAL_S, and for fits, sections and the end. A
stopped run keeps every row it finished; no reader sees a half-written JSON. Each row's JSON text is made
once, when it arrives, one row per line: a rewrite joins the texts (re-encoding every row each time cost
seconds per size at thousands of ranks, whose rows hold a value per rank).

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
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from commbench.errors import RunError
from commbench.results.model import CSV_COLUMNS, Row, RunMeta
from commbench.results.saved import row_from_saved

SCHEMA_VERSION = 1
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
    lists of plain values on one line: a rank matrix's row, a run's host names (a line per value
    made a 1,024-rank matrix a million lines, written by Python's slow indenting encoder). NaN and
    infinity are written as null."""
    # a list is laid out by its first item: a matrix's rows are alike (looking at every value took seconds)
    nested = isinstance(value, list) and value and isinstance(value[0], dict | list)
    if isinstance(value, dict) and value or nested:
        pad = "\n" + " " * (level + 1)
        if isinstance(value, dict):
            items = [f"{json.dumps(str(key))}: {readable_json(item, level + 1)}"
                     for key, item in value.items()]
            opening, closing = "{", "}"
        else:
            items = [readable_json(item, level + 1) for item in value]
            opening, closing = "[", "]"
        return opening + pad + ("," + pad).join(items) + "\n" + " " * level + closing
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:  # NaN or infinity: null (checked here, not by walking every value first)
        return json.dumps(clean_for_json(value))


def write_json_atomic(path: Path, payload: Any) -> None:
    write_text_atomic(path, readable_json(payload))


def row_json(row: Row) -> str:
    """A row's JSON object on one line (NaN and infinity as null)."""
    values = {field.name: getattr(row, field.name) for field in fields(row)}  # no deep copy of the lists
    try:
        return json.dumps(values, allow_nan=False)
    except ValueError:
        return json.dumps(clean_for_json(values))


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class NoRoom(RunError):
    """A result file could not grow: the files keep the rows measured before, and say the same."""


class ResultWriter:
    """Writes a run's CSV and JSON as rows arrive."""

    def __init__(self, meta: RunMeta, csv_path: Path, json_path: Path) -> None:
        self.meta = meta
        self.csv_path = csv_path
        self.json_path = json_path
        self.rows: list[Row] = []
        self.fits: list[dict[str, Any]] = []
        self.sections: dict[str, Any] = {}  # named parts beside the rows (fabric's matrices, suspects)
        self._row_texts: list[str] = []  # each row's JSON text, made once
        self._json_due = 0.0  # time.monotonic() after which a new row rewrites the JSON
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._csv_file = open(csv_path, "w", newline="")  # noqa: SIM115 - held open for the run
        self._csv = csv.writer(self._csv_file)
        target = csv_path
        try:
            self._csv.writerow(CSV_COLUMNS)
            self._csv_file.flush()
            self._csv_end = self._csv_in_json = self._csv_file.tell()  # the rows' end; the JSON's rows' end
            target = json_path
            self._write_json()
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            raise NoRoom(f"rank 0 could not write {target}: {exc.strerror} ({NO_ROOM[exc.errno]})") from None

    def add(self, row: Row) -> None:
        self.add_all([row])

    def add_all(self, rows: list[Row]) -> None:
        """Rows measured together: each CSV line written, then one sync for all of them. NoRoom when a
        file cannot grow: the batch is taken back out of the CSV."""
        kept = len(self.rows)
        target = self.csv_path
        try:
            for row in rows:
                self.rows.append(row)
                self._row_texts.append(row_json(row))
                self._csv.writerow(["" if (value := getattr(row, name)) is None else value
                                    for name in CSV_COLUMNS])
            self._csv_file.flush()
            os.fsync(self._csv_file.fileno())
            if len(self.rows) <= JSON_EVERY_ROW_UP_TO or time.monotonic() >= self._json_due:
                target = self.json_path
                self._write_json()
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            del self.rows[kept:], self._row_texts[kept:]
            self._cut_csv(self._csv_end)
            raise NoRoom(f"rank 0 could not write {target}: {exc.strerror} ({NO_ROOM[exc.errno]}); the files "
                         f"keep the {len(self.rows)} rows measured before") from None
        self._csv_end = self._csv_file.tell()

    def _cut_csv(self, offset: int) -> None:
        """The CSV cut back to ``offset`` bytes (a whole number of rows) and reopened to append."""
        try:
            self._csv_file.close()
        except OSError:  # its buffer could not be written: what it held is cut off anyway
            pass
        try:
            os.truncate(self.csv_path, offset)
        except OSError:  # not a regular file (a device): nothing to cut
            pass
        self._csv_file = open(self.csv_path, "a", newline="")  # noqa: SIM115 - held open for the run
        self._csv = csv.writer(self._csv_file)

    def add_fits(self, fits: list[dict[str, Any]]) -> None:
        """The α-β fits of a group of rows that just finished."""
        self.fits.extend(fits)
        self._write_json()

    def set_section(self, name: str, payload: dict[str, Any]) -> None:
        """Write ``payload`` as the top-level key ``name`` of the JSON, replacing an earlier one."""
        self.sections[name] = payload
        self._write_json()

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

    def _write_json(self) -> None:
        started = time.monotonic()
        meta = {field.name: getattr(self.meta, field.name) for field in fields(self.meta)}  # no deep copy
        payload = {"schema": SCHEMA_VERSION, "meta": meta, "rows": None, "fits": self.fits, **self.sections}
        write_text_atomic(self.json_path, _results_text(payload, self._row_texts))
        if not self._csv_file.closed:
            self._csv_in_json = self._csv_file.tell()
        self._json_due = time.monotonic() + max(JSON_INTERVAL_S, 10 * (time.monotonic() - started))


def _results_text(payload: dict[str, Any], row_texts: list[str]) -> str:
    """results.json's text: ``payload`` laid out readably, its rows one per line from their texts."""
    marker = f"rows written here {id(row_texts)}"  # a string no part of the payload holds
    text = readable_json({**payload, "rows": marker})
    rows = "[\n" + ",\n".join(row_texts) + "\n]" if row_texts else "[]"
    return text.replace(json.dumps(marker), rows, 1)


def finish_abandoned(json_path: Path, csv_path: Path, status: str, finished_at: str, error: str) -> bool:
    """Record how a run ended when its rank 0 could not: results.json's status, end time and error, and
    the rows of the CSV (synced per row) that the JSON's last rewrite did not hold yet. False when there
    is nothing to settle: rank 0 recorded the end itself, or wrote no results.json. A CSV line cut short
    by the death, and any after it, are left out of the JSON, and a rewrite it cut short leaves no
    temporary file behind."""
    for temporary in json_path.parent.glob(f".{glob.escape(json_path.name)}.{'?' * 8}.tmp"):
        temporary.unlink(missing_ok=True)  # write_text_atomic's (mkstemp's 8 letters), its writer gone
    try:
        payload = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return False
    meta = payload.get("meta") if isinstance(payload, dict) else None
    rows = payload.get("rows") if isinstance(payload, dict) else None
    if not isinstance(meta, dict) or meta.get("status") != "running" or not isinstance(rows, list):
        return False
    row_texts = [json.dumps(row) for row in rows]
    try:
        with open(csv_path, newline="") as handle:
            lines = list(csv.DictReader(handle))
    except (OSError, csv.Error):
        lines = []
    for line in lines[len(rows):]:
        try:
            row_texts.append(row_json(row_from_saved(line, from_text=True)))
        except (ValueError, KeyError, TypeError):
            break
    meta.update(status=status, finished_at=finished_at, error=error)
    write_text_atomic(json_path, _results_text(payload, row_texts))
    return True
