"""Reading saved runs back: results.json and results.csv from any commbench version, checked as untrusted
input (every value's type from Row's annotations; a foreign or broken file is one line naming it).

A row field a file lacks takes Row's default (older files); a field Row does not know (newer files) is
dropped. The commands on saved files (compare, plot, report) and ``commbench.load`` read through here.
"""

import csv
import glob
import io
import math
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import NoneType
from typing import Any, get_args, get_origin

import numpy as np

from commbench.core.untrusted import (
    INT64,
    RESULTS_BYTES,
    decode_text,
    is_directory,
    parse_json,
    present,
    read_bytes,
    shown,
)
from commbench.errors import UsageError
from commbench.results.columns import Column, Lists, Numbers, RowBlock, RowColumns
from commbench.results.model import ROW_KINDS, Row


@dataclass
class SavedRun:
    meta: dict[str, Any]
    rows: list[Row] | RowColumns  # RowColumns when the file holds blocks of rows (_rows)
    path: Path
    fits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return str(self.meta.get("run_id") or self.path)

    def describe(self) -> str:
        """'run ID (gloo, cpu, 2 ranks, host)' for headings."""
        meta = self.meta
        hosts = sorted(set(meta.get("hostnames") or []))
        where = hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts" if hosts else "hosts unknown"
        return (f"{self.label} ({meta.get('backend', '?')}, {meta.get('device', '?')}, "
                f"{meta.get('world_size', '?')} ranks, {where})")


# ROW_KINDS (model.py) says how a CSV cell is parsed and what a JSON value must be. Fields a file lacks
# take Row's defaults (older files); fields Row does not know (newer files) are dropped.
REQUIRED_FIELDS = [item.name for item in fields(Row)
                   if item.default is MISSING and item.default_factory is MISSING]


# The least a row's whole number may be: counts and sizes are never negative, a run has a rank (root
# is -1 for collectives without one). Others may be any whole number below 2^63 in size.
ROW_MINIMUMS = {"world_size": 1, "size_bytes": 0, "requested_bytes": 0, "count_per_rank": 0, "iters": 0,
                "warmup": 0, "samples": 0, "group_size": 0, "group_count": 1, "wrong": 0, "calls_per_step": 0,
                "compute_size": 0, "root": -1, "nccl_channels": 0, "ops": 0, "src_rank": 0, "dst_rank": 0,
                "slowest_rank": 0, "repeat": 0, "impl_setup_bytes": 0}
_NAMES = {int: "a whole number", float: "a finite number", str: "text", list: "a list of numbers"}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _checked_number(name: str, value: int | float) -> int | float:
    """``value`` when it is in range for the field ``name``: finite, and a whole number within its
    bounds; ValueError naming the field and the value otherwise."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} is {shown(value)}, not a finite number")
    if isinstance(value, int) and not ROW_MINIMUMS.get(name, -INT64) <= value < INT64:
        low = ROW_MINIMUMS.get(name, -INT64)
        raise ValueError(f"{name} is {shown(value)}, out of range ({low} to 2^63 - 1)")
    return value


def _json_value(name: str, value: Any) -> Any:
    kind, optional = ROW_KINDS[name]
    if value is None and optional:
        return None
    if kind is float and _is_number(value):
        return float(_checked_number(name, value))
    if kind is int and type(value) is int:
        return _checked_number(name, value)
    if kind is list and isinstance(value, list) and all(item is None or _is_number(item) for item in value):
        for item in value:
            if item is not None:
                _checked_number(name, item)
        return value
    if kind is str and type(value) is str:
        return value
    raise ValueError(f"{name} is {shown(value)}, not {_NAMES.get(kind, kind.__name__)}")


def _csv_value(name: str, text: str) -> Any:
    kind, optional = ROW_KINDS[name]
    if kind is str:
        return text
    if text == "" and optional:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name} is {shown(text)}, not {_NAMES.get(kind, kind.__name__)}") from None
    if kind is float and not math.isfinite(value) and optional:
        return None  # the CSV of a run that had no such value (the JSON beside it says null)
    return _checked_number(name, value)


def row_from_saved(saved: dict[str, Any], from_text: bool = False) -> Row:
    """A Row from one saved row (a JSON object, or a CSV line's text cells), its values checked."""
    missing = [name for name in REQUIRED_FIELDS if name not in saved]
    if missing:
        raise KeyError(f"it lacks {', '.join(missing)}")
    if from_text:  # the lists are the JSON's alone; a cell the line lacks is empty
        return Row(**{name: _csv_value(name, "" if value is None else value) for name, value in saved.items()
                      if name in ROW_KINDS and ROW_KINDS[name][0] is not list})
    return Row(**{name: _json_value(name, value) for name, value in saved.items() if name in ROW_KINDS})


def _rows(raw_rows: Iterable[Any], from_text: bool = False) -> "list[Row] | RowColumns":
    """Every saved row as a Row: a list, or, when a JSON holds blocks of rows measured together, a
    RowColumns that keeps each block as its columns (_block); ValueError naming the first bad row by
    its index."""
    rows: list[Row] = []
    kept: RowColumns | None = None  # from the first block on
    for item in raw_rows:
        done = len(kept) if kept is not None else len(rows)
        try:
            if not from_text and isinstance(item, dict) and "block_of" in item:
                kept = RowColumns(rows) if kept is None else kept
                kept.extend(_block(item))
                continue
            if not isinstance(item, dict):
                raise TypeError(f"it is {shown(item)}, not an object")
            row = row_from_saved(item, from_text)
            (rows if kept is None else kept).append(row)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"row {done}: {exc.args[0] if exc.args else exc}") from None
    return rows if kept is None else kept


