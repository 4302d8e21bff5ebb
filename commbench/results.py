"""The result model (rows and run metadata) and its files.

Rows are written as they are measured: the CSV is appended and flushed, the JSON rewritten atomically
(temporary file, fsync, rename), so an interrupted or failed run keeps every row it finished and no
reader ever sees a half-written JSON file.
"""

import csv
import glob
import json
import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from types import NoneType
from typing import Any, get_args, get_origin

from commbench.collectives import REGISTRY  # descriptors only: importing it imports no torch
from commbench.errors import UsageError

SCHEMA_VERSION = 1


@dataclass
class Row:
    """One measured (collective, dtype, op, placement, mode, size) point. Times in microseconds.

    A row whose op the backend rejected (or whose buffers could not be allocated) has ``error`` set and
    no times. ``wrong`` is None unless --check ran: then the wrong elements summed over ranks (and over
    the checked ops of the row), ``first_wrong`` where the first one was.
    """

    collective: str
    backend: str
    device: str
    world_size: int
    dtype: str
    mode: str
    op: str  # reduce op, '' for collectives that do not reduce
    size_bytes: int  # the size actually used (docs/measurement.md#message-sizes)
    requested_bytes: int  # the size asked for, before rounding to whole elements per rank
    count_per_rank: int
    iters: int  # ops timed
    warmup: int
    time_us_p50: float | None
    time_us_p95: float | None
    time_us_min: float | None
    time_us_max: float | None
    time_us_mean: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    busbw_factor: float
    samples: int = 0  # timing samples: one per op in sync mode, one per window in async mode
    time_us_p99: float | None = None
    time_us_stdev: float | None = None
    time_us_cv: float | None = None  # stdev / mean
    ci95_rel: float | None = None  # half-width of the median's 95% CI over the median
    # p50 of the host-observed time per op (docs/measurement.md#what-a-time-is): launch, device and the
    # completion seen; on CPU the same as time_us_p50; empty in files written before it existed
    host_time_us_p50: float | None = None
    # Sub-communicators: the collective ran in group_count groups of group_size ranks at once (files
    # written before groups existed load as one group of the whole world).
    group_size: int = 0
    group_layout: str = "world"  # world, contiguous, strided, intra-node, inter-node
    group_count: int = 1
    # the largest rank's mean arrival skew (docs/measurement.md#per-rank-times-arrival-skew-and-stragglers)
    skew_us_max: float | None = None
    slowest_rank: int | None = None  # the rank its group waited for: the smallest arrival skew
    placement: str = ""  # out-of-place or in-place; '' for barrier (docs/measurement.md#placement)
    wrong: int | None = None  # --check: wrong elements over all ranks; None when not checked
    first_wrong: str = ""  # --check: 'rank R index I: expected E, got G' of the first wrong element
    error: str = ""  # why the row has no measurement (the backend rejected the dtype or op, ...)
    samples_us: list[float] = field(default_factory=list)  # per sample, max over ranks; JSON only
    rank_mean_us: list[float] = field(default_factory=list)  # each rank's own mean; JSON only
    rank_skew_us: list[float] = field(default_factory=list)  # each rank's mean arrival skew; JSON only
    # Workload-pattern rows (commbench pattern ...); empty/None on sweep rows, so older files still load.
    pattern: str = ""  # fsdp, tp, moe, pp, 3d
    variant: str = ""  # what else tells the pattern's runs apart: fsdp2, fsdp1, sp, tp2-pp2-dp1, ...
    parallel: str = ""  # the parallel dimension whose group the row's collectives ran in: tp, pp, dp, ep
    model: str = ""  # the model spec's name ('llama-7b/layers=2' when cut down)
    unit: str = ""  # the FSDP unit; '' for a whole step or the final flush
    phase: str = ""  # forward, backward, flush (per collective); step, comm, compute, comm+compute
    bucket_mb: str = ""  # reduce-scatter bucketing: 'unit' or the bucket size in MiB ('0': per parameter)
    predivide: float | None = None  # gradient division before the reduce-scatter
    postdivide: float | None = None  # and after it
    calls_per_step: int | None = None  # collectives (or matmuls) per step in this row
    overlap_pct: float | None = None  # OSU's Overlap(%) on the comm+compute row
    compute_size: int | None = None  # the overlap matmul's size (size x size); not in key(): 'auto' varies
    imbalance: float | None = None  # moe: tokens on the busiest rank / the mean (1: balanced)
    bubble_pct: float | None = None  # pp: a stage's step time not spent computing, percent
    benchmark: str = ""  # the sweep file's benchmark name; '' for a run from the command line
    root: int = -1  # root rank of a rooted collective, -1 for the others (nccl-tests' convention)
    # Provenance (docs/provenance.md); empty/None where not known, so older files still load.
    nccl_algo: str = ""  # --nccl-debug: NCCL's algorithm for this collective and size (RING, TREE, NVLS, ...)
    nccl_proto: str = ""  # --nccl-debug: its protocol (LL, LL128, SIMPLE)
    nccl_channels: int | None = None  # --nccl-debug: channels used (or the communicator's, see docs)
    nccl_transport: str = ""  # --nccl-debug: P2P/IPC, SHM, NET/IB, NVLS, CollNet, joined with '+'
    peak_gbps: float | None = None  # the peak of the link that bounds this row (the peak rule)
    peak_source: str = ""  # what that peak was computed from
    pct_of_peak: float | None = None  # 100 x busbw / peak_gbps
    expected_gbps: float | None = None  # --expect: the baseline's busbw for this row
    verdict: str = ""  # --expect / --fail-below: PASS, WARN or FAIL; '' when not judged
    # Replay rows (commbench replay; see docs/replay.md); None/empty elsewhere, so older files still load.
    ops: int | None = None  # operations of this row per replayed pass (every operation of a pass row)
    group_name: str = ""  # the recorded group ('1:mesh_dp', '/j' for copy j) or 'p2p SRC->DST'
    group_ranks: str = ""  # the group's ranks in this world, comma separated
    recorded_us: float | None = None  # mean recorded time per operation, where the recording measured it

    def __post_init__(self) -> None:
        if not self.group_size:
            self.group_size = self.world_size

    def key(self) -> tuple:
        """What identifies the same measurement in another run (compare matches rows on it)."""
        return tuple(getattr(self, name) for name in KEY_FIELDS)

    def series(self) -> dict[str, Any]:
        """The key without the size: one line of a plot, one α-β fit."""
        return {name: getattr(self, name) for name in SERIES_FIELDS}

    def qualifiers(self) -> list[str]:
        """The parts of the series beyond collective, dtype, op, mode, world and backend that say
        something for this row (a sub-communicator, a pattern's unit, ...), for titles."""
        found = [] if self.group_layout == "world" else [f"groups of {self.group_size} {self.group_layout}"]
        for name in SERIES_FIELDS[len(BASIC_SERIES_FIELDS):]:
            value = getattr(self, name)
            if name.startswith("group_") or value in ("", None):
                continue
            if name == "placement" and value == default_placement(self.collective):
                continue  # the layout the collective has without --placement says nothing
            found.append(f"{name} {value}")
        return found


