"""Measuring a pattern's step: timed steps, per-collective breakdowns and overlap with compute, as rows.

Every row comes from commbench.rows.make_row, like a sweep's: its samples are the max over ranks of each
timed step's value (a collective group's time in a step is the sum of its collectives), and a row's
bus-bandwidth factor is the registry's for its collective (a whole step's: its collectives' shared
factor, (n-1)/n for all-gathers and reduce-scatters).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from commbench.backends.base import Backend, CollectiveArgs
from commbench.collectives import REGISTRY
from commbench.errors import RunError
from commbench.patterns import overlap as overlap_math
from commbench.patterns.fsdp_step import FsdpStep
from commbench.patterns.schedule import ASYNC, DRY, SYNC, Issuer, Label
from commbench.results import Row
from commbench.rows import make_row
from commbench.sampling import Sampled
from commbench.stats import summarize
from commbench.timing import make_timer

_NO_WORK = CollectiveArgs(input=None, output=None)  # finishing a step's timer waits on nothing more


@dataclass(frozen=True)
class StepRun:
    """One bucketing's measurement: the step, its schedule, the row fields every row shares, and the
    timed and untimed step counts."""

    backend: Backend
    step: FsdpStep
    labels: list[Label]
    context: str  # names the run in error messages: "fsdp tiny, bucket 1 MiB"
    iters: int
    warmup: int
    shared: dict[str, Any] = field(default_factory=dict)  # pattern, model, dtype, bucket_mb, ... of each row

    def row(self, sampled: Sampled, **fields: Any) -> Row:
        backend = self.backend
        return make_row(sampled, backend=backend.name, device=backend.device.type,
                        world_size=backend.world_size, requested_bytes=fields["size_bytes"],
                        warmup=self.warmup, **self.shared, **fields)

    def factor(self, collectives: set[str]) -> float:
        """The bus-bandwidth factor these collectives share (1.0 if they differ)."""
        factors = {REGISTRY[name].busbw_factor(self.backend.world_size) for name in collectives}
        return factors.pop() if len(factors) == 1 else 1.0

    def totals(self) -> dict[str, Any]:
        """The size, count and calls of the whole step's collectives."""
        return dict(size_bytes=sum(label.size_bytes for label in self.labels),
                    count_per_rank=sum(label.count_per_rank for label in self.labels),
                    calls_per_step=len(self.labels))


def step_dry(backend: Backend, step: FsdpStep, context: str) -> list[Label]:
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


def time_steps(backend: Backend, steps: list[Callable[[], None]], iters: int, warmup: int
               ) -> list[list[float]]:
    """Seconds per run of each step on this rank, the steps taking turns (so that a machine getting
    slower or faster shifts them all alike); every timed run starts at a barrier."""
    for _ in range(warmup):
        for run_step in steps:
            run_step()
    backend.sync_device()
    timers = [make_timer(backend, iters) for _ in steps]
    for index in range(iters):
        for run_step, timer in zip(steps, timers, strict=True):
            backend.barrier()
            timer.start(index)
            run_step()
            timer.finish(index, _NO_WORK)
    return [timer.seconds() for timer in timers]


