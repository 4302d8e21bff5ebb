"""What a run's passes say (--repeat, --duration): how far a measurement's passes spread, each pass's
median time against the first (drift), and the measurements whose p50 spiked in some passes, by the
robust rule (measure/robust.py) on each measurement's own passes. Reads rows only, so it works on saved
results too.

A measurement's passes are its rows of one key (Row.key(): collective, dtype, size, ...), one per pass.
Their spread is the robust rule's: s = 1.4826 x the median of |ln(p50 / median p50)| over the passes,
shown as 100 x (exp(s) - 1) percent (about the coefficient of variation when passes differ by a few
percent; 70% for passes of 670, 590, 3314, 845 and 2846 µs).
"""

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from commbench.measure.robust import LATENCY, is_slow, relative, robust_spread
from commbench.results.model import Row, describe_row

MIN_PASSES = 3  # fewer passes give a row no median of its own to compare with


def passes_by_key(rows: Iterable[Row]) -> dict[tuple, list[Row]]:
    """Each measurement's rows (its passes), in the order they were written; rows without a time (an
    error) are left out."""
    found: dict[tuple, list[Row]] = {}
    for row in rows:
        if row.time_us_p50 is not None and not row.error:
            found.setdefault(row.key(), []).append(row)
    return found


def pass_spread_pct(p50s: Sequence[float]) -> float | None:
    """The spread of a measurement's pass p50s in percent (module docstring); None below 2 passes."""
    if len(p50s) < 2 or min(p50s) <= 0:
        return None
    return 100.0 * (math.exp(robust_spread(list(p50s))[1]) - 1.0)
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
    often first: the robust rule (measure/robust.py, fabric's outlier rule) on each key's own passes."""
    by_key = passes_by_key(rows)
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
