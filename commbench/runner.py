"""The sweep: collectives x dtypes x ops x placements x sizes x modes -> rows.

The runner reads descriptors from the registry and calls the backend method each names; it has no
per-collective branches. Buffers are allocated and filled once per size, before any timed region, and
released before the next size.

Outside every timed region, and in this order for each size: every rank allocates its buffers and the
ranks agree that all of them could; per mode, one probe op is issued and completed and the ranks agree
that it ran everywhere (an op or dtype the backend rejects becomes a row with an ``error``, and the sweep
goes on); warm-up; the timed iterations, with --check a checked op after them (or after every
--check-every iterations), its buffers refilled before and zeroed after.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from commbench.backends.base import Backend, CollectiveArgs
from commbench.check import CheckResult, Pattern, compare
from commbench.collectives import REGISTRY, Buffers, Collective, Layout, placements_for
from commbench.config import RunConfig, split_spec
from commbench.dtypes import element_size, torch_dtype
from commbench.errors import RunError, Terminated, UsageError
from commbench.results import Row
from commbench.sizes import format_size
from commbench.splits import DEFAULT_SPLITS, SplitSpec, check_world_size, parse_splits
from commbench.splits import describe as describe_splits
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
    chunk_counts: tuple[int, ...] = ()  # v-collectives (see splits.py)
    pair_counts: tuple[tuple[int, ...], ...] = ()


def plan_sizes(collective: Collective, sizes: list[int], world_size: int, dtype: str,
               splits: SplitSpec | None = None) -> tuple[list[PlannedSize], list[str]]:
    """The sizes a collective can run for this world size and dtype, and notes on what changed.

    A size is rounded down to whole elements in each rank's chunk; one too small for a single element
    per rank is skipped; two requests that round to the same size run once. A v-collective's sizes come
    from its splits: a splits file fixes them (one size, whatever --sizes says).
    """
    if not collective.sized:
        return [PlannedSize(0, 0, 0)], []
    if collective.uneven is not None:
        return _plan_uneven(collective, sizes, world_size, dtype, splits or parse_splits(DEFAULT_SPLITS))
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


def _plan_uneven(collective: Collective, sizes: list[int], world_size: int, dtype: str, splits: SplitSpec
                 ) -> tuple[list[PlannedSize], list[str]]:
    elem = element_size(dtype)
    where = f"{collective.name} {dtype} at {world_size} ranks"
    planned: list[PlannedSize] = []
    skipped: list[str] = []
    plans = []
    for requested in sizes[:1] if splits.from_file else sizes:
        plan = collective.plan_size(requested, world_size, elem, splits)
        plans.append(plan)
        if plan.count_per_rank == 0:
            skipped.append(format_size(requested))
        elif not any(p.used == plan.size_bytes for p in planned):
            planned.append(PlannedSize(plan.size_bytes if splits.from_file else requested, plan.size_bytes,
                                       plan.count_per_rank, plan.chunk_counts, plan.pair_counts))
    notes = []
    if splits.from_file and planned:
        notes.append(f"{where}: splits from {splits.path} ({describe_splits(plans[0], elem)}); "
                     "--sizes does not apply")
    elif planned:
        notes.append(f"{where}: {splits.text} splits; a size is the largest per-rank byte count")
    if skipped:
        notes.append(f"{where}: skipped sizes too small for {splits.text}: {', '.join(skipped)}")
    return planned, notes


def run_sweep(config: RunConfig, backend: Backend, output: Output) -> list[Row]:
    """Every row of the sweep, reported to ``output`` as each finishes."""
    world_size = backend.world_size
    if config.root >= world_size:
        raise UsageError(f"--root {config.root} is outside the world of {world_size} ranks")
    splits = split_spec(config)
    check_world_size(splits, world_size)
    all_rows: list[Row] = []
    for name in config.collectives:
        collective = REGISTRY[name]
        modes = [mode for mode in config.modes if mode in collective.modes]
        if modes != config.modes:
            output.note(f"{name} runs in {' and '.join(collective.modes)} mode only"
                        + ("" if modes else "; skipped"))
        if not modes:
            continue
        # A collective that moves no data is timed once, not once per dtype.
        for dtype in config.dtypes if collective.sized else config.dtypes[:1]:
            planned, notes = plan_sizes(collective, config.sizes, world_size, dtype, splits)
            for text in notes:
                output.note(text)
            for op in config.ops if collective.reduces else [""]:
                for placement in placements_for(collective, config.placements):
                    group_rows: list[Row] = []
                    for size in planned:
                        for row in measure_size(config, backend, collective, dtype, op, size, placement,
                                                modes):
                            output.row(row)
                            if row.wrong:
                                output.note(f"{describe_row(row)}: {row.wrong} wrong elements, first at "
                                            f"{row.first_wrong}")
                            group_rows.append(row)
                    output.group_done(group_rows)
                    all_rows.extend(group_rows)
    return all_rows


def describe_row(row: Row) -> str:
    """'all_reduce (float32, sum, in-place, sync) at 64 KiB', as messages name a row."""
    detail = ", ".join(part for part in (row.dtype, row.op, row.placement, row.mode) if part)
    return f"{row.collective} ({detail}) at {format_size(row.size_bytes)}"


def sweep_failure(rows: list[Row]) -> str | None:
    """Why a finished sweep exits 1: rows that failed or held wrong values; None when all is well."""
    failed = [row for row in rows if row.error]
    wrong = [row for row in rows if row.wrong]
    problems = []
    if failed:
        first = failed[0]
        problems.append(f"{_count(len(failed), 'row')} failed (first: {describe_row(first)}: {first.error})")
    if wrong:
        first = wrong[0]
        problems.append(f"{_count(len(wrong), 'row')} had wrong values (first: {describe_row(first)}: "
                        f"{_count(first.wrong, 'wrong element')}, the first at {first.first_wrong})")
    return "; ".join(problems) or None


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _attempt(action: Callable[[], Any]) -> tuple[Any, str | None]:
    """``action()``'s value, or the first line of the error it raised."""
    try:
        return action(), None
    except (RunError, UsageError, Terminated):
        raise
    except Exception as exc:
        return None, _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def agree(backend: Backend, error: str | None) -> str | None:
    """Every rank learns whether any rank failed, and the first failure: ranks then act alike."""
    flags = backend.all_gather_floats([0.0 if error is None else 1.0])
    if not any(flag for (flag,) in flags):
        return None
    texts = backend.all_gather_object(error)
    failing = [rank for rank, text in enumerate(texts) if text is not None]
    if len(failing) == len(texts) and len(set(texts)) == 1:
        return f"{texts[0]} (on every rank)"
    others = len(failing) - 1
    return f"rank {failing[0]}: {texts[failing[0]]}" + (f" (and {_count(others, 'other rank')})"
                                                         if others else "")


