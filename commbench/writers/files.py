"""How a run writes its files as rows arrive (reading them back: results/saved.py).

Rows are written as measured: the CSV synced per row, the JSON rewritten atomically (temporary file,
fsync, rename) per row up to JSON_EVERY_ROW_UP_TO rows, then at most every JSON_INTERVAL_S, and for fits,
sections and the end. A stopped run keeps every row it finished; no reader sees a half-written JSON.
"""

import csv
import json
import math
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from commbench.results.model import CSV_COLUMNS, Row, RunMeta

SCHEMA_VERSION = 1
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


def write_json_atomic(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(clean_for_json(payload), out, indent=1)
            out.write("\n")
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
        self.rows: list[Row] = []
        self.fits: list[dict[str, Any]] = []
        self.sections: dict[str, Any] = {}  # named parts beside the rows (fabric's matrices, suspects)
        self._row_dicts: list[dict[str, Any]] = []  # each row's JSON form, made once
        self._json_due = 0.0  # time.monotonic() after which a new row rewrites the JSON
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._csv_file = open(csv_path, "w", newline="")  # noqa: SIM115 - held open for the run
        self._csv = csv.DictWriter(self._csv_file, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        self._csv.writeheader()
        self._csv_file.flush()
        self._write_json()

    def add(self, row: Row) -> None:
        self.rows.append(row)
        self._row_dicts.append(values := asdict(row))
        self._csv.writerow({key: "" if value is None else value for key, value in values.items()})
        self._csv_file.flush()
        os.fsync(self._csv_file.fileno())
        if len(self.rows) <= JSON_EVERY_ROW_UP_TO or time.monotonic() >= self._json_due:
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

    def _write_json(self) -> None:
        started = time.monotonic()
        write_json_atomic(self.json_path, {"schema": SCHEMA_VERSION, "meta": asdict(self.meta),
                                           "rows": self._row_dicts, "fits": self.fits, **self.sections})
        self._json_due = time.monotonic() + max(JSON_INTERVAL_S, 10 * (time.monotonic() - started))
