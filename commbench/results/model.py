"""The result model: a measured row, a run's metadata, and the fields rows match on. Writing them:
writers/files.py; reading them back: saved.py.
"""

from dataclasses import dataclass, field, fields
from typing import Any

from commbench.core.sizes import format_size
from commbench.measure.collectives import REGISTRY  # descriptors only: importing it imports no torch
from commbench.measure.impls import REFERENCE_IMPL  # likewise


@dataclass(slots=True)
class Row:
    """One measured (collective, dtype, op, placement, mode, size) point. Times in microseconds.

    A row whose op the backend rejected (or whose buffers could not be allocated) has ``error`` set and
    no times. ``wrong`` is None unless --check ran: then the wrong elements summed over ranks (and over
    the checked ops of the row), ``first_wrong`` where the first one was. Slotted: a fabric run keeps
    millions (2N(N-1) per pass), and a dict per row is a third of their memory.
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
    phase: str = ""  # forward, backward, flush (per collective); step, comm, compute, comm+compute (also a
    # sweep row measured beside --with-compute's matmul)
    bucket_mb: str = ""  # reduce-scatter bucketing: 'unit' or the bucket size in MiB ('0': per parameter)
    predivide: float | None = None  # gradient division before the reduce-scatter
    postdivide: float | None = None  # and after it
    calls_per_step: int | None = None  # collectives (or matmuls) per step in this row
    overlap_pct: float | None = None  # OSU's Overlap(%) on the comm+compute row
    compute_size: int | None = None  # the matmul's size (size x size; --compute-size, --with-compute); not in
    # key(): 'auto' varies
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
    src_rank: int | None = None  # commbench fabric: the sending rank (ping_pong: the one that sends first)
    dst_rank: int | None = None  # the receiving rank
    host: str = ""  # the host an intra-node all_reduce row measured
    elapsed_s: float | None = None  # seconds from the start of the run (the soak) to this row
    repeat: int = 0  # the soak's pass that measured the row, from 0
    # Implementations (--impl; docs/implementations.md). Files written before them load as the reference,
    # torch.distributed's own call (c10d), which they ran.
    impl: str = REFERENCE_IMPL  # how the op ran: c10d (torch.distributed's call), nccl-ubr, symm-one-shot..
    impl_status: str = ""  # ran, verified, fallback, unavailable (error says why; not a failure); '' c10d
    impl_note: str = ""  # what showed the path it ran on, or why another path seems to have run
    impl_init_ms: float | None = None  # once per run: the implementation's communicator, pool or heap
    impl_register_ms: float | None = None  # this size: registering or rendezvousing its buffers
    impl_setup_bytes: int | None = None  # device memory those set-up steps took (CUDA; None on CPU)
    kernels: str = ""  # --profile-kernels: what one op ran on the device (on CPU: the backend's calls)
    output_digest: str = ""  # --check: a hash of every rank's output after the checked op
    # When this rank began measuring the row (its probe op) and when it finished (UTC, ISO 8601 to the ms);
    # empty in rows that are not a sweep's and in files written before them
    measured_from: str = ""
    measured_to: str = ""
    first_op_us: float | None = None  # the size's first op, before its warm-up (max over ranks)
    # --per-iteration: every rank's time and arrival of every sample, µs, as float32 [rank][sample]
    # (results/iterations.py); JSON only
    iteration_us: str = ""
    iteration_arrival_us: str = ""
    # How the buffers were laid out (docs/measurement.md#cold-and-misaligned-buffers)
    misalign: int = 0  # --misalign: bytes past an aligned address
    buffer_sets: int = 1  # --buffers: sets of buffers the ops rotated through
    flush_bytes: int = 0  # --flush-cache: bytes written before each timed op (0: none)
    # --memory: one rank's bytes for this size, the largest over ranks (docs/measurement.md#memory-per-rank)
    mem_user_bytes: int | None = None  # its buffers, every set of them
    mem_internal_bytes: int | None = None  # what the ops took beside them (torch, the library)
    mem_library_bytes: int | None = None  # of that, device memory outside torch's allocator (CUDA)
    # Contention (--concurrent, --with-compute; docs/measurement.md#contention)
    concurrent: int | None = None  # communicators running the collective at once
    communicator: int | None = None  # which of them this row times, from 0
    alone_us_p50: float | None = None  # its p50 running alone
    slowdown: float | None = None  # time_us_p50 / alone_us_p50
    compute_alone_us: float | None = None  # --with-compute: the matmul's p50 alone
    compute_us: float | None = None  # and beside the collective
    compute_slowdown: float | None = None  # compute_us / compute_alone_us

    def __post_init__(self) -> None:
        if not self.group_size:
            self.group_size = self.world_size
        if not self.impl:  # a file whose impl column is empty: torch.distributed's own call
            self.impl = REFERENCE_IMPL

    @property
    def judged_against(self) -> float | None:
        """The busbw a verdict compares with: --expect's expected busbw, else the link's peak."""
        return self.expected_gbps if self.expected_gbps is not None else self.peak_gbps

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
            if name == "impl" and value == REFERENCE_IMPL:
                continue  # torch.distributed's own call: what every row was before --impl
            found.append(f"{name} {value}")
        return found


SKEW_FLOOR_US = 20.0  # smaller arrival skews are host scheduling jitter, whatever the op time


def skew_percent(row: Row) -> float | None:
    """A row's largest arrival skew as a percentage of its p50 time (the console's straggler line and
    explain's straggler rule judge it)."""
    if row.skew_us_max is None or not row.time_us_p50 or row.time_us_p50 <= 0:
        return None
    return 100.0 * row.skew_us_max / row.time_us_p50


