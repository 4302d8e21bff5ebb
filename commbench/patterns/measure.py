"""Measuring a pattern's step: timed steps, per-collective breakdowns and overlap with compute, as rows.

Every row comes from commbench.results.rows.make_row, like a sweep's: its samples are the max over ranks of
each timed step's value (a collective group's time in a step is the sum of its collectives), and a row's
bus-bandwidth factor is the registry's for its collective (a whole step's: its collectives' shared
factor, (n-1)/n for all-gathers and reduce-scatters). Ranks may issue different collectives (a pipeline's
stages, a router's uneven splits): rows are the union of every rank's (collective, unit, phase, group)
parts; a rank that never issued a part counts zero time in it, and a part's size is the largest any rank
moved (the size v-collectives report, docs/measurement.md), averaged over the timed steps.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.errors import RunError
from commbench.measure.compute import MatmulKernel
from commbench.measure.sampling import Sampled
from commbench.measure.stats import summarize
from commbench.measure.timing import make_timer
from commbench.patterns import overlap as overlap_math
from commbench.patterns.schedule import ASYNC, DRY, SYNC, Issuer, Label, busbw_factor
from commbench.provenance.verdicts import RowContext
from commbench.results.model import Row
from commbench.results.rows import make_row

_NO_WORK = CollectiveArgs(input=None, output=None)  # finishing a step's timer waits on nothing more
PartKey = tuple[str, str, str, str]  # collective, unit, phase, group


class Step(Protocol):
    """A pattern's step: it issues its collectives through the issuer, running ``compute`` where the
    model would compute (``compute_kernels`` times per step)."""

    compute_kernels: int

    def run(self, issuer: Issuer, compute: Callable[[], None] | None = None) -> None: ...


@dataclass(frozen=True)
class StepRun:
    """One measurement: the step, this rank's schedule, the row fields every row shares, and the timed
    and untimed step counts. ``layouts`` names each parallel group's layout (contiguous or strided)."""

    backend: Backend
    step: Step
    labels: list[Label]
    context: str  # names the run in error messages: "fsdp tiny, bucket 1 MiB"
    iters: int
    warmup: int
    shared: dict[str, Any] = field(default_factory=dict)  # pattern, model, dtype, ... of each row
    layouts: dict[str, str] = field(default_factory=dict)
    row_context: RowContext | None = None  # the run's peaks and verdicts (commbench.provenance)
    step_done: Callable[[], None] = lambda: None  # told after every step run (progress lines)

    def row(self, sampled: Sampled | None, **fields: Any) -> Row:
        backend = self.backend
        values = {**self.shared, **fields}
        return make_row(sampled, backend=backend.name, device=backend.device.type,
                        world_size=backend.world_size, requested_bytes=values["size_bytes"],
                        warmup=self.warmup, context=self.row_context, **values)


@dataclass(frozen=True)
class PartInfo:
    """What one rank's (collective, unit, phase, group) part moved per step."""

    size_bytes: int
    count_per_rank: int
    calls: int
    dtype: str
    op: str
    group_size: int


@dataclass
class Breakdown:
    """The gathered timings: per part (union over ranks, in issue order) and for the whole step."""

    keys: list[PartKey]
    parts: dict[PartKey, Sampled]
    info: dict[PartKey, list[PartInfo | None]]  # by rank
    step: Sampled
    collectives: Sampled
    rows: list[Row] = field(default_factory=list)


def step_dry(backend: Backend, step: Step, context: str) -> list[Label]:
    """Run the step without communicating: every buffer exists afterwards and the schedule is known."""
    issuer = Issuer(backend, DRY, context)
    step.run(issuer)
    return issuer.labels


def gather_series(backend: Backend, series: list[list[float]], ops: int) -> list[Sampled]:
    """Each series of this rank's timings (same lengths on every rank) with every rank's values."""
    lengths = [len(values) for values in series]
    per_rank = backend.all_gather_floats([value for values in series for value in values])
    found, start = [], 0
    for length in lengths:
        found.append(Sampled([values[start: start + length] for values in per_rank], ops))
        start += length
    return found


