"""Console tables for pattern rows (read from rows only, so they work on saved results too); the
activation patterns' are in parallel_tables.py, these are FSDP's.

1. Per unit: the all-gather times (forward, backward) and the reduce-scatter time of each bucketing side
   by side, p50 milliseconds per step (an FSDP step takes milliseconds to seconds: no time is in µs).
2. Per bucketing (a column each): time per step, the collectives it issued, the time spent outside
   collectives and bytes moved; a closing line names the fastest bucketing.
3. With --overlap: compute alone, communication alone, both, and the overlap percentage.
"""

from rich.table import Table

from commbench.core.words import plural
from commbench.measure.stats import summarize
from commbench.patterns.config import FSDP
from commbench.results.model import Row

FLUSH_LABEL = "(end of backward)"


def _ms(value_us: float | None) -> str:
    """Microseconds shown as milliseconds: 1548801.4 µs -> 1548.80."""
    return "-" if value_us is None else f"{value_us / 1e3:.2f}"


def _bucket_name(label: str) -> str:
    return "per unit" if label == "unit" else f"{label} MiB"


def _pooled_p50(rows: list[Row]) -> float | None:
    samples = [value for row in rows for value in row.samples_us if value is not None]
    return summarize(samples).p50 if samples else None


def fsdp_tables(rows: list[Row]) -> list:
    """Renderables for one FSDP run's rows: its tables and a closing line naming the best bucketing."""
    rows = [row for row in rows if row.pattern == FSDP]
    if not rows:
        return []
    buckets = list(dict.fromkeys(row.bucket_mb for row in rows))
    first = rows[0]
    scatter = next((row for row in rows if row.collective.startswith("reduce_scatter")), first)
    reduction = "avg" if scatter.op == "avg" else \
        f"predivide {first.predivide:g} · postdivide {first.postdivide:g}"
    where = (f"{first.variant or first.pattern} · {first.model} · {first.dtype} · "
             f"{plural(first.world_size, 'rank')} · {reduction}")
    found = [unit_table(rows, buckets, where), step_table(rows, buckets, where)]
    overlap = overlap_table(rows, buckets, where)
    if overlap is not None:
        found.append(overlap)
    best = best_line(rows)
    if best:
        found.append(best)
    return found


def unit_table(rows: list[Row], buckets: list[str], where: str) -> Table:
    sync = [row for row in rows if row.mode == "sync" and row.phase in ("forward", "backward", "flush")]
    units = list(dict.fromkeys(row.unit for row in sync if row.phase == "forward"))
    gathers: dict[tuple[str, str], list[Row]] = {}  # every bucketing's steps ran the same all-gathers
    for row in sync:
        if row.collective.startswith("all_gather"):
            gathers.setdefault((row.unit, row.phase), []).append(row)
    scatters: dict[tuple[str, str], Row] = {}
    for row in sync:
        if row.collective.startswith("reduce_scatter"):
            scatters[(row.unit, row.bucket_mb)] = row
    table = Table(title=f"{where} · per unit, p50 ms per step", title_justify="left", header_style="bold")
    for name in ("unit", "MiB", "elems/rank", "all-gather fwd", "all-gather bwd"):
        table.add_column(name, justify="left" if name == "unit" else "right")
    for bucket in buckets:
        table.add_column(f"reduce-scatter {_bucket_name(bucket)}", justify="right")
    totals = [0.0] * (2 + len(buckets))
    for unit in units:
        forward = gathers.get((unit, "forward"), [])
        backward = gathers.get((unit, "backward"), [])
        size = forward[0].size_bytes if forward else 0
        cells = [unit, f"{size / 2**20:.2f}", str(forward[0].count_per_rank) if forward else "-"]
        for index, value in enumerate((_pooled_p50(forward), _pooled_p50(backward))):
            cells.append(_ms(value))
            totals[index] += value or 0.0
        for index, bucket in enumerate(buckets):
            cells.append(_scatter_cell(scatters.get((unit, bucket))))
            totals[2 + index] += _p50(scatters.get((unit, bucket)))
        table.add_row(*cells)
    if any(("", bucket) in scatters for bucket in buckets):
        cells = [FLUSH_LABEL, "", "", "", ""]
        for index, bucket in enumerate(buckets):
            cells.append(_scatter_cell(scatters.get(("", bucket))))
            totals[2 + index] += _p50(scatters.get(("", bucket)))
        table.add_row(*cells)
    table.add_row("total", "", "", *(_ms(value) for value in totals), style="bold")
    return table


