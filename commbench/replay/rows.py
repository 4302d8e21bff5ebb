"""Rows of a replay, through the one row builder (commbench.results.rows): one per row key (group, collective,
dtype, elements per rank, root; for point-to-point the ordered pair of ranks), and two per pass.

Definitions (docs/replay.md): a key's samples are its operations' times, one per operation and pass,
each the largest over the ranks that issued it (both sides of a message), so ``iters`` counts operations
timed; ``ops`` is how many operations of the key one pass holds; time_us_* are per operation;
rank_mean_us follows group_ranks' order. The pass rows (collective 'pass') hold one sample per pass,
the largest over ranks: phase 'comm' the sum of the rank's step times (its communication time per
replayed step), phase 'wall' the pass from its barrier to its end, gaps included. ``recorded_us`` is the
mean recorded duration of the key's operations where the recording measured them.
"""

from dataclasses import dataclass

from commbench.measure.collectives import REGISTRY
from commbench.measure.sampling import Sampled
from commbench.replay.execute import RankTimes
from commbench.replay.mapping import ReplayOp, ReplayPlan
from commbench.replay.model import PATTERN
from commbench.results.model import Row
from commbench.results.rows import make_row

PASS = "pass"


@dataclass(frozen=True)
class RowContext:
    backend: str
    device: str
    world_size: int
    warmup: int
    iters: int


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
            if not record.ranks or record.ranks[-1] != rank:  # ranks come in order: each once
                record.ranks.append(rank)
            if op.recorded_us is not None:
                record.recorded_us.append(op.recorded_us)
    return found


def op_row(ctx: RowContext, plan: ReplayPlan, record: KeyRecord, seconds: list[list[float]],
           wrong: tuple[int, str] | None) -> Row:
    """``seconds``: per rank of ``record.ranks``, the key's operations pass after pass."""
    op, recorded = record.op, record.recorded_us
    collective = REGISTRY[op.collective]
    members = plan.group(op.group).members if op.group else tuple(record.ranks)
    per_pass = len(seconds[0]) // ctx.iters
    return make_row(Sampled(seconds, len(seconds[0])), collective=op.collective, backend=ctx.backend,
                    device=ctx.device, world_size=ctx.world_size, dtype=op.dtype, mode="sync",
                    op="sum" if collective.reduces else "", size_bytes=op.size_bytes,
                    requested_bytes=op.size_bytes, count_per_rank=op.count_per_rank, warmup=ctx.warmup,
                    busbw_factor=collective.busbw_factor(len(members)), group_size=len(members),
                    group_layout="world" if len(members) == ctx.world_size else "recorded",
                    placement=collective.default_placement, root=op.root if collective.rooted else -1,
                    wrong=None if wrong is None else wrong[0], first_wrong="" if wrong is None else wrong[1],
                    pattern=PATTERN, ops=per_pass, group_name=op.key[0],
                    group_ranks=",".join(map(str, members)),
                    recorded_us=sum(recorded) / len(recorded) if recorded else None)


def pass_row(ctx: RowContext, phase: str, seconds: list[list[float]], op_rows: list[Row]) -> Row:
    """One of the two pass rows; ``seconds``: per rank, one value per pass."""
    return make_row(Sampled(seconds, ctx.iters), collective=PASS, backend=ctx.backend, device=ctx.device,
                    world_size=ctx.world_size, dtype="", mode="sync", op="", size_bytes=0, requested_bytes=0,
                    count_per_rank=0, warmup=ctx.warmup, busbw_factor=1.0, placement="", pattern=PATTERN,
                    phase=phase, ops=sum(row.ops or 0 for row in op_rows), group_name="",
                    group_ranks=",".join(map(str, range(ctx.world_size))))


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