def _allocate(collective: Collective, layout: Layout) -> Buffers:
    buffers = collective.build(layout)
    for tensor in buffers.tensors():
        tensor.zero_()  # zeros: repeated in-place reductions stay finite in every dtype
    return buffers


def _probe(call: Callable[[CollectiveArgs], None], backend: Backend, args: CollectiveArgs, mode: str) -> None:
    """One untimed op, issued as ``mode`` issues them and completed."""
    args.async_op = mode == "async"
    try:
        call(args)
        backend.complete(args)
    finally:
        args.async_op = False
        args.wait_list.clear()


class Checker:
    """--check for one size: fill, run one op, compare on every rank, total over ranks."""

    def __init__(self, collective: Collective, layout: Layout, buffers: Buffers, pattern: Pattern,
                 backend: Backend, call: Callable[[CollectiveArgs], None], args: CollectiveArgs) -> None:
        self.collective, self.layout, self.buffers, self.pattern = collective, layout, buffers, pattern
        self.backend, self.call, self.args = backend, call, args
        self.wrong = 0
        self.first_wrong = ""

    def run(self, mode: str) -> None:
        self.collective.fill(self.layout, self.buffers, self.pattern)
        self.backend.sync_device()
        self.args.async_op = mode == "async"  # in async mode the checked op is issued async too
        self.call(self.args)
        self.backend.complete(self.args)
        self.args.async_op = False
        local = compare(self.collective.expect(self.layout, self.buffers), self.pattern)
        results = [CheckResult.from_floats(values)
                   for values in self.backend.all_gather_floats(local.floats())]
        self.wrong += sum(result.wrong for result in results)
        if not self.first_wrong:
            self.first_wrong = next((result.describe(rank) for rank, result in enumerate(results)
                                     if result.wrong), "")
        for tensor in self.buffers.tensors():
            tensor.zero_()  # back to zeros before timing resumes