def time_steps(backend: Backend, steps: list[Callable[[], None]], iters: int, warmup: int,
               step_done: Callable[[], None] = lambda: None) -> list[list[float]]:
    """Seconds per run of each step on this rank, the steps taking turns (so that a machine getting
    slower or faster shifts them all alike); every timed run starts at a barrier. ``step_done`` is told
    after each run."""
    for _ in range(warmup):
        for run_step in steps:
            run_step()
            step_done()
    backend.sync_device()
    timers = [make_timer(backend, iters) for _ in steps]
    for index in range(iters):
        for run_step, timer in zip(steps, timers, strict=True):
            backend.barrier()
            timer.start(index)
            run_step()
            timer.finish(index, _NO_WORK)
            step_done()
    return [timer.seconds() for timer in timers]


PROBE_BYTES = 16 * 2**20  # the probe's large all-gather: every rank the same, whatever it issues


def probe_alpha_beta(backend: Backend, dtype: torch.dtype) -> tuple[float, float]:
    """This backend's α (seconds per call) and β (bytes per second) for the time estimate
    (patterns/estimate.py): all-gathers of one element per rank and of PROBE_BYTES, each the fastest of
    three, the slowest rank's."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    world = backend.world_size
    big = max(1, PROBE_BYTES // (itemsize * world))
    fastest = []
    for count in (1, big):
        args = CollectiveArgs(input=torch.zeros(count, dtype=dtype, device=backend.device),
                              output=torch.zeros(count * world, dtype=dtype, device=backend.device))
        seconds = []
        for _ in range(3):
            backend.barrier()
            started = time.perf_counter()
            backend.all_gather_base(args)
            backend.sync_device()
            seconds.append(time.perf_counter() - started)
        fastest.append(min(seconds))
    small, large = (max(values) for values in zip(*backend.all_gather_floats(fastest), strict=True))
    moved = big * world * itemsize
    return small, moved / max(large - small, 1e-9)


def _local_parts(labels: list[Label], seconds: list[float], iters: int
                 ) -> tuple[dict[PartKey, list[float]], dict[PartKey, PartInfo]]:
    """Per part: its seconds in each step and what it moved (sizes averaged over the steps)."""
    per_step = len(labels) // iters
    times: dict[PartKey, list[float]] = {}
    moved: dict[PartKey, list[Label]] = {}
    for index, label in enumerate(labels):
        times.setdefault(label.key(), [0.0] * iters)[index // per_step] += seconds[index]
        moved.setdefault(label.key(), []).append(label)
    info = {}
    for key, members in moved.items():
        first = members[0]
        info[key] = PartInfo(round(sum(m.size_bytes for m in members) / iters),
                             round(sum(m.count_per_rank for m in members) / iters), len(members) // iters,
                             first.dtype, first.op, first.group_size)
    return times, info


def time_parts(run: StepRun) -> Breakdown:
    """Timed steps whose collectives are issued and completed one by one, each timed, gathered from
    every rank: the parts' times, the collectives' total and the whole step's (which adds the local
    work: divisions, copies, callbacks, compute)."""
    backend, step, iters = run.backend, run.step, run.iters
    for _ in range(run.warmup):
        step.run(Issuer(backend, SYNC, run.context))
        run.step_done()
    slots = len(run.labels) * iters
    slot_timer = make_timer(backend, slots)
    issuer = Issuer(backend, SYNC, run.context, timer=slot_timer, slots=slots)
    (step_seconds,) = time_steps(backend, [lambda: step.run(issuer)], iters, warmup=0,
                                 step_done=run.step_done)
    if issuer.issued != slots:
        raise RunError(f"{run.context}: the step issued {issuer.issued} collectives in {iters} steps, "
                       f"not {slots}, on rank {backend.rank}")
    per_slot = slot_timer.seconds()
    times, info = _local_parts(issuer.labels, per_slot, iters)
    everyone = backend.all_gather_object(info)
    keys = list(dict.fromkeys(key for rank_info in everyone for key in rank_info))
    per_step = len(run.labels)
    inside = [sum(per_slot[index * per_step: (index + 1) * per_step]) for index in range(iters)]
    series = [step_seconds, inside, *(times.get(key, [0.0] * iters) for key in keys)]
    sampled = gather_series(backend, series, iters)
    return Breakdown(keys, dict(zip(keys, sampled[2:], strict=True)),
                     {key: [rank_info.get(key) for rank_info in everyone] for key in keys},
                     sampled[0], sampled[1])


def part_fields(run: StepRun, key: PartKey, infos: list[PartInfo | None]) -> dict[str, Any]:
    """A part's row fields: the largest size any rank moved, its op, dtype and group."""
    collective, unit, phase, group = key
    known = [info for info in infos if info is not None]
    group_size = known[0].group_size or run.backend.world_size
    return dict(collective=collective, unit=unit, phase=phase, mode="sync", op=known[0].op,
                dtype=known[0].dtype, size_bytes=max(info.size_bytes for info in known),
                count_per_rank=max(info.count_per_rank for info in known),
                calls_per_step=max(info.calls for info in known), parallel=group, group_size=group_size,
                group_count=run.backend.world_size // group_size,
                group_layout=run.layouts.get(group, "world"),
                busbw_factor=busbw_factor(collective, group_size))


