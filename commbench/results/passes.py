"""What a run's passes say (--repeat, --duration): how far a measurement's passes spread, each pass's
median time against the first (drift), and the measurements whose p50 spiked in some passes, by the
robust rule (measure/robust.py) on each measurement's own passes. Reads rows only, so it works on saved
results too. The spike finder is also fabric's (a pair direction's passes: fabric/drift.py).

A measurement's passes are its rows of one key (Row.key(): collective, dtype, size, ...), one per pass;
its summary across them (``pass_summaries``) is the median of their p50s, their spread, the fastest and
slowest pass and the median busbw.
Their spread is the robust rule's: s = 1.4826 x the median of |ln(p50 / median p50)| over the passes,
shown as 100 x (exp(s) - 1) percent (about the coefficient of variation when passes differ by a few
percent; 70% for passes of 670, 590, 3314, 845 and 2846 µs).
"""

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from commbench.core.words import plural
from commbench.measure.robust import LATENCY, Metric, relative, robust_spread, slow_mask
from commbench.results.model import KEY_FIELDS, Row, describe_row

MIN_PASSES = 3  # fewer passes give a measurement no median of its own to compare with
SPIKE_FACTOR = 2.0  # a pass's p50 at least this many times its own median (and beyond 4 scaled MADs)


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
    return 100.0 * (math.exp(robust_spread(p50s)[1]) - 1.0)


@dataclass(frozen=True)
class PassSummary:
    """One measurement across a soak's passes."""

    first: Row  # its first pass, which names it
    passes: int
    p50_us: float  # the median of the passes' p50s
    spread_pct: float | None  # pass_spread_pct of them
    fastest_us: float
    slowest_us: float
    busbw_gbps: float | None  # the median of the passes' busbw

    @property
    def table_key(self) -> tuple:
        """The table the measurement belongs in: its key but for size and mode (which are its rows)."""
        named = zip(KEY_FIELDS, self.first.key(), strict=True)
        return (self.first.benchmark, *(value for name, value in named if name not in ("size_bytes", "mode")))


def pass_summaries(rows: Iterable[Row]) -> list[PassSummary]:
    """Every measurement of two passes or more, across its passes, in the order first measured."""
    found = []
    for measured in passes_by_key(rows).values():
        if len({row.repeat for row in measured}) < 2:
            continue
        p50s = [row.time_us_p50 or 0.0 for row in measured]
        busbw = [row.busbw_gbps for row in measured if row.busbw_gbps is not None]
        found.append(PassSummary(measured[0], len(measured), statistics.median(p50s), pass_spread_pct(p50s),
                                 min(p50s), max(p50s), statistics.median(busbw) if busbw else None))
    return found


@dataclass(frozen=True)
class Spike:
    """The passes in which one measurement (a row's key in a sweep's soak, a pair direction in fabric's)
    fell far off its own median over the passes, on its metric's slow side."""

    first: Row  # the measurement's first pass, which names it
    metric: Metric
    passes: list[int]  # Row.repeat of each spike
    elapsed_s: list[float | None]  # when each was measured
    total: int  # passes measured
    median: float
    worst_ratio: float  # the worst spike's value over the median

    def times(self) -> str:
        """' (at 12 s, 40 s)', or '' when no spike's time is known."""
        when = ", ".join(f"{value:.0f} s" for value in self.elapsed_s if value is not None)
        return f" (at {when})" if when else ""


def find_spikes(series: Iterable[Sequence[Row]], value: Callable[[Row], float], metric: Metric,
                factor: float) -> list[Spike]:
    """Every measurement (its rows, one per pass) of MIN_PASSES passes or more whose ``value`` was slow
    in some passes against its own median over them, by the robust rule with the minimum gap ``factor``:
    the most spikes first, ties in the order given."""
    spikes = []
    for rows in series:
        if len({row.repeat for row in rows}) < MIN_PASSES:
            continue
        values = np.fromiter((value(row) for row in rows), dtype=np.float64, count=len(rows))
        median, sigma = robust_spread(values)
        slow = slow_mask(values, median, sigma, metric, factor)
        if not slow.any():
            continue
        off = [row for row, is_slow in zip(rows, slow, strict=True) if is_slow]
        ratios = [relative(float(slow_value), median) for slow_value in values[slow]]
        worst = min(ratios) if metric.higher_is_better else max(ratios)
        spikes.append(Spike(rows[0], metric, [row.repeat for row in off], [row.elapsed_s for row in off],
                            len(rows), median, worst))
    return sorted(spikes, key=lambda spike: -len(spike.passes))


def time_spikes(rows: list[Row], factor: float = SPIKE_FACTOR) -> list[Spike]:
    """Every measurement of a soak whose p50 spiked in some passes (find_spikes on each key's passes)."""
    return find_spikes(passes_by_key(rows).values(), _p50, LATENCY, factor)


def _p50(row: Row) -> float:
    return row.time_us_p50 or 0.0  # passes_by_key keeps only rows with a time


def describe_time_spike(spike: Spike) -> str:
    """'all_reduce (float32, sum, in-place, sync) at 64 KiB: 2 of 12 passes slower than its median
    81.3 µs, worst 3.10x (at 40 s, 95 s)'."""
    return (f"{describe_row(spike.first)}: {len(spike.passes)} of {spike.total} passes slower than its "
            f"median {spike.median:.1f} µs, worst {spike.worst_ratio:.2f}x{spike.times()}")


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
                     f"over {plural(len(last), 'measurement')})")
    spikes = time_spikes(rows)
    lines += [f"spike: {describe_time_spike(spike)}" for spike in spikes[:10]]
    if len(spikes) > 10:
        lines.append(f"spike: ... and {len(spikes) - 10} more measurements (report.html lists them all)")
    if not spikes:
        lines.append("spikes: none (no pass of any measurement is 2x its own median)")
    return lines
