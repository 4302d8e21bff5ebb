"""Reading saved runs back: results.json and results.csv from any commbench version, checked as untrusted
input (every value's type from Row's annotations; a foreign or broken file is one line naming it).

A row field a file lacks takes Row's default (older files); a field Row does not know (newer files) is
dropped. The commands on saved files (compare, plot, report) and ``commbench.load`` read through here.
"""

import csv
import glob
import json
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import NoneType
from typing import Any, get_args, get_origin

from commbench.errors import UsageError
from commbench.results.model import Row


@dataclass
class SavedRun:
    meta: dict[str, Any]
    rows: list[Row]
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


# A row field's scalar type and whether it may be None, from Row's annotations: how a CSV cell is parsed
# and what a JSON value must be. Fields a file lacks take Row's defaults (older files); fields Row does
# not know (newer files) are dropped.
ROW_KINDS = {item.name: ((next(arg for arg in get_args(item.type) if arg is not NoneType), True)
                         if NoneType in get_args(item.type) else (get_origin(item.type) or item.type, False))
             for item in fields(Row)}
REQUIRED_FIELDS = [item.name for item in fields(Row)
                   if item.default is MISSING and item.default_factory is MISSING]


def _json_value(name: str, value: Any) -> Any:
    kind, optional = ROW_KINDS[name]
    if value is None and optional:
        return None
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is list and isinstance(value, list) and all(
            item is None or (isinstance(item, int | float) and not isinstance(item, bool)) for item in value):
        return value
    if kind in (int, str) and type(value) is kind:
        return value
    raise ValueError(f"{name} is {value!r}, not {kind.__name__}")


def _csv_value(name: str, text: str) -> Any:
    kind, optional = ROW_KINDS[name]
    if kind is str:
        return text
    if text == "" and optional:
        return None
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{name} is {text!r}, not {kind.__name__}") from None


def row_from_saved(saved: dict[str, Any], from_text: bool = False) -> Row:
    """A Row from one saved row (a JSON object, or a CSV line's text cells), its values checked."""
    missing = [name for name in REQUIRED_FIELDS if name not in saved]
    if missing:
        raise KeyError(f"a row lacks {', '.join(missing)}")
    convert = _csv_value if from_text else _json_value
    return Row(**{name: convert(name, value) for name, value in saved.items() if name in ROW_KINDS})


# The metadata readers use, with the type each must have when present (RunMeta writes them all).
META_KINDS = {"run_id": str, "started_at": str, "status": str, "backend": str, "device": str,
              "world_size": int, "launcher": str, "hostnames": list, "versions": dict, "command": list,
              "commbench_version": str, "torch_version": str, "python_version": str, "env": dict}


def _read_json(path: Path) -> SavedRun:
    payload = json.loads(path.read_text())
    if not isinstance(payload, dict) or not isinstance(payload.get("meta", {}), dict):
        raise TypeError("not an object with meta and rows")
    for name, kind in META_KINDS.items():
        value = payload.get("meta", {}).get(name)
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"meta {name} is {value!r}, not {kind.__name__}")
    rows = [row_from_saved(raw) for raw in payload["rows"]]
    return SavedRun(meta=payload.get("meta", {}), rows=rows, path=path,
                    fits=[dict(fit) for fit in payload.get("fits", [])])


def _read_csv(path: Path) -> SavedRun:
    with open(path, newline="") as handle:
        rows = [row_from_saved(line, from_text=True) for line in csv.DictReader(handle)]
    meta: dict[str, Any] = {}
    beside = path.with_suffix(".json")  # the metadata of `X.csv` is in the `X.json` written with it
    try:
        meta = _read_json(beside).meta if beside.is_file() else {}
    except (OSError, ValueError, KeyError, TypeError):
        meta = {}  # the rows are what was asked for; a damaged JSON beside them only costs the metadata
    if not meta and rows:
        meta = {"backend": rows[0].backend, "device": rows[0].device, "world_size": rows[0].world_size}
    return SavedRun(meta=meta, rows=rows, path=path)


def run_file(directory: Path) -> Path:
    """The results.json a directory stands for: its own (a run directory), or that of the one run
    directory under it (an --output-dir that holds one run). UsageError when it holds none or several."""
    own = directory / "results.json"
    if own.exists():
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
    if path.is_dir():
        path = run_file(path)
    kind = "results.csv" if path.suffix.lower() == ".csv" else "results.json"
    try:
        return _read_csv(path) if kind == "results.csv" else _read_json(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such results file") from None
    except KeyError as exc:  # a field every commbench file has: said as what is missing, not as a KeyError
        raise UsageError(f"{path}: not a commbench {kind} (it has no {exc.args[0]!r} field)") from None
    except (OSError, ValueError, TypeError, csv.Error) as exc:
        raise UsageError(f"{path}: not a commbench {kind} ({type(exc).__name__}: {exc})") from None


def expand_paths(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Files to read, in the order given: a path as it is, a glob as the paths it matches (sorted; one
    that matches nothing is a UsageError), each path once."""
    given = [paths] if isinstance(paths, str | Path) else list(paths)
    if not given:
        raise UsageError("no results files given")
    found: list[Path] = []
    for item in given:
        text = str(item)
        if Path(text).exists() or not any(character in text for character in "*?["):
            found.append(Path(text))
            continue
        matches = sorted(glob.glob(text, recursive=True))
        if not matches:
            raise UsageError(f"{text}: no file matches this pattern")
        found.extend(Path(match) for match in matches)
    return list(dict.fromkeys(found))


def load_runs(paths: str | Path | Iterable[str | Path]) -> list[SavedRun]:
    """Every run the paths name (see expand_paths), each file read and checked before any is used."""
    return [load_run(path) for path in expand_paths(paths)]