def _block(item: dict[str, Any]) -> RowBlock:
    """A block of rows measured together ({"block_of": count, "same": {field: value}, "each": {field: its
    values}}, results/columns.py; docs/results.md), every value checked as a row's own would be: a
    column in each is a list of a value per row, or packed (numbers, text, lists of numbers)."""
    count, same, each = item["block_of"], item.get("same"), item.get("each")
    if type(count) is not int or count < 0 or not isinstance(same, dict) or not isinstance(each, dict) \
            or not each:
        raise TypeError("a block of rows is not {block_of: count, same: {...}, each: {field: [...]}}")
    # A list in same is only ever empty (RowBlock keeps a list there only when every row's is): a full
    # one would be copied into every row, a small file made into a large one.
    for name, value in same.items():
        if isinstance(value, list) and value:
            raise ValueError(f"a block of rows has {shown(name)} {shown(value)} for every row, not []")
    missing = [name for name in REQUIRED_FIELDS if name not in same and name not in each]
    if missing:
        raise KeyError(f"it lacks {', '.join(missing)}")
    columns: dict[str, Any] = {}
    for name, values in each.items():
        if isinstance(values, list):
            if len(values) != count:
                raise ValueError(f"a block of {count} rows has {shown(name)} {shown(values)}, not {count} "
                                 "values")
            if name in ROW_KINDS:
                columns[name] = [_json_value(name, value) for value in values]
        elif not isinstance(values, dict):
            raise ValueError(f"a block of {count} rows has {shown(name)} {shown(values)}, not its values")
        elif name in ROW_KINDS:
            columns[name] = values
    # a column in both is each row's own (as a row's object made of the two would have it)
    known = {name: _json_value(name, value) for name, value in same.items()
             if name in ROW_KINDS and name not in columns}
    block = RowBlock.from_saved(count, known, columns)
    for name, column in block.each.items():
        if not isinstance(columns[name], list):
            _check_packed(name, column)
    return block


def _check_packed(name: str, column: Column) -> None:
    """What _json_value asks of every value, asked of a packed column at once: None only where the
    field allows it, numbers finite and whole ones within the field's bounds."""
    kind, optional = ROW_KINDS[name]
    numbers = column.items if isinstance(column, Lists) else column
    if not isinstance(numbers, Numbers):
        return
    missing = numbers.missing
    if missing is not None and kind is not list and not optional and missing.any():
        raise ValueError(f"{name} is None, not {_NAMES[kind]}")
    present = numbers.data if missing is None else numbers.data[~missing]
    if numbers.floats and not numbers.thousandths and not np.isfinite(present).all():
        raise ValueError(f"{name} is {shown(float(present[~np.isfinite(present)][0]))}, not a finite number")
    if not numbers.floats and len(present) and int(present.min()) < ROW_MINIMUMS.get(name, -INT64):
        _checked_number(name, int(present.min()))


# The metadata readers use, with the type each must have when present (RunMeta writes them all).
META_KINDS = {"run_id": str, "started_at": str, "status": str, "backend": str, "device": str,
              "world_size": int, "launcher": str, "hostnames": list[str], "versions": dict[str, str | None],
              "command": list[str], "commbench_version": str, "torch_version": str, "python_version": str,
              "env": dict[str, str], "config": dict[str, Any], "benchmarks": list[dict[str, Any]],
              "finished_at": str, "error": str, "groups": dict[str, Any],
              "hardware": dict[str, dict[str, Any]], "nccl_log": dict[str, Any],
              "expectations": dict[str, Any], "unavailable": dict[str, str]}