def step_totals(breakdown: Breakdown, keys: list[PartKey] | None = None) -> dict[str, int]:
    """The size, count and calls of the step's collectives (each part at its largest), or of some."""
    found = {"size_bytes": 0, "count_per_rank": 0, "calls_per_step": 0}
    for infos in (breakdown.info[key] for key in (breakdown.keys if keys is None else keys)):
        known = [info for info in infos if info is not None]
        found["size_bytes"] += max(info.size_bytes for info in known)
        found["count_per_rank"] += max(info.count_per_rank for info in known)
        found["calls_per_step"] += max(info.calls for info in known)
    return found


def measure_breakdown(run: StepRun) -> Breakdown:
    """time_parts, and rows per part and for the whole step ('collectives': their sum; 'step')."""
    breakdown = time_parts(run)
    rows = [run.row(breakdown.parts[key], **part_fields(run, key, breakdown.info[key]))
            for key in breakdown.keys]
    collectives = {key[0] for key in breakdown.keys}
    factors = {busbw_factor(name, run.backend.world_size) for name in collectives}
    step_factor = factors.pop() if len(factors) == 1 else 1.0
    for phase, timing in (("collectives", breakdown.collectives), ("step", breakdown.step)):
        rows.append(run.row(timing, collective="step", unit="", phase=phase, mode="sync", op="",
                            busbw_factor=step_factor, **step_totals(breakdown)))
    breakdown.rows = rows
    return breakdown


def measure_overlap(run: StepRun, compute_size: int | None, dtype: torch.dtype) -> tuple[int, list[Row]]:
    """The step with asynchronous collectives: communication alone, the step's matmuls alone, and both
    together (each matmul runs while the collectives issued before it are in flight); rows for the three
    and the overlap percentage, and the matmul size used. ``compute_size`` None calibrates it to this
    step's communication (--compute-size auto, the first bucketing)."""
    backend, step = run.backend, run.step
    kernels = step.compute_kernels
    issuer = Issuer(backend, ASYNC, run.context)
    device = backend.device
    if compute_size is None:  # OSU's way: the compute lasts as long as the communication
        (probe,) = time_steps(backend, [lambda: step.run(issuer)], run.iters, run.warmup, run.step_done)
        (probe_sampled,) = gather_series(backend, [probe], run.iters)
        target = summarize(probe_sampled.slowest).p50 / kernels
        compute_size = overlap_math.calibrate_size(
            lambda n: overlap_math.time_kernel(n, dtype, device, backend.sync_device), target)
        compute_size = int(backend.broadcast_object(compute_size, root=0))  # every rank: the same matmul
    kernel = MatmulKernel(compute_size, dtype, device)

    def compute_only() -> None:
        for _ in range(kernels):
            kernel()

    timed = time_steps(backend, [lambda: step.run(issuer), compute_only,
                                 lambda: step.run(issuer, compute=kernel)], run.iters, run.warmup,
                       run.step_done)
    comm, compute, both = gather_series(backend, timed, run.iters)
    percent = overlap_math.overlap_percent(summarize(comm.slowest).p50, summarize(compute.slowest).p50,
                                           summarize(both.slowest).p50)
    factors = {busbw_factor(label.collective, backend.world_size) for label in run.labels}
    factor = factors.pop() if len(factors) == 1 else 1.0
    totals = dict(size_bytes=sum(label.size_bytes for label in run.labels),
                  count_per_rank=sum(label.count_per_rank for label in run.labels),
                  calls_per_step=len(run.labels))
    common = dict(collective="step", unit="", mode="async", op="", compute_size=compute_size)
    return compute_size, [
        run.row(comm, phase="comm", busbw_factor=factor, **common, **totals),
        run.row(compute, phase="compute", size_bytes=0, count_per_rank=0, calls_per_step=kernels,
                busbw_factor=1.0, **common),
        run.row(both, phase="comm+compute", busbw_factor=factor, overlap_pct=percent, **common, **totals),
    ]
