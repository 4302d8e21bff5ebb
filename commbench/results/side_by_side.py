"""Implementations side by side: the rows of one collective, dtype, op and placement measured by several
implementations, compared per size and mode (pure: on rows, for the console and the report), each one's
speed against the registry's reference (REFERENCE_IMPL, torch.distributed's own call).

The fastest implementation at a size is the one with the smallest p50 among the rows that were
measured (not refused, not failed). With --check, two implementations whose outputs hash differently at
a size accumulated in another order (or one is wrong: its row's ``wrong`` says which).
"""

from dataclasses import dataclass

from commbench.core.sizes import format_size
from commbench.measure.collectives.base import OUT_OF_PLACE
from commbench.measure.impls import REFERENCE_IMPL, REGISTRY
from commbench.results.model import Row


@dataclass(frozen=True)
class SizeComparison:
    """One size and mode: each implementation's row (None: it has no row there) and the fastest."""

    size_bytes: int
    mode: str
    rows: dict[str, Row | None]

    @property
    def fastest(self) -> str | None:
        timed = {name: row.time_us_p50 for name, row in self.rows.items()
                 if row is not None and row.time_us_p50 is not None and not row.error}
        return min(timed, key=lambda name: timed[name]) if timed else None

    def speedup(self, name: str) -> float | None:
        """How many times faster ``name`` is than the reference here (None when either has no time)."""
        mine, base = self.rows.get(name), self.rows.get(REFERENCE_IMPL)
        if mine is None or base is None or not mine.time_us_p50 or base.time_us_p50 is None:
            return None
        return base.time_us_p50 / mine.time_us_p50


def unavailable(rows: list[Row]) -> str | None:
    """The reason, when every row of a table is an implementation that could not run; else None."""
    if rows and all(row.impl_status == "unavailable" for row in rows):
        return rows[0].error
    return None


def implementations(rows: list[Row]) -> list[str]:
    return list(dict.fromkeys(row.impl for row in rows))


def compare_sizes(rows: list[Row]) -> list[SizeComparison]:
    """Per (size, mode), in the order measured, each implementation's row."""
    names = implementations(rows)
    found: dict[tuple[int, str], dict[str, Row | None]] = {}
    for row in rows:
        found.setdefault((row.size_bytes, row.mode), dict.fromkeys(names))[row.impl] = row
    return [SizeComparison(size, mode, by_impl) for (size, mode), by_impl in found.items()]


def output_differences(rows: list[Row]) -> list[str]:
    """--check: where implementations' outputs differ, one line per size and mode; [] when they agree."""
    lines = []
    for point in compare_sizes(rows):
        digests = {name: row.output_digest for name, row in point.rows.items() if row and row.output_digest}
        groups: dict[str, list[str]] = {}
        for name, digest in digests.items():
            groups.setdefault(digest, []).append(name)
        if len(groups) > 1:
            parts = " vs ".join("+".join(names) for names in groups.values())
            first = next(row for row in point.rows.values() if row is not None)
            lines.append(f"--check: {first.collective} {first.dtype} at {format_size(point.size_bytes)} "
                         f"{point.mode}: outputs differ bitwise between {parts} (each within --check's "
                         "tolerance: they accumulate in another order)")
    return lines


def copied_inputs(rows: list[Row]) -> str | None:
    """Out of place, what each implementation's time holds: a line when some copy the input into the
    output before an op that works in place and others write the output themselves (None otherwise)."""
    first = rows[0] if rows else None
    if first is None or first.placement != OUT_OF_PLACE:
        return None
    measured = [name for name in implementations(rows) if name in REGISTRY
                and not unavailable([row for row in rows if row.impl == name])]
    copying = [name for name in measured if first.collective in REGISTRY[name].copies_out_of_place]
    direct = [name for name in measured if name not in copying]
    if not copying or not direct:
        return None
    return (f"out of place: {', '.join(copying)} time a copy of the input into the output and then "
            f"{first.collective} in place (it works in place); {', '.join(direct)} write the output "
            "directly: the difference includes that copy")