def conforms(value: Any, kind: Any) -> bool:
    """Whether a value from a file is of the annotation ``kind`` (str, int, list[str], dict[str, X],
    a union, Any); a whole number also within 64 bits, a real one finite."""
    origin, args = get_origin(kind), get_args(kind)
    if kind is Any:
        return True
    if origin is list:
        return isinstance(value, list) and all(conforms(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(key, str) and conforms(item, args[1])
                                               for key, item in value.items())
    if args:  # a union
        return any(conforms(value, arg) for arg in args)
    if kind is NoneType:
        return value is None
    if kind is int:
        return type(value) is int and -INT64 <= value < INT64
    if kind is float:
        return _is_number(value) and math.isfinite(value)
    return isinstance(value, kind)


def _read_json(path: Path) -> SavedRun:
    payload = parse_json(read_bytes(path, "results file", RESULTS_BYTES), path, "commbench results.json")
    if not isinstance(payload, dict) or not isinstance(payload.get("meta", {}), dict):
        raise TypeError("not an object with meta and rows")
    meta = payload.get("meta", {})
    for name, kind in META_KINDS.items():
        value = meta.get(name)
        if value is not None and not conforms(value, kind):
            raise TypeError(f"meta {name} is {shown(value)}, not {_kind_name(kind)}")
    if "rows" not in payload:
        raise KeyError("rows")
    if not isinstance(payload.get("rows"), list):
        raise TypeError(f"rows is {shown(payload.get('rows'))}, not a list of rows")
    fits = payload.get("fits", [])
    if not conforms(fits, list[dict[str, Any]]):
        raise TypeError(f"fits is {shown(fits)}, not a list of objects")
    return SavedRun(meta=meta, rows=_rows(payload["rows"]), path=path, fits=[dict(fit) for fit in fits])


def _kind_name(kind: Any) -> str:
    return getattr(kind, "__name__", None) if get_origin(kind) is None else str(kind).replace("typing.", "")


def _read_csv(path: Path) -> SavedRun:
    text = decode_text(read_bytes(path, "results file", RESULTS_BYTES), path, "results file")
    rows = _rows(csv.DictReader(io.StringIO(text, newline="")), from_text=True)
    meta: dict[str, Any] = {}
    beside = path.with_suffix(".json")  # the metadata of `X.csv` is in the `X.json` written with it
    try:
        meta = _read_json(beside).meta if present(beside) else {}
    except (OSError, ValueError, KeyError, TypeError, UsageError):
        meta = {}  # the rows are what was asked for; a damaged JSON beside them only costs the metadata
    if not meta and rows:
        meta = {"backend": rows[0].backend, "device": rows[0].device, "world_size": rows[0].world_size}
    return SavedRun(meta=meta, rows=rows, path=path)


def run_file(directory: Path) -> Path:
    """The results.json a directory stands for: its own (a run directory), or that of the one run
    directory under it (an --output-dir that holds one run). UsageError when it holds none or several."""
    own = directory / "results.json"
    if present(own):
        return own
    found = sorted(directory.glob("*/results.json"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise UsageError(f"{directory}: no results.json in it or in a run directory under it")
    names = ", ".join(path.parent.name for path in found[:3]) + (", ..." if len(found) > 3 else "")
    raise UsageError(f"{directory} holds {len(found)} runs ({names}): name one, or give the glob "
                     f"'{directory / '*' / 'results.json'}' for all of them")


def load_run(path: str | Path) -> SavedRun:
    """Read one run saved by commbench (any version, any machine): a results.json, a results.csv (rows
    only; the metadata comes from the JSON of the same name beside it, if any), a run directory, or an
    output directory holding one run directory."""
    path = Path(path)
    if is_directory(path):
        path = run_file(path)
    kind = "results.csv" if path.suffix.lower() == ".csv" else "results.json"
    try:
        return _read_csv(path) if kind == "results.csv" else _read_json(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such results file") from None
    except KeyError as exc:  # a field every commbench file has: said as what is missing, not as a KeyError
        raise UsageError(f"{path}: not a commbench {kind} (it has no {exc.args[0]!r} field)") from None
    except (OSError, ValueError, TypeError, csv.Error) as exc:
        raise UsageError(f"{path}: not a commbench {kind} ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    """What was wrong, in one short line ('row 3: time_us_p50 is inf, not a finite number')."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def expand_paths(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Files to read, in the order given: a path as it is, a glob as the paths it matches (sorted; one
    that matches nothing is a UsageError), each path once."""
    given = [paths] if isinstance(paths, str | Path) else list(paths)
    if not given:
        raise UsageError("no results files given")
    found: list[Path] = []
    for item in given:
        text = str(item)
        if present(Path(text)) or not any(character in text for character in "*?["):
            found.append(Path(text))
            continue
        matches = sorted(glob.glob(text, recursive=True))
        if not matches:
            raise UsageError(f"{text}: no file matches this pattern")
        found.extend(Path(match) for match in matches)
    return list(dict.fromkeys(found))


def files_read(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Every file that reading ``paths`` would open: each results file (a directory's results.json),
    and the JSON beside a CSV (its metadata). What a command writes must be none of them."""
    found: list[Path] = []
    for path in expand_paths(paths):
        try:
            path = run_file(path) if is_directory(path) else path
        except UsageError:
            continue  # reading it says why
        found.append(path)
        if path.suffix.lower() == ".csv" and present(path.with_suffix(".json")):
            found.append(path.with_suffix(".json"))
    return found


def load_runs(paths: str | Path | Iterable[str | Path]) -> list[SavedRun]:
    """Every run the paths name (see expand_paths), each file read and checked before any is used."""
    return [load_run(path) for path in expand_paths(paths)]