def _segments(iters: int, every: int) -> list[int]:
    """Timed iterations between checks: all at once, or ``every`` at a time."""
    if every <= 0 or every >= iters:
        return [iters]
    return [every] * (iters // every) + ([iters % every] if iters % every else [])


def measure_size(config: RunConfig, backend: Backend, collective: Collective, dtype: str, op: str,
                 size: PlannedSize, placement: str = "", modes: list[str] | None = None) -> list[Row]:
    """One row per mode for one size; the buffers are this call's locals, released when it returns."""
    rank, world_size = backend.rank, backend.world_size
    modes = modes or [mode for mode in config.modes if mode in collective.modes]
    placement = placement or collective.placements[0]
    layout = Layout(size.count_per_rank, world_size, rank, config.root, torch_dtype(dtype), backend.device,
                    placement, size.chunk_counts, size.pair_counts, config.p2p_window)
    # All ranks agree before the first collective: a rank that cannot allocate (out of memory) makes
    # an error row on every rank instead of leaving the others waiting inside a collective.
    buffers, error = _attempt(lambda: _allocate(collective, layout))
    error = agree(backend, error)
    if error is not None:
        return [_make_row(config, backend, collective, dtype, op, placement, mode, size, layout, error=error)
                for mode in modes]
    args = CollectiveArgs(op=op or "sum", root=config.root, premul_factor=config.premul_factor,
                          **buffers.call_options())
    call = getattr(backend, collective.method)
    rows = []
    for mode in modes:
        _, error = _attempt(lambda: _probe(call, backend, args, mode))  # noqa: B023 - called at once
        error = agree(backend, error)
        if error is not None:
            rows.append(_make_row(config, backend, collective, dtype, op, placement, mode, size, layout,
                                  error=error))
            continue
        try:
            checker = None
            if config.check:
                pattern = Pattern(layout.dtype, op, world_size, backend.device, config.premul_factor)
                checker = Checker(collective, layout, buffers, pattern, backend, call, args)
            args.async_op = mode == "async"
            warm_up(call, backend, args, config.warmup)
            local_seconds: list[float] = []
            for count in _segments(config.iters, config.check_every if checker else 0):
                local_seconds.extend(TIMED_LOOPS[mode](call, backend, args, count))
                if checker is not None:
                    checker.run(mode)
            per_rank = backend.all_gather_floats(local_seconds)
        except (RunError, UsageError):
            raise
        except Exception as exc:  # a backend error after the probe succeeded: name what failed, where
            detail = ", ".join(part for part in (dtype, op, placement, mode) if part)
            raise RunError(f"{collective.name} ({detail}) failed at size {format_size(size.used)} on rank "
                           f"{rank}: {_first_line(exc)}") from exc
        rows.append(_make_row(config, backend, collective, dtype, op, placement, mode, size, layout,
                              seconds=slowest_rank_per_iteration(per_rank), checker=checker))
    return rows


def _make_row(config: RunConfig, backend: Backend, collective: Collective, dtype: str, op: str,
              placement: str, mode: str, size: PlannedSize, layout: Layout,
              seconds: list[float] | None = None, checker: Checker | None = None, error: str = "") -> Row:
    factor = collective.busbw_factor(backend.world_size)
    timing: dict[str, Any] = dict.fromkeys(("time_us_p50", "time_us_p95", "time_us_min", "time_us_max",
                                            "time_us_mean", "algbw_gbps", "busbw_gbps"))
    samples_us: list[float] = []
    if seconds is not None:
        scale = collective.time_scale(layout)  # ping_pong: half a round trip; windows: per message
        samples_us = [round(value * scale * 1e6, 3) for value in seconds]  # the clocks resolve ns
        summary = summarize(samples_us)
        algbw = algbw_gbps(size.used, summary.p50 * 1e-6)
        timing = {"time_us_p50": summary.p50, "time_us_p95": summary.p95, "time_us_min": summary.min,
                  "time_us_max": summary.max, "time_us_mean": summary.mean, "algbw_gbps": algbw,
                  "busbw_gbps": None if algbw is None else algbw * factor}
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
        busbw_factor=factor,
        placement=placement,
        wrong=None if checker is None else checker.wrong,
        first_wrong="" if checker is None else checker.first_wrong,
        error=error,
        samples_us=samples_us,
        **timing,
    )