def describe_row(row: Row) -> str:
    """'all_reduce (float32, sum, in-place, sync) at 64 KiB', as messages name a row; with another
    implementation than the reference, 'all_reduce by symm-one-shot (...)'."""
    detail = ", ".join(part for part in (row.dtype, row.op, row.placement, row.mode) if part)
    how = "" if row.impl == REFERENCE_IMPL else f" by {row.impl}"
    return f"{row.collective}{how} ({detail}) at {format_size(row.size_bytes)}"


def default_placement(collective: str) -> str:
    """The placement a collective runs in without --placement ('' for unknown names: saved files
    may hold collectives or patterns this version does not know)."""
    known = REGISTRY.get(collective)
    return known.default_placement if known is not None else ""


# A new field that tells measurements apart (a placement, ...) goes here; compare, fits and plots follow.
# The benchmark name is not one: a sweep file's run and a command line's run of the same point match.
KEY_FIELDS = ("collective", "dtype", "op", "mode", "size_bytes", "world_size", "backend",
              "group_size", "group_layout", "placement", "impl", "concurrent", "communicator",
              "pattern", "variant", "parallel", "model", "unit", "phase", "bucket_mb", "predivide",
              "postdivide", "group_name", "src_rank", "dst_rank", "host")
SERIES_FIELDS = tuple(name for name in KEY_FIELDS if name != "size_bytes")
BASIC_SERIES_FIELDS = SERIES_FIELDS[:6]  # collective, dtype, op, mode, world_size, backend
# Per-sample and per-rank lists and --per-iteration's [rank][sample] blocks live in the JSON only; the CSV
# has one value per cell.
JSON_ONLY = ("iteration_us", "iteration_arrival_us")
CSV_COLUMNS = [f.name for f in fields(Row)
               if getattr(f.type, "__origin__", None) is not list and f.name not in JSON_ONLY]


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
    unavailable: dict[str, str] = field(default_factory=dict)  # left out by --collective all: name -> why
    memory: dict[str, Any] = field(default_factory=dict)  # start: each rank's memory around the group's start
