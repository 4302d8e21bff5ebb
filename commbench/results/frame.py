"""Saved runs as pandas DataFrames, the analysis layer: commbench.load returns runs_frame's frame
(docs/python-api.md).

Invariants: one DataFrame row per saved Row, in the order the files were given and then the order the
rows were written; the columns are every Row field (ROW_COLUMNS), typed from Row's annotations (a
missing optional number is NaN, a missing optional count <NA>, the per-sample and per-rank lists are
object columns of Python lists), then the run's metadata (RUN_COLUMNS), then how the row's measurement
varied over its run's passes (PASS_COLUMNS: the passes of its key in its run, and their spread in
percent, results/passes.py). Files of older versions load with Row's defaults (saved.load_run).
compare, plot, report and the α-β fit group and join these frames; nothing here imports torch.
"""

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from commbench.results.columns import Columnar
from commbench.results.model import Row
from commbench.results.passes import pass_spread_pct
from commbench.results.saved import ROW_KINDS, SavedRun

ROW_COLUMNS = list(ROW_KINDS)
# Row fields by kind: pandas' own dtypes for the scalars; lists stay Python lists (object).
ROW_DTYPES = {name: {int: "Int64" if optional else "int64", float: "float64", str: str}[kind]
              for name, (kind, optional) in ROW_KINDS.items() if kind is not list}
RUN_COLUMNS = ["run_id", "path", "status", "started_at", "hosts", "host_count", "launcher",
               "commbench_version", "torch_version", "python_version", "nccl_version", "cuda_version"]
RUN_DTYPES = {**dict.fromkeys(RUN_COLUMNS, "object"), "host_count": "Int64"}
PASS_COLUMNS = ["passes", "pass_spread_pct"]


def rows_frame(rows: Iterable[Row]) -> pd.DataFrame:
    """Rows as a frame with the Row columns only (one run's, or rows still being measured); rows kept
    as columns (a file's blocks) column by column, without a Row per row."""
    if isinstance(rows, Columnar):
        return pd.DataFrame({name: _frame_column(rows, name) for name in ROW_COLUMNS}).astype(ROW_DTYPES)
    rows = list(rows)
    return pd.DataFrame({name: _records_column([getattr(row, name) for row in rows], name)
                         for name in ROW_COLUMNS}, columns=ROW_COLUMNS).astype(ROW_DTYPES)


def _records_column(values: list, name: str) -> list | pd.arrays.IntegerArray:
    """One field over Row objects: a whole number that may be None straight into pandas' nullable
    integers (through float64 it lost exactness past 2^53 and warned at each None)."""
    if ROW_DTYPES.get(name) == "Int64":
        return pd.array(values, dtype="Int64")
    return values


def _frame_column(rows: Columnar, name: str) -> np.ndarray | pd.arrays.IntegerArray | list:
    """One field over ``rows`` as rows_frame's records would give it: a whole number exactly (float64
    only while every one is within 2^53), a list its row's own."""
    kind, _ = ROW_KINDS[name]
    found = rows.values(name)
    if kind is list:
        return [list(value) for value in found.tolist()]
    if kind is int and found.dtype == np.float64:  # NaN for None: pandas' nullable integers
        if np.nanmax(np.abs(found), initial=0.0) > 2.0**53:  # past float64's whole numbers: the rows' own
            return _records_column([getattr(row, name) for row in rows], name)
        missing = np.isnan(found)
        return pd.arrays.IntegerArray(np.where(missing, 0.0, found).astype(np.int64), missing)
    return found


def run_values(run: SavedRun) -> dict[str, Any]:
    """The run columns of one saved run; None where its file does not say (a CSV without its JSON)."""
    meta = run.meta
    hosts = sorted(set(meta.get("hostnames") or []))
    versions = meta.get("versions") or {}
    return {"run_id": meta.get("run_id"), "path": str(run.path), "status": meta.get("status"),
            "started_at": meta.get("started_at"), "hosts": ",".join(hosts) if hosts else None,
            "host_count": len(hosts) if hosts else None, "launcher": meta.get("launcher"),
            "commbench_version": meta.get("commbench_version"), "torch_version": meta.get("torch_version"),
            "python_version": meta.get("python_version"), "nccl_version": versions.get("nccl"),
            "cuda_version": versions.get("cuda")}


def pass_values(rows: Iterable[Row]) -> tuple[list[int | None], list[float | None]]:
    """Per row: how many passes its run measured of its key, and their spread (None for a row without
    a time, and the spread for a key measured once). The rows are read once and none is held (a file's
    blocks make each row as it is read): the key of each timed one, and each key's p50s."""
    keys: list[tuple | None] = []
    p50s: dict[tuple, list[float]] = {}
    for row in rows:
        timed = row.time_us_p50 is not None and not row.error  # as passes_by_key counts a pass
        keys.append(row.key() if timed else None)
        if timed:
            p50s.setdefault(keys[-1], []).append(row.time_us_p50)
    found = {key: (len(values), pass_spread_pct(values)) for key, values in p50s.items()}
    values = [found[key] if key is not None else (None, None) for key in keys]
    return [count for count, _ in values], [spread for _, spread in values]


def runs_frame(runs: Iterable[SavedRun]) -> pd.DataFrame:
    """Saved runs' rows, each with its run's columns, as one frame."""
    parts = []
    for run in runs:
        frame = rows_frame(run.rows)
        for name, value in run_values(run).items():
            frame[name] = pd.Series([value] * len(frame), index=frame.index, dtype=RUN_DTYPES[name])
        passes, spreads = pass_values(run.rows)
        frame["passes"] = pd.Series(passes, index=frame.index, dtype="Int64")
        frame["pass_spread_pct"] = pd.Series(spreads, index=frame.index, dtype="float64")
        parts.append(frame)
    if not parts:
        return pd.DataFrame(columns=ROW_COLUMNS + RUN_COLUMNS + PASS_COLUMNS)
    frame = pd.concat(parts, ignore_index=True)
    for name in ("started_at", "measured_from", "measured_to"):  # the run's start; a sweep row's (or '')
        frame[name] = pd.to_datetime(frame[name], utc=True, errors="coerce", format="ISO8601")
    return frame


def native(value: Any) -> Any:
    """A frame cell as the Python value a Row would hold: NaN and <NA> as None, numpy scalars unboxed."""
    if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value
