"""The console summary of a replay, as lines (rank 0 prints them as notes): the pass time, the
operations that take most of the communication time, and what was skipped or assumed.

A row's share is its p50 time per operation times its operations per pass, over the same product
summed over every operation row.
"""

from commbench.core.sizes import format_size, readable_size
from commbench.core.words import plural
from commbench.replay.mapping import ReplayPlan
from commbench.replay.model import Trace
from commbench.replay.rows import PASS
from commbench.results.model import Row

TOP = 5


def _ms(microseconds: float | None) -> str:
    return "-" if microseconds is None else f"{microseconds / 1e3:.3f} ms"


def _pass_row(rows: list[Row], phase: str) -> Row:
    return next(row for row in rows if row.collective == PASS and row.phase == phase)


def _weight(row: Row) -> float:
    return (row.time_us_p50 or 0.0) * (row.ops or 0)


def top_lines(op_rows: list[Row], top: int = TOP) -> list[str]:
    total = sum(_weight(row) for row in op_rows)
    lines = ["top operations by share of communication time (p50 x operations per pass):"]
    for row in sorted(op_rows, key=_weight, reverse=True)[:top]:
        share = 100 * _weight(row) / total if total else 0.0
        recorded = "" if row.recorded_us is None else f" (recorded {row.recorded_us:.1f} µs)"
        dtype = f" {row.dtype}" if row.dtype else ""
        size = readable_size(row.size_bytes)  # a recorded op's size is rarely a whole unit
        lines.append(f"  {share:5.1f}%  {row.collective}{dtype} {size} x{row.ops} in {row.group_name}: "
                     f"{row.time_us_p50 or 0:.1f} µs/op{recorded}")
    return lines


def summary_lines(trace: Trace, plan: ReplayPlan, rows: list[Row]) -> list[str]:
    op_rows = [row for row in rows if row.collective != PASS]
    comm, wall = _pass_row(rows, "comm"), _pass_row(rows, "wall")
    lines = [f"replay of {trace.source} ({trace.format}, recorded on {plural(trace.world_size, 'rank')}) "
             f"on {plural(plan.world_size, 'rank')}: {plural(comm.ops, 'operation')} per pass in "
             f"{plural(len(op_rows), 'row')}, {plural(comm.iters, 'pass')} after {comm.warmup} warm-up",
             f"pass time: p50 {_ms(wall.time_us_p50)} wall, of which {_ms(comm.time_us_p50)} communication "
             "(the slowest rank's sum of its operations' times)"]
    lines.extend(top_lines(op_rows))
    skipped = trace.skipped + plan.unmapped
    if skipped:
        listed = ", ".join(f"{name} x{count}" for name, count in skipped.most_common())
        lines.append(f"not replayed: {listed}")
    lines.extend(trace.notes + plan.notes)
    line = check_line(op_rows)
    return lines + ([line] if line else [])


def check_line(op_rows: list[Row]) -> str:
    """'--check: 8 rows checked, every element right', or how many elements were wrong and where."""
    checked = [row for row in op_rows if row.wrong is not None]
    if not checked:
        return ""
    wrong = sum(row.wrong or 0 for row in checked)
    if not wrong:
        return f"--check: {plural(len(checked), 'row')} checked, every element right"
    failing = [row for row in checked if row.wrong]
    return (f"--check: {plural(len(checked), 'row')} checked, {plural(wrong, 'wrong element')} in "
            f"{len(failing)} of them "
            f"(first: {failing[0].collective} {format_size(failing[0].size_bytes)} in {failing[0].group_name}"
            f"{': ' + failing[0].first_wrong if failing[0].first_wrong else ''})")
