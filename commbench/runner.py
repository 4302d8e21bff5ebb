"""The sweep: collectives x dtypes x ops x sizes x modes -> rows.

The runner reads descriptors from the registry and calls the backend method each names; it has no
per-collective branches. Buffers are allocated and filled once per size, before any timed region, and
released before the next size.
"""

from dataclasses import dataclass
from typing import Protocol

from commbench.backends.base import Backend, CollectiveArgs
from commbench.collectives import REGISTRY, Collective, Layout
from commbench.config import RunConfig
from commbench.dtypes import element_size, torch_dtype
from commbench.errors import RunError, UsageError
from commbench.results import Row
from commbench.sizes import format_size
from commbench.stats import algbw_gbps, slowest_rank_per_iteration, summarize
from commbench.timing import TIMED_LOOPS, warm_up


class Output(Protocol):
    """Where rows go as they are measured (rank 0); other ranks get NullOutput."""

    def note(self, text: str) -> None: ...

    def row(self, row: Row) -> None: ...

    def group_done(self, rows: list[Row]) -> None: ...


class NullOutput:
    def note(self, text: str) -> None:
        pass

    def row(self, row: Row) -> None:
        pass

    def group_done(self, rows: list[Row]) -> None:
        pass


@dataclass(frozen=True)
class PlannedSize:
    requested: int
    used: int
    count_per_rank: int


def plan_sizes(collective: Collective, sizes: list[int], world_size: int, dtype: str
               ) -> tuple[list[PlannedSize], list[str]]:
    """The sizes a collective can run for this world size and dtype, and notes on what changed.

    A size is rounded down to whole elements in each rank's chunk; one too small for a single element
    per rank is skipped; two requests that round to the same size run once.
    """
    if not collective.sized:
        return [PlannedSize(0, 0, 0)], []
    elem = element_size(dtype)
    unit = elem * collective.shards(world_size)
    planned: list[PlannedSize] = []
    rounded: list[str] = []
    skipped: list[str] = []
    merged: list[str] = []
    for requested in sizes:
        count, used = collective.plan(requested, world_size, elem)
        if count == 0:
            skipped.append(format_size(requested))
        elif any(p.used == used for p in planned):
            merged.append(format_size(requested))
        else:
            planned.append(PlannedSize(requested, used, count))
            if used != requested:
                rounded.append(f"{format_size(requested)} -> {format_size(used)}")
    where = f"{collective.name} {dtype} at {world_size} ranks"
    granularity = f"a multiple of {unit} B ({collective.shards(world_size)} x {elem} B)"
    notes = []
    if rounded:
        shown = ", ".join(rounded[:4]) + (f", ... ({len(rounded)} in all)" if len(rounded) > 4 else "")
        notes.append(f"{where}: sizes rounded down to {granularity}: {shown}")
    if skipped:
        notes.append(f"{where}: skipped sizes below {unit} B: {', '.join(skipped)}")
    if merged:
        notes.append(f"{where}: {', '.join(merged)} rounded onto a size already measured")
    return planned, notes


def run_benchmarks(configs: list[RunConfig], backend: Backend, output: Output) -> list[Row]:
    """A run: its benchmarks (one, or a sweep file's list) in order, in one process group."""
    rows: list[Row] = []
    for config in configs:
        rows.extend(run_sweep(config, backend, output))
    return rows


def run_sweep(config: RunConfig, backend: Backend, output: Output) -> list[Row]:
    """Every row of the sweep, reported to ``output`` as each finishes."""
    world_size = backend.world_size
    if config.root >= world_size:
        raise UsageError(f"--root {config.root} is outside the world of {world_size} ranks")
    all_rows: list[Row] = []
    for name in config.collectives:
        collective = REGISTRY[name]
        # A collective that moves no data is timed once, not once per dtype.
        for dtype in config.dtypes if collective.sized else config.dtypes[:1]:
            planned, notes = plan_sizes(collective, config.sizes, world_size, dtype)
            for text in notes:
                output.note(text)
            for op in config.ops if collective.reduces else [""]:
                group_rows: list[Row] = []
                for size in planned:
                    for row in measure_size(config, backend, collective, dtype, op, size):
                        output.row(row)
                        group_rows.append(row)
                output.group_done(group_rows)
                all_rows.extend(group_rows)
    return all_rows


def measure_size(config: RunConfig, backend: Backend, collective: Collective, dtype: str, op: str,
                 size: PlannedSize) -> list[Row]:
    """One row per mode for one size; the buffers are this call's locals, released when it returns."""
    rank, world_size = backend.rank, backend.world_size
    mode = config.modes[0]
    try:
        layout = Layout(size.count_per_rank, world_size, rank, config.root, torch_dtype(dtype),
                        backend.device)
        buffers = collective.build(layout)
        for tensor in buffers.tensors():
            tensor.zero_()  # zeros: repeated in-place reductions stay finite in every dtype
        args = CollectiveArgs(input=buffers.input, output=buffers.output, op=op or "sum",
                              root=config.root, peer=buffers.peer)
        call = getattr(backend, collective.method)
        rows = []
        for mode in config.modes:
            args.async_op = mode == "async"
            warm_up(call, backend, args, config.warmup)
            local_seconds = TIMED_LOOPS[mode](call, backend, args, config.iters)
            per_rank = backend.all_gather_floats(local_seconds)
            rows.append(_make_row(config, backend, collective, dtype, op, mode, size,
                                  slowest_rank_per_iteration(per_rank)))
        return rows
    except (RunError, UsageError):
        raise
    except Exception as exc:  # a backend error: name what failed, where
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunError(f"{collective.name} ({dtype}{', ' + op if op else ''}, {mode}) failed at size "
                       f"{format_size(size.used)} on rank {rank}: {detail}") from exc


def _make_row(config: RunConfig, backend: Backend, collective: Collective, dtype: str, op: str,
              mode: str, size: PlannedSize, seconds: list[float]) -> Row:
    samples_us = [round(value * 1e6, 3) for value in seconds]  # the clocks resolve nanoseconds
    summary = summarize(samples_us)
    factor = collective.busbw_factor(backend.world_size)
    algbw = algbw_gbps(size.used, summary.p50 * 1e-6)
    return Row(
        collective=collective.name,
        backend=backend.name,
        device=backend.device.type,
        world_size=backend.world_size,
        dtype=dtype,
        mode=mode,
        op=op,
        size_bytes=size.used,
        requested_bytes=size.requested,
        count_per_rank=size.count_per_rank,
        iters=config.iters,
        warmup=config.warmup,
        time_us_p50=summary.p50,
        time_us_p95=summary.p95,
        time_us_min=summary.min,
        time_us_max=summary.max,
        time_us_mean=summary.mean,
        algbw_gbps=algbw,
        busbw_gbps=None if algbw is None else algbw * factor,
        busbw_factor=factor,
        samples_us=samples_us,
        benchmark=config.name,
        root=config.root if collective.rooted else -1,
    )