def default_placement(collective: str) -> str:
    """The placement a collective runs in without --placement ('' for unknown names: saved files
    may hold collectives or patterns this version does not know)."""
    known = REGISTRY.get(collective)
    return known.default_placement if known is not None else ""


# A new field that tells measurements apart (a placement, ...) goes here; compare, fits and plots follow.
# The benchmark name is not one: a sweep file's run and a command line's run of the same point match.
KEY_FIELDS = ("collective", "dtype", "op", "mode", "size_bytes", "world_size", "backend",
              "group_size", "group_layout", "placement",
              "pattern", "variant", "parallel", "model", "unit", "phase", "bucket_mb", "predivide",
              "postdivide", "group_name")
SERIES_FIELDS = tuple(name for name in KEY_FIELDS if name != "size_bytes")
BASIC_SERIES_FIELDS = SERIES_FIELDS[:6]  # collective, dtype, op, mode, world_size, backend
# Per-sample and per-rank lists live in the JSON only; the CSV has one value per cell.
CSV_COLUMNS = [f.name for f in fields(Row) if getattr(f.type, "__origin__", None) is not list]


@dataclass
class RunMeta:
    run_id: str
    started_at: str
    command: list[str]
    commbench_version: str
    torch_version: str
    python_version: str
    backend: str
    device: str
    world_size: int
    launcher: str
    hostnames: list[str]
    versions: dict[str, str]
    env: dict[str, str]
    config: dict[str, Any]  # the first benchmark's configuration (the only one without a sweep file)
    benchmarks: list[dict[str, Any]] = field(default_factory=list)  # every benchmark's, in run order
    status: str = "running"  # running | complete | failed | interrupted
    finished_at: str | None = None
    error: str | None = None
    groups: dict[str, Any] = field(default_factory=dict)  # layout, size, count, members (GroupPlan)
    hardware: dict[str, Any] = field(default_factory=dict)  # host name -> its hardware (provenance)
    nccl_log: dict[str, Any] = field(default_factory=dict)  # --nccl-debug: files, version, line counts
    expectations: dict[str, Any] = field(default_factory=dict)  # --expect/--fail-below: verdict summary


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
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._csv_file = open(csv_path, "w", newline="")  # noqa: SIM115 - held open for the run
        self._csv = csv.DictWriter(self._csv_file, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        self._csv.writeheader()
        self._csv_file.flush()
        self._write_json()

    def add(self, row: Row) -> None:
        self.rows.append(row)
        values = asdict(row)
        self._csv.writerow({key: "" if value is None else value for key, value in values.items()})
        self._csv_file.flush()
        os.fsync(self._csv_file.fileno())
        self._write_json()

    def add_fits(self, fits: list[dict[str, Any]]) -> None:
        """The α-β fits of a group of rows that just finished."""
        self.fits.extend(fits)
        self._write_json()

    def finish(self, status: str, finished_at: str, error: str | None = None) -> None:
        self.meta.status = status
        self.meta.finished_at = finished_at
        self.meta.error = error
        self._write_json()
        self._csv_file.close()

    def _write_json(self) -> None:
        write_json_atomic(self.json_path, {
            "schema": SCHEMA_VERSION,
            "meta": asdict(self.meta),
            "rows": [asdict(row) for row in self.rows],
            "fits": self.fits,
        })


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


# --- reading saved runs ----------------------------------------------------------------------------
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


def load_run(path: str | Path) -> SavedRun:
    """Read one run saved by commbench (any version, any machine): a results.json, a results.csv (rows
    only; the metadata comes from the JSON of the same name beside it, if any) or a run directory."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    kind = "results.csv" if path.suffix.lower() == ".csv" else "results.json"
    try:
        return _read_csv(path) if kind == "results.csv" else _read_json(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such results file") from None
    except (OSError, ValueError, KeyError, TypeError, csv.Error) as exc:
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
