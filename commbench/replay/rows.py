"""Rows of a replay: one per row key (group, collective, dtype, shape, root; for point-to-point the
ordered pair of ranks), and two per pass.

Definitions (docs/replay.md): a key's samples are its operations' times, one per operation and pass,
each the largest over the ranks that issued it (both sides of a message); ``ops`` is how many
operations of the key one pass holds; time_us_* are per operation. The pass rows (collective 'pass')
hold one sample per pass, the largest over ranks: phase 'comm' the sum of the rank's step times (its
communication time per replayed step), phase 'wall' the pass from its barrier to its end, gaps included.
``recorded_us`` is the mean recorded duration of the key's operations where the recording measured them.
"""

from dataclasses import dataclass

from commbench.collectives import REGISTRY
from commbench.replay.execute import RankTimes
from commbench.replay.mapping import ReplayOp, ReplayPlan
from commbench.results import Row
from commbench.stats import algbw_gbps, summarize

PATTERN = "replay"
PASS = "pass"


@dataclass(frozen=True)
class RowContext:
    backend: str
    device: str
    world_size: int
    warmup: int
    iters: int


def _microseconds(seconds: list[float]) -> list[float]:
    return [round(value * 1e6, 3) for value in seconds]


def _slowest(series: list[list[float]]) -> list[float]:
    """Element by element, the largest over ranks (lists of one key have one length on every rank)."""
    return [max(values) for values in zip(*series, strict=True)]


def _timed_fields(samples_us: list[float], size_bytes: int, busbw_factor: float | None) -> dict:
    summary = summarize(samples_us)
    algbw = algbw_gbps(size_bytes, summary.p50 * 1e-6) if busbw_factor is not None else None
    return dict(time_us_p50=summary.p50, time_us_p95=summary.p95, time_us_min=summary.min,
                time_us_max=summary.max, time_us_mean=summary.mean, algbw_gbps=algbw,
                busbw_gbps=None if algbw is None or busbw_factor is None else algbw * busbw_factor,
                samples=len(samples_us), time_us_p99=summary.p99, time_us_stdev=summary.stdev,
                time_us_cv=summary.cv, ci95_rel=summary.ci95_rel, samples_us=samples_us)


def _members(plan: ReplayPlan, op: ReplayOp, ranks: list[int]) -> tuple[int, ...]:
    return plan.group(op.group).members if op.group else tuple(sorted(ranks))


@dataclass
class KeyRecord:
    """What the plan says about one row key: its first operation, the ranks that issue it, and the
    durations the recording gave its operations."""

    op: ReplayOp
    ranks: list[int]
    recorded_us: list[float]


def _key_records(plan: ReplayPlan) -> dict[tuple, KeyRecord]:
    """Every key, in the order keys first appear (rank 0's operations first)."""
    found: dict[tuple, KeyRecord] = {}
    for rank in range(plan.world_size):
        for op in plan.ops[rank]:
            record = found.setdefault(op.key, KeyRecord(op, [], []))
            if rank not in record.ranks:
                record.ranks.append(rank)
            if op.recorded_us is not None:
                record.recorded_us.append(op.recorded_us)
    return found


def op_row(ctx: RowContext, plan: ReplayPlan, record: KeyRecord, seconds: list[list[float]],
           wrong: tuple[int, str] | None) -> Row:
    op, recorded = record.op, record.recorded_us
    collective = REGISTRY[op.collective]
    members = _members(plan, op, record.ranks)
    size = op.size_bytes
    factor = collective.busbw_factor(len(members))
    samples_us = _microseconds(_slowest(seconds))
    return Row(collective=op.collective, backend=ctx.backend, device=ctx.device, world_size=ctx.world_size,
               dtype=op.dtype, mode="sync", op="sum" if collective.reduces else "", size_bytes=size,
               requested_bytes=size, count_per_rank=op.count_per_rank, iters=ctx.iters, warmup=ctx.warmup,
               busbw_factor=factor, **_timed_fields(samples_us, size, factor),
               group_size=len(members),
               group_layout="world" if len(members) == ctx.world_size else "recorded",
               placement=collective.placements[0], root=op.root if collective.rooted else -1,
               wrong=None if wrong is None else wrong[0], first_wrong="" if wrong is None else wrong[1],
               pattern=PATTERN, ops=len(samples_us) // ctx.iters, group_name=op.key[0],
               group_ranks=",".join(map(str, members)),
               recorded_us=sum(recorded) / len(recorded) if recorded else None)


def pass_row(ctx: RowContext, phase: str, seconds: list[list[float]], op_rows: list[Row]) -> Row:
    size = sum(row.size_bytes * (row.ops or 0) for row in op_rows)
    timed = _timed_fields(_microseconds(_slowest(seconds)), size, None)
    return Row(collective=PASS, backend=ctx.backend, device=ctx.device, world_size=ctx.world_size, dtype="",
               mode="sync", op="", size_bytes=size, requested_bytes=size, count_per_rank=0, iters=ctx.iters,
               warmup=ctx.warmup, busbw_factor=1.0, **timed,
               placement="", pattern=PATTERN, phase=phase, ops=sum(row.ops or 0 for row in op_rows),
               group_name="", group_ranks=",".join(map(str, range(ctx.world_size))))


def build_rows(ctx: RowContext, plan: ReplayPlan, times: list[RankTimes],
               wrong: list[dict[tuple, tuple[int, str]]] | None) -> list[Row]:
    """Every key's row, in the order keys first appear (rank 0's operations first), then the pass rows."""
    rows = []
    for key, record in _key_records(plan).items():
        merged = None
        if wrong is not None:
            found = [wrong[rank][key] for rank in record.ranks if key in wrong[rank]]
            merged = (sum(count for count, _ in found), next((text for _, text in found if text), "")) \
                if found else None
        seconds = [times[rank].op_seconds[key] for rank in record.ranks]
        rows.append(op_row(ctx, plan, record, seconds, merged))
    rows.append(pass_row(ctx, "comm", [item.comm_seconds for item in times], rows))
    rows.append(pass_row(ctx, "wall", [item.wall_seconds for item in times], rows[:-1]))
    return rows
