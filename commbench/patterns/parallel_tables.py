"""Console tables for the activation patterns' rows (tp, moe, pp, 3d), read from rows only.

1. Per collective: each (group, unit, phase, collective) row's calls, bytes and p50 time per step, with a
   MoE layer's imbalance.
2. The step: p50, p95, min and max, the time inside and outside collectives, bytes moved, and the
   pattern's own number (MoE's imbalance, the pipeline's bubble).
3. 3D: each group's communication per step and the critical path's split.
"""

from rich.table import Table

from commbench.core.words import plural
from commbench.results.model import Row

LEFT = ("group", "unit", "phase", "collective", "part")


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ms(value_us: float | None) -> str:
    """A step's time in milliseconds: steps take milliseconds to seconds."""
    return "-" if value_us is None else f"{value_us / 1e3:.2f}"


def _mib(size_bytes: int) -> str:
    return f"{size_bytes / 2**20:.3f}"


def parallel_tables(rows: list[Row]) -> list:
    first = next((row for row in rows if row.phase == "step"), rows[0])  # its dtype is the activations'
    where = (f"{first.pattern} · {first.variant} · {first.model} · {first.dtype} · "
             f"{plural(first.world_size, 'rank')}")
    found = [collective_table(rows, where), step_table(rows, where)]
    groups = [row for row in rows if row.phase in ("comm", "critical path")]
    if groups:
        found.append(group_table(groups, where))
    return found


def collective_table(rows: list[Row], where: str) -> Table:
    parts = [row for row in rows if row.collective != "step"]
    table = Table(title=f"{where} · per collective, p50 µs per step", title_justify="left",
                  header_style="bold")
    routed = any(row.imbalance is not None for row in parts)
    for name in ("group", "unit", "phase", "collective", "calls", "MiB", "p50 µs", "busbw GB/s",
                 *(["imbalance"] if routed else [])):
        table.add_column(name, justify="left" if name in LEFT else "right")
    for row in parts:
        busbw = "-" if row.busbw_gbps is None else f"{row.busbw_gbps:.3f}"
        cells = [row.parallel or "world", row.unit or "-", row.phase, row.collective, str(row.calls_per_step),
                 _mib(row.size_bytes), _us(row.time_us_p50), busbw]
        if routed:
            cells.append("-" if row.imbalance is None else f"{row.imbalance:.2f}")
        table.add_row(*cells)
    return table


def step_table(rows: list[Row], where: str) -> Table:
    step = next(row for row in rows if row.phase == "step")
    inside = next((row for row in rows if row.phase == "collectives"), None)
    table = Table(title=f"{where} · time per step", title_justify="left", header_style="bold")
    names = ["collectives", "step p50 ms", "p95 ms", "min ms", "max ms", "in collectives ms", "MiB moved"]
    extra = ("imbalance", f"{step.imbalance:.2f}") if step.imbalance is not None else \
        ("bubble %", f"{step.bubble_pct:.1f}") if step.bubble_pct is not None else None
    for name in names + ([extra[0]] if extra else []):
        table.add_column(name, justify="right")
    cells = [str(step.calls_per_step), *(_ms(value) for value in (step.time_us_p50, step.time_us_p95,
                                                                  step.time_us_min, step.time_us_max)),
             _ms(None if inside is None else inside.time_us_p50), _mib(step.size_bytes)]
    table.add_row(*cells, *([extra[1]] if extra else []))
    return table


def group_table(rows: list[Row], where: str) -> Table:
    table = Table(title=f"{where} · per group and the critical path, p50 ms per step", title_justify="left",
                  header_style="bold")
    for name in ("part", "all ranks' largest µs", "critical path µs"):
        table.add_column(name, justify="left" if name in LEFT else "right")
    names = list(dict.fromkeys(row.parallel or row.unit for row in rows))
    for name in names:
        comm = next((row for row in rows if row.phase == "comm" and row.parallel == name), None)
        path = next((row for row in rows
                     if row.phase == "critical path" and (row.parallel or row.unit) == name), None)
        table.add_row(name, _ms(None if comm is None else comm.time_us_p50),
                      _ms(None if path is None else path.time_us_p50))
    return table