def _p50(row: Row | None) -> float:
    return 0.0 if row is None else row.time_us_p50


def _scatter_cell(row: Row | None) -> str:
    if row is None:
        return "-"
    calls = f" ({row.calls_per_step})" if row.calls_per_step and row.calls_per_step > 1 else ""
    return f"{_ms(row.time_us_p50)}{calls}"


def step_table(rows: list[Row], buckets: list[str], where: str) -> Table:
    """A row per measure and a column per bucketing, so that it fits 100 columns up to six bucketings (the
    closing line names the fastest)."""
    table = Table(title=f"{where} · time per step", title_justify="left", header_style="bold")
    table.add_column("per step", justify="left")
    measures = [[name] for name in ("collectives", "reduce-scatters", "step p50 ms", "p95 ms", "min ms",
                                    "max ms", "in collectives ms", "outside ms", "MiB moved", "algbw GB/s")]
    for bucket in buckets:
        step = _find(rows, bucket, "sync", "step")
        if step is None:
            continue
        table.add_column(_bucket_name(bucket), justify="right")
        collectives = _find(rows, bucket, "sync", "collectives")
        scatters = sum(row.calls_per_step or 0 for row in rows if row.bucket_mb == bucket
                       and row.mode == "sync" and row.collective.startswith("reduce_scatter"))
        inside = None if collectives is None else collectives.time_us_p50
        algbw = "-" if step.algbw_gbps is None else f"{step.algbw_gbps:.3f}"
        cells = [str(step.calls_per_step), str(scatters), _ms(step.time_us_p50), _ms(step.time_us_p95),
                 _ms(step.time_us_min), _ms(step.time_us_max), _ms(inside), _ms(_outside(step, collectives)),
                 f"{step.size_bytes / 2**20:.1f}", algbw]
        for measure, cell in zip(measures, cells, strict=True):
            measure.append(cell)
    for measure in measures:
        table.add_row(*measure)
    return table


def _outside(step: Row, collectives: Row | None) -> float | None:
    """p50 over steps of the time outside collectives (divisions, copies into buckets, callbacks)."""
    if collectives is None or len(step.samples_us) != len(collectives.samples_us) or not step.samples_us:
        return None
    return summarize([total - inside for total, inside in zip(step.samples_us, collectives.samples_us,
                                                               strict=True)]).p50


def overlap_table(rows: list[Row], buckets: list[str], where: str) -> Table | None:
    if not any(row.phase == "comm+compute" for row in rows):
        return None
    table = Table(title=f"{where} · overlap (async collectives, a matmul per unit and pass)",
                  title_justify="left", header_style="bold")
    for name in ("bucketing", "matmul N", "compute ms", "comm ms", "both ms", "overlap %"):
        table.add_column(name, justify="left" if name == "bucketing" else "right")
    for bucket in buckets:
        comm, compute, both = (_find(rows, bucket, "async", phase)
                               for phase in ("comm", "compute", "comm+compute"))
        if None in (comm, compute, both):
            continue
        table.add_row(_bucket_name(bucket), str(both.compute_size), _ms(compute.time_us_p50),
                      _ms(comm.time_us_p50), _ms(both.time_us_p50),
                      "-" if both.overlap_pct is None else f"{both.overlap_pct:.1f}")
    return table


def _find(rows: list[Row], bucket: str, mode: str, phase: str) -> Row | None:
    return next((row for row in rows if row.bucket_mb == bucket and row.mode == mode and row.phase == phase),
                None)


def best_line(rows: list[Row]) -> str:
    """'best bucketing: ...' when more than one bucketing was measured."""
    steps = [row for row in rows if row.mode == "sync" and row.phase == "step"]
    if len(steps) < 2:
        return ""
    best = min(steps, key=lambda row: row.time_us_p50)
    worst = max(steps, key=lambda row: row.time_us_p50)
    ratio = worst.time_us_p50 / best.time_us_p50 if best.time_us_p50 > 0 else float("inf")
    return (f"best bucketing: {_bucket_name(best.bucket_mb)} ({_ms(best.time_us_p50)} ms per step, p50); "
            f"the slowest, {_bucket_name(worst.bucket_mb)}, takes {ratio:.2f}x as long")