def measure_breakdown(run: StepRun) -> list[Row]:
    """Steps whose collectives are issued and completed one by one, each timed: rows per collective,
    unit and phase, and one for the whole step (which adds the local work: divisions, copies, callbacks)."""
    backend, step, labels, iters = run.backend, run.step, run.labels, run.iters
    for _ in range(run.warmup):
        step.run(Issuer(backend, SYNC, run.context))
    slots = len(labels) * iters
    slot_timer = make_timer(backend, slots)
    issuer = Issuer(backend, SYNC, run.context, timer=slot_timer, slots=slots)
    (step_seconds,) = time_steps(backend, [lambda: step.run(issuer)], iters, warmup=0)
    if issuer.issued != slots:
        raise RunError(f"{run.context}: the step issued {issuer.issued} collectives in {iters} steps, "
                       f"not {slots}, on rank {backend.rank}")
    per_slot = slot_timer.seconds()
    parts: dict[tuple[str, str, str], list[int]] = {}
    for index, label in enumerate(labels):
        parts.setdefault((label.collective, label.unit, label.phase), []).append(index)
    per_step = [per_slot[index * len(labels): (index + 1) * len(labels)] for index in range(iters)]
    local = [step_seconds, [sum(step_slots) for step_slots in per_step]]
    for indices in parts.values():  # a part's time in a step is the sum of its collectives
        local.append([sum(step_slots[i] for i in indices) for step_slots in per_step])
    sampled = gather_series(backend, local, iters)
    rows = []
    for (collective, unit, phase), indices, timing in zip(parts, parts.values(), sampled[2:], strict=True):
        members = [labels[i] for i in indices]
        rows.append(run.row(timing, collective=collective, unit=unit, phase=phase, mode="sync",
                            op="sum" if REGISTRY[collective].reduces else "",
                            size_bytes=sum(m.size_bytes for m in members),
                            count_per_rank=sum(m.count_per_rank for m in members),
                            calls_per_step=len(members), busbw_factor=run.factor({collective})))
    step_factor = run.factor({label.collective for label in labels})
    for phase, timing in (("collectives", sampled[1]), ("step", sampled[0])):
        rows.append(run.row(timing, collective="step", unit="", phase=phase, mode="sync", op="",
                            busbw_factor=step_factor, **run.totals()))
    return rows


def measure_overlap(run: StepRun, compute_size: int | None) -> tuple[int, list[Row]]:
    """The step with asynchronous collectives: communication alone, a matmul per unit and pass alone,
    and both together (the matmul runs while the prefetched all-gather and the reduce-scatters are in
    flight); rows for the three and the overlap percentage, and the matmul size used. ``compute_size``
    None calibrates it to this step's communication (--compute-size auto, the first bucketing)."""
    backend, step = run.backend, run.step
    kernels = 2 * len(step.plan.units)  # one per unit in the forward pass, one in the backward pass
    issuer = Issuer(backend, ASYNC, run.context)
    device, dtype = step.state.device, step.state.dtype
    if compute_size is None:  # OSU's way: the compute lasts as long as the communication
        (probe,) = time_steps(backend, [lambda: step.run(issuer)], run.iters, run.warmup)
        (probe_sampled,) = gather_series(backend, [probe], run.iters)
        target = summarize(probe_sampled.slowest).p50 / kernels
        compute_size = overlap_math.calibrate_size(
            lambda n: overlap_math.time_kernel(n, dtype, device, backend.sync_device), target)
        compute_size = int(backend.broadcast_object(compute_size, root=0))  # every rank: the same matmul
    kernel = overlap_math.MatmulKernel(compute_size, dtype, device)

    def compute_only() -> None:
        for _ in range(kernels):
            kernel()

    timed = time_steps(backend, [lambda: step.run(issuer), compute_only,
                                 lambda: step.run(issuer, compute=kernel)], run.iters, run.warmup)
    comm, compute, both = gather_series(backend, timed, run.iters)
    percent = overlap_math.overlap_percent(summarize(comm.slowest).p50, summarize(compute.slowest).p50,
                                           summarize(both.slowest).p50)
    factor = run.factor({label.collective for label in run.labels})
    common = dict(collective="step", unit="", mode="async", op="", compute_size=compute_size)
    return compute_size, [
        run.row(comm, phase="comm", busbw_factor=factor, **common, **run.totals()),
        run.row(compute, phase="compute", size_bytes=0, count_per_rank=0, calls_per_step=kernels,
                busbw_factor=1.0, **common),
        run.row(both, phase="comm+compute", busbw_factor=factor, overlap_pct=percent, **common,
                **run.totals()),
    ]
