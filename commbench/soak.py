"""Soak: repeat a run until a duration has passed (or a number of passes), every row stamped with when
it was measured.

Invariants: rank 0's clock decides. Each pass runs to its end on every rank, then rank 0 says whether
time is left and every rank follows its answer, so no rank starts a pass the others skip. At least one
pass runs; a pass starts only while time is left (and fewer than ``passes`` have run), so the last may
end after the duration. Rows reach the output as they are measured (a pass never holds them back), so
an interrupted soak keeps every row it measured. A row's ``elapsed_s`` is seconds from the soak's start
to the moment it reached the output, on that rank's clock; ``repeat`` is its pass, from 0.
"""

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from commbench.errors import UsageError
from commbench.results import Row

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.output import Output

_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")


def parse_duration(text: str) -> float:
    """Seconds from '10m', '90s', '1h30m', '2h' or a bare number of seconds; UsageError otherwise."""
    spec = text.strip().lower()
    parts = list(_PART_RE.finditer(spec))
    if not spec or "".join(part.group(0) for part in parts) != spec:
        raise UsageError(f"--duration {text!r}: expected a time such as 90s, 10m, 1h30m or 2h")
    seconds = sum(float(part.group(1)) * _UNIT_SECONDS[part.group(2) or "s"] for part in parts)
    if seconds <= 0:
        raise UsageError(f"--duration {text!r} must be above 0 seconds")
    return seconds


class StampedOutput:
    """Passes everything on to ``inner``; each row first gets ``elapsed_s`` and ``repeat``, and a copy is
    kept in ``rows`` (the stamped rows, in the order they arrived)."""

    def __init__(self, inner: "Output", started: float) -> None:
        self.inner = inner
        self.started = started
        self.repeat = 0
        self.rows: list[Row] = []

    def row(self, row: Row) -> None:
        stamped = replace(row, elapsed_s=round(time.monotonic() - self.started, 3), repeat=self.repeat)
        self.rows.append(stamped)
        self.inner.row(stamped)

    def note(self, text: str) -> None:
        self.inner.note(text)

    def table_done(self, rows: list[Row]) -> None:
        self.inner.table_done(rows)

    def plan(self, steps: int) -> None:
        self.inner.plan(steps)

    def working(self, text: str) -> None:
        self.inner.working(text)

    def section(self, name: str, payload: dict) -> None:
        self.inner.section(name, payload)


def repeat_until(duration_s: float | None, run_pass: "Callable[[Output], object]", output: "Output",
                 backend: "Backend", after_pass: Callable[[list[Row]], None] | None = None,
                 passes: int | None = None) -> list[Row]:
    """Call ``run_pass(stamped_output)`` again and again until ``duration_s`` seconds have passed on
    rank 0's clock or ``passes`` passes have run (neither given: once); return every stamped row, in
    order. ``after_pass`` gets the rows so far after each pass (to publish a running analysis). Every
    rank must call this together, with the same arguments."""
    stamped = StampedOutput(output, time.monotonic())
    while True:
        run_pass(stamped)
        if after_pass is not None:
            after_pass(list(stamped.rows))
        if passes is not None and stamped.repeat + 1 >= passes:
            return stamped.rows
        if duration_s is None and passes is None:
            return stamped.rows
        if duration_s is not None and not backend.broadcast_object(
                time.monotonic() - stamped.started < duration_s, root=0):
            return stamped.rows
        stamped.repeat += 1


MIN_PASSES = 3  # fewer passes give a row no median of its own to compare with
SPIKE_FACTOR = 2.0  # a pass's p50 at least this many times its own median (and beyond 4 scaled MADs)


@dataclass(frozen=True)
class TimeSpike:
    """The passes in which one measurement (a row's key: collective, dtype, size, ...) took far longer
    than its own median over the soak."""

    label: str  # 'all_reduce (float32, sum, in-place, sync) at 64 KiB'
    passes: list[int]
    elapsed_s: list[float | None]
    total: int  # passes measured
    median_us: float
    worst_ratio: float

    def describe(self) -> str:
        when = ", ".join(f"{value:.0f} s" for value in self.elapsed_s if value is not None)
        return (f"{self.label}: {len(self.passes)} of {self.total} passes slower than its median "
                f"{self.median_us:.1f} µs, worst {self.worst_ratio:.2f}x" + (f" (at {when})" if when else ""))


def time_spikes(rows: list[Row], factor: float = SPIKE_FACTOR) -> list[TimeSpike]:
    """Every measurement of a soak (3 passes or more) whose p50 spiked in some passes, the most
    often first: the outlier rule of fabric (commbench.fabric.outliers) on each key's own passes."""
    from commbench.fabric.outliers import LATENCY, is_slow, relative, robust_spread
    from commbench.rows import describe_row

    by_key: dict[tuple, list[Row]] = {}
    for row in rows:
        if row.time_us_p50 is not None and not row.error:
            by_key.setdefault(row.key(), []).append(row)
    spikes = []
    for series in by_key.values():
        if len({row.repeat for row in series}) < MIN_PASSES:
            continue
        values = [row.time_us_p50 for row in series]
        median, sigma = robust_spread(values)
        off = [row for row, value in zip(series, values, strict=True)
               if is_slow(value, median, sigma, LATENCY, factor)]
        if off:
            worst = max(relative(row.time_us_p50, median) for row in off)
            spikes.append(TimeSpike(describe_row(series[0]), [row.repeat for row in off],
                                    [row.elapsed_s for row in off], len(series), median, worst))
    return sorted(spikes, key=lambda spike: -len(spike.passes))


def soak_lines(rows: list[Row]) -> list[str]:
    """What a soak of sweeps concludes: its passes and duration, each pass's median time relative to
    the first (drift), and the measurements that spiked."""
    passes = sorted({row.repeat for row in rows})
    if len(passes) < 2:
        return []
    elapsed = max((row.elapsed_s for row in rows if row.elapsed_s is not None), default=0.0)
    lines = [f"soak: {len(passes)} passes in {elapsed:.0f} s"]
    first = {row.key(): row.time_us_p50 for row in rows if row.repeat == passes[0] and row.time_us_p50}
    last = [row.time_us_p50 / first[row.key()] for row in rows
            if row.repeat == passes[-1] and row.time_us_p50 and first.get(row.key())]
    if last:
        lines.append(f"drift: the last pass's times are {statistics.median(last):.2f}x the first's (median "
                     f"over {len(last)} measurements)")
    spikes = time_spikes(rows)
    lines += [f"spike: {spike.describe()}" for spike in spikes[:10]]
    if len(spikes) > 10:
        lines.append(f"spike: ... and {len(spikes) - 10} more measurements (report.html lists them all)")
    if not spikes:
        lines.append("spikes: none (no pass of any measurement is 2x its own median)")
    return lines
