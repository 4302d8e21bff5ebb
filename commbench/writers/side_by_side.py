"""The console's side-by-side table: one collective, dtype, op and placement by every implementation
that ran it, p50 per size (and mode) in a column per implementation, the fastest named; under it the
implementations that could not run with their reasons, the fallbacks, and where --check found their
outputs differ. One line stands for a table whose implementation could not run at all."""

from commbench.core.sizes import format_size
from commbench.measure.impls import REFERENCE_IMPL
from commbench.results.model import Row
from commbench.results.side_by_side import (
    compare_sizes,
    copied_inputs,
    implementations,
    output_differences,
    unavailable,
)
from commbench.writers.console import TextTable


def _p50(row: Row | None) -> str:
    if row is None:
        return "-"
    if row.error:
        return "n/a"
    return "-" if row.time_us_p50 is None else f"{row.time_us_p50:.1f}"


def side_by_side_table(rows: list[Row]) -> TextTable:
    """The comparison of ``rows`` (several implementations of one collective, dtype, op, placement)."""
    names = [name for name in implementations(rows)
             if not unavailable([row for row in rows if row.impl == name])]
    points = compare_sizes(rows)
    modes = list(dict.fromkeys(point.mode for point in points))
    compared = [name for name in names if name != REFERENCE_IMPL] if REFERENCE_IMPL in names else []
    columns = ["size", *(["mode"] if len(modes) > 1 else []), *(f"{name} µs" for name in names), "fastest",
               *(f"{name} vs {REFERENCE_IMPL}" for name in compared)]
    cells = []
    for point in points:
        line = [format_size(point.size_bytes), *([point.mode] if len(modes) > 1 else [])]
        line += [_p50(point.rows.get(name)) for name in names]
        line.append(point.fastest or "-")
        line += [_ratio(point.speedup(name)) for name in compared]
        cells.append(line)
    first = rows[0]
    title = " · ".join(part for part in ("implementations", first.benchmark, first.collective, first.dtype,
                                         f"op {first.op}" if first.op else "", first.placement) if part)
    return TextTable(title, columns, cells, left_columns=2 if len(modes) > 1 else 1, footer=_footer(rows))


def _ratio(speedup: float | None) -> str:
    return "-" if speedup is None else f"{speedup:.2f}x"


def _footer(rows: list[Row]) -> list[str]:
    lines = []
    for name in implementations(rows):
        mine = [row for row in rows if row.impl == name]
        reason = unavailable(mine)
        if reason:
            lines.append(f"{name} unavailable: {reason}")
            continue
        fallbacks = [row for row in mine if row.impl_status == "fallback"]
        if fallbacks:
            lines.append(f"{name}: fallback at {len(fallbacks)} of {len(mine)} rows: "
                         f"{fallbacks[0].impl_note}")
    legend = (f"fastest: the smallest p50 at that size; vs {REFERENCE_IMPL}: {REFERENCE_IMPL}'s p50 / the "
              "implementation's (above 1: faster)")
    copies = copied_inputs(rows)
    return lines + output_differences(rows) + ([copies] if copies else []) + [legend]
