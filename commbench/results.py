"""The result model (rows and run metadata) and its files.

Rows are written as they are measured: the CSV is appended and flushed, the JSON rewritten atomically
(temporary file, fsync, rename), so an interrupted or failed run keeps every row it finished and no
reader ever sees a half-written JSON file.
"""

import csv
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

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
    pattern: str = ""  # 'fsdp'
    model: str = ""  # the model spec's name ('llama-7b/layers=2' when cut down)
    unit: str = ""  # the FSDP unit; '' for a whole step or the final flush
    phase: str = ""  # forward, backward, flush (per collective); step, comm, compute, comm+compute
    bucket_mb: str = ""  # reduce-scatter bucketing: 'unit' or the bucket size in MiB ('0': per parameter)
    predivide: float | None = None  # gradient division before the reduce-scatter
    postdivide: float | None = None  # and after it
    calls_per_step: int | None = None  # collectives (or matmuls) per step in this row
    overlap_pct: float | None = None  # OSU's Overlap(%) on the comm+compute row
    compute_size: int | None = None  # the overlap matmul's size (size x size); not in key(): 'auto' varies
    benchmark: str = ""  # the sweep file's benchmark name; '' for a run from the command line
    root: int = -1  # root rank of a rooted collective, -1 for the others (nccl-tests' convention)

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
    from commbench.collectives import REGISTRY  # torch-heavy; results stays importable without it

    known = REGISTRY.get(collective)
    return known.placements[0] if known is not None else ""


# A new field that tells measurements apart (a placement, ...) goes here; compare, fits and plots follow.
# The benchmark name is not one: a sweep file's run and a command line's run of the same point match.
KEY_FIELDS = ("collective", "dtype", "op", "mode", "size_bytes", "world_size", "backend",
              "group_size", "group_layout", "placement",
              "pattern", "model", "unit", "phase", "bucket_mb", "predivide", "postdivide")
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
        where = hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts"
        return (f"{self.label} ({meta.get('backend', '?')}, {meta.get('device', '?')}, "
                f"{meta.get('world_size', '?')} ranks, {where})")


def load_run(path: str | Path) -> SavedRun:
    """Read a results.json written by commbench (any run, any machine); a run directory works too."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        payload = json.loads(path.read_text())
        known = {f.name for f in fields(Row)}
        rows = [Row(**{key: value for key, value in raw.items() if key in known})
                for raw in payload["rows"]]
        fits = [dict(fit) for fit in payload.get("fits", [])]
        if not isinstance(payload.get("meta", {}), dict):
            raise TypeError("meta is not an object")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such results file") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: not a commbench results.json ({type(exc).__name__}: {exc})") from None
    return SavedRun(meta=payload.get("meta", {}), rows=rows, path=path, fits=fits)
