"""compare: saved runs point by point, a new side against a base side, passes as the evidence.

A side is one or more files (by default the first file is the base and each later file a new side of
its own; `--base FILE` pools files into the base, and the files named beside it into one new side).
Points match on Row.key() (collective, dtype, op, mode, size, world size, backend, ...); a side's rows
of one key are that point's passes (the passes of `--repeat N`, of every file of the side). Per point:
both sides' times (the geometric mean of the passes' p50s), the change new/base worded
"1.08x slower" or "1.10x faster", its 95% interval, whether it is significant, and how much the base's
passes spread; the statistics are evidence.py's. Per collective, the geometric mean of the changes
summarises the points, and the same test on each pass's mean over the points (SeriesChange) says
whether the collective as a whole changed. The gate (--fail-above) is gate.py's.

Points are matched by a join of the sides' frames (commbench.results.frame) on the key.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from commbench.analysis.evidence import (
    MIN_PASSES_PER_SIDE,
    Change,
    benjamini_hochberg,
    estimate_change,
    geometric_mean,
)
from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.results.frame import rows_frame
from commbench.results.model import KEY_FIELDS, Row
from commbench.results.passes import pass_spread_pct
from commbench.results.saved import SavedRun
from commbench.writers.console import TextTable


@dataclass(frozen=True)
class Side:
    """The files whose passes make one side of a comparison."""

    runs: tuple[SavedRun, ...]

    def __post_init__(self) -> None:
        # A file's blocks are read as columns whose rows are made on each reading: held here as lists
        # once, so that a row is one object wherever the comparison meets it (series_changes finds a
        # row's run by its identity).
        held = tuple(run if isinstance(run.rows, list) else replace(run, rows=list(run.rows))
                     for run in self.runs)
        object.__setattr__(self, "runs", held)

    @property
    def label(self) -> str:
        first = self.runs[0].label
        return first if len(self.runs) == 1 else f"{first} + {len(self.runs) - 1} more"

    @property
    def path(self) -> str:
        first = str(self.runs[0].path)
        return first if len(self.runs) == 1 else f"{first} (+ {len(self.runs) - 1} more files)"

    @property
    def rows(self) -> list[Row]:
        return [row for run in self.runs for row in run.rows]

    def describe(self) -> str:
        if len(self.runs) == 1:
            return self.runs[0].describe()
        return f"{len(self.runs)} files ({', '.join(str(run.path) for run in self.runs)})"

    def incomplete(self) -> list[SavedRun]:
        return [run for run in self.runs if run.meta.get("status") not in (None, "complete")]


def side_of(runs: SavedRun | Sequence[SavedRun]) -> Side:
    return Side((runs,) if isinstance(runs, SavedRun) else tuple(runs))


def usable_time(value: float | None) -> bool:
    """Whether a pass's p50 is a time the statistics can use: finite and above 0 µs."""
    return value is not None and math.isfinite(value) and value > 0


def _p50s(rows: list[Row]) -> list[float]:
    return [row.time_us_p50 for row in rows if usable_time(row.time_us_p50)]


@dataclass
class Pair:
    """One point in both sides: its passes (rows) on each, and what they say."""

    base_rows: list[Row]
    new_rows: list[Row]
    change: Change | None  # None: a side has no time (an error row)
    q_value: float | None = None  # Benjamini-Hochberg over the comparison's testable points
    significant: bool = False  # the change is other than none, at --significance-level (the FDR)

    @property
    def base(self) -> Row:
        return self.base_rows[0]

    @property
    def new(self) -> Row:
        return self.new_rows[0]

    @property
    def ratio(self) -> float | None:
        return None if self.change is None else self.change.ratio

    @property
    def p_value(self) -> float | None:
        return None if self.change is None else self.change.p_different()

    @property
    def passes(self) -> tuple[int, int]:
        return len(self.base_rows), len(self.new_rows)

    @property
    def base_p50(self) -> float | None:
        return geometric_mean(_p50s(self.base_rows))

    @property
    def new_p50(self) -> float | None:
        return geometric_mean(_p50s(self.new_rows))

    @property
    def base_spread_pct(self) -> float | None:
        return pass_spread_pct(_p50s(self.base_rows))

    @property
    def slowdown_pct(self) -> float:
        return 0.0 if self.ratio is None else (self.ratio - 1.0) * 100.0


def pair_passes(base_rows: list[Row], new_rows: list[Row]) -> Pair:
    """A point's pair: the change from the passes that have a time on each side."""
    return Pair(base_rows, new_rows, estimate_change(_p50s(base_rows), _p50s(new_rows)))


@dataclass(frozen=True)
class Unjudged:
    """Why the gate cannot judge a point."""

    reason: str
    too_few_passes: bool = False  # repeating the runs (--repeat) would make it judgeable


def unjudgeable(pair: Pair) -> Unjudged | None:
    """Why the gate cannot judge this point, or None when it can (or when neither side measured it:
    rows that hold an error on both sides). A pass whose p50 is not a time (0, infinite, NaN), a side
    without a time, or a side with fewer passes than the statistics need (MIN_PASSES_PER_SIDE) leaves
    the point unjudged: the gate fails closed on it."""
    for side, rows in (("base", pair.base_rows), ("new", pair.new_rows)):
        for position, row in enumerate(rows, 1):
            if row.time_us_p50 is not None and not usable_time(row.time_us_p50):
                return Unjudged(f"{side} pass {position} of {len(rows)} has a p50 of {row.time_us_p50:g} µs")
    timed = len(_p50s(pair.base_rows)), len(_p50s(pair.new_rows))
    if timed == (0, 0):
        return None
    for side, count, rows in (("base", timed[0], pair.base_rows), ("new", timed[1], pair.new_rows)):
        if count == 0:
            return Unjudged(f"{side} has no time ({rows[0].error or 'no p50'})")
    if min(timed) < MIN_PASSES_PER_SIDE:
        return Unjudged(f"{plural(timed[0], 'pass')} on the base side and {timed[1]} on the new (at least "
                        f"{MIN_PASSES_PER_SIDE} a side)", too_few_passes=True)
    return None
    for side, count, rows in (("base", timed[0], pair.base_rows), ("new", timed[1], pair.new_rows)):
        if count == 0:
            return f"{side} has no time ({rows[0].error or 'no p50'})"
    if min(timed) < MIN_PASSES_PER_SIDE:
        return f"{plural(timed[0], 'pass')} on the base side and {timed[1]} on the new (at least " \
               f"{MIN_PASSES_PER_SIDE} a side)"
    return None


@dataclass
class SeriesChange:
    """One collective's points taken together: per pass, the geometric mean of its points' p50s.

    A slowdown a few times the pass-to-pass noise of each point can be significant at none of them
    and still be plain over all: the points of one pass share that pass's conditions, so their mean
    is one draw per pass with less of each point's own noise, and passes remain the evidence."""

    collective: str
    points: int
    passes: tuple[int, int]  # the passes on each side that measured every point
    change: Change
    base_spread_pct: float | None
    q_value: float | None = None  # Benjamini-Hochberg over the comparison's collectives
    significant: bool = False

    @property
    def ratio(self) -> float:
        return self.change.ratio


@dataclass
class RunComparison:
    base: Side
    new: Side
    pairs: list[Pair]
    only_base: list[Row]
    only_new: list[Row]
    significance_level: float = 0.05
    notes: list[str] = field(default_factory=list)
    series: list[SeriesChange] = field(default_factory=list)  # per collective, where testable

    def testable(self) -> list[Pair]:
        return [pair for pair in self.pairs if pair.change is not None and pair.change.testable]

    def untestable(self) -> list[Pair]:
        return [pair for pair in self.pairs if pair.change is not None and not pair.change.testable]


def _grouped(rows: list[Row]) -> pd.DataFrame:
    """One line per point: its key and the positions of its rows (its passes), in order of first
    appearance."""
    frame = rows_frame(rows)[list(KEY_FIELDS)]
    frame["position"] = range(len(frame))
    return frame.groupby(list(KEY_FIELDS), sort=False, dropna=False)["position"].agg(list).reset_index()


def compare_runs(base: SavedRun | Sequence[SavedRun], new: SavedRun | Sequence[SavedRun],
                 significance_level: float = 0.05) -> RunComparison:
    """Every point of the base side against the same point of the new side."""
    base_side, new_side = side_of(base), side_of(new)
    base_rows, new_rows = base_side.rows, new_side.rows
    # A left join keeps the base's order; keys match with their missing parts (NaN) equal.
    joined = _grouped(base_rows).merge(_grouped(new_rows), on=list(KEY_FIELDS), how="left",
                                       suffixes=("_base", "_new"), indicator=True)
    pairs, only_base, paired = [], [], set()
    for base_positions, new_positions, where in zip(joined["position_base"], joined["position_new"],
                                                    joined["_merge"], strict=True):
        if where == "both":
            pairs.append(pair_passes([base_rows[i] for i in base_positions],
                                     [new_rows[i] for i in new_positions]))
            paired.update(new_positions)
        else:
            only_base.extend(base_rows[i] for i in base_positions)
    only_new = [row for position, row in enumerate(new_rows) if position not in paired]
    comparison = RunComparison(base_side, new_side, pairs, only_base, only_new, significance_level)
    _judge_differences(comparison)
    comparison.series = series_changes(comparison)
    return comparison


def _judge_differences(comparison: RunComparison) -> None:
    """Each testable point's q-value against no change, and whether it is significant."""
    testable = comparison.testable()
    _judge(testable, [pair.p_value for pair in testable], comparison.significance_level)


def _judge(found: Sequence[Pair] | Sequence[SeriesChange], p_values: list[float | None], level: float
           ) -> None:
    """Each one's q-value (its p-value against no change, Benjamini-Hochberg over ``found``), and
    whether it is significant at ``level``."""
    for each, q in zip(found, benjamini_hochberg(p_values), strict=True):
        each.q_value = q
        each.significant = q is not None and q <= level


def _pass_means(points: list[list[Row]], run_of: dict[int, int]) -> list[float]:
    """Per pass (a file's --repeat pass) that measured every one of ``points``: the geometric mean of
    their p50s."""
    p50s: dict[tuple[int, int], list[float]] = {}
    for rows in points:
        for row in rows:
            if usable_time(row.time_us_p50):
                p50s.setdefault((run_of[id(row)], row.repeat), []).append(row.time_us_p50)
    return [mean for values in p50s.values()
            if len(values) == len(points) and (mean := geometric_mean(values)) is not None]


def series_changes(comparison: RunComparison) -> list[SeriesChange]:
    """Each collective with two or more testable points, its change over the passes that measured all
    of them (SeriesChange), q-values by Benjamini-Hochberg over the collectives."""
    def runs_of(side: Side) -> dict[int, int]:
        return {id(row): index for index, run in enumerate(side.runs) for row in run.rows}

    base_run, new_run = runs_of(comparison.base), runs_of(comparison.new)
    by_collective: dict[str, list[Pair]] = {}
    for pair in comparison.testable():
        by_collective.setdefault(pair.base.collective, []).append(pair)
    found = []
    for name, pairs in by_collective.items():
        if len(pairs) < 2:
            continue  # one point: its own test is the collective's
        base = _pass_means([pair.base_rows for pair in pairs], base_run)
        new = _pass_means([pair.new_rows for pair in pairs], new_run)
        change = estimate_change(base, new)
        if change is not None and change.testable:
            found.append(SeriesChange(name, len(pairs), (len(base), len(new)), change, pass_spread_pct(base)))
    _judge(found, [each.change.p_different() for each in found], comparison.significance_level)
    return found


def geometric_means(pairs: Iterable[Pair]) -> dict[str, tuple[float, int, int, int]]:
    """Per collective: (geometric mean ratio, pairs, significantly slower, significantly faster)."""
    table = pd.DataFrame([(pair.base.collective, pair.ratio, pair.significant) for pair in pairs],
                         columns=["collective", "ratio", "significant"]).astype({"ratio": "float64"})
    table = table[table["ratio"] > 0].assign(
        log=lambda t: np.log(t["ratio"]), slower=lambda t: t["significant"] & (t["ratio"] > 1),
        faster=lambda t: t["significant"] & (t["ratio"] < 1))
    means = table.groupby("collective", sort=False).agg(
        log=("log", "mean"), pairs=("log", "size"), slower=("slower", "sum"), faster=("faster", "sum"))
    return {str(name): (math.exp(found["log"]), int(found["pairs"]), int(found["slower"]),
                        int(found["faster"]))
            for name, found in means.iterrows()}


# --- presentation -------------------------------------------------------------------------------

def change_text(ratio: float | None) -> str:
    """'1.08x slower', '1.10x faster', 'same'; '-' when there is nothing to compare."""
    if ratio is None:
        return "-"
    if ratio == 1.0:
        return "same"
    return f"{ratio:.2f}x slower" if ratio > 1 else f"{1 / ratio:.2f}x faster"


def interval_text(change: Change | None) -> str:
    """The 95% interval of new/base, '0.93-1.31'; '-' without one."""
    found = None if change is None else change.interval()
    return "-" if found is None else f"{found[0]:.2f}-{found[1]:.2f}"


def spread_text(pair: Pair) -> str:
    """The base's pass-to-pass spread and its passes: '±12% of 5'; '1 pass' when it has one."""
    spread = pair.base_spread_pct
    count = pair.passes[0]
    return plural(count, "pass") if spread is None else f"±{spread:.0f}% of {count}"


def _title(row: Row) -> str:
    parts = [row.benchmark] if row.benchmark else []
    parts += [row.collective, row.dtype] + ([f"op {row.op}"] if row.op else [])
    return " · ".join(parts + row.qualifiers())


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _significance(change: Change | None, q_value: float | None, significant: bool) -> str:
    if change is not None and not change.testable:
        return "n/a (1 pass)"
    if q_value is None:
        return "n/a"
    return f"{'yes' if significant else 'no'} (q={q_value:.2g})"


def pair_tables(comparison: RunComparison) -> list[TextTable]:
    """One table per collective, dtype and op (of a benchmark): a line per size and mode."""
    groups: dict[str, list[Pair]] = {}
    for pair in comparison.pairs:
        groups.setdefault(_title(pair.base), []).append(pair)
    columns = ["size", "mode", "base µs", "new µs", "change", "95% new/base", "significant", "base spread"]
    return [TextTable(title, columns, [
        [format_size(p.base.size_bytes), p.base.mode, _number(p.base_p50, 1), _number(p.new_p50, 1),
         change_text(p.ratio), interval_text(p.change), _significance(p.change, p.q_value, p.significant),
         spread_text(p)] for p in pairs],
        left_columns=2)
        for title, pairs in groups.items()]


def summary_table(comparison: RunComparison) -> TextTable:
    """Per collective: the geometric mean of its points' changes, the interval and significance of its
    passes taken together (SeriesChange), and how many points are significantly slower or faster
    (`slower/faster`)."""
    series = {found.collective: found for found in comparison.series}
    rows = []
    for name, (ratio, count, slower, faster) in geometric_means(comparison.pairs).items():
        found = series.get(name)
        if found is None:
            interval, significance = "n/a", "n/a"
        else:
            interval = interval_text(found.change)
            significance = _significance(found.change, found.q_value, found.significant)
        rows.append([name, str(count), change_text(ratio), interval, significance, f"{slower}/{faster}"])
    columns = ["collective", "points", "change", "95% new/base", "significant", "slower/faster"]
    return TextTable("summary per collective", columns, rows, left_columns=1,
                     footer=["change: the geometric mean of its points' changes; interval and significance: "
                             "of each pass's mean over the points"])


def unmatched_lines(comparison: RunComparison) -> list[str]:
    """Rows found on one side only, by series: nothing is dropped silently."""
    lines = []
    for which, rows in (("base", comparison.only_base), ("new", comparison.only_new)):
        if not rows:
            continue
        by_series: dict[str, list[str]] = {}
        for row in rows:
            series = f"{_title(row)} · {row.mode} · {row.backend} · {plural(row.world_size, 'rank')}"
            by_series.setdefault(series, []).append(format_size(row.size_bytes))
        lines.append(f"only in {which} ({plural(len(rows), 'row')}):")
        lines.extend(f"  {series}: {', '.join(dict.fromkeys(sizes))}" for series, sizes in by_series.items())
    return lines


def describe_point(pair: Pair) -> str:
    row = pair.base
    what = " ".join(part for part in (row.benchmark, row.collective, row.dtype, row.op, row.mode) if part)
    return f"{what} {format_size(row.size_bytes)}"


def coverage_problem(comparison: RunComparison) -> str | None:
    """What the two sides do not both measure, in one line; None when every point has its pair."""
    base, new = comparison.base, comparison.new
    if not comparison.pairs:
        def what(side: Side) -> str:
            return ", ".join(dict.fromkeys(row.collective for row in side.rows)) or "no rows"
        return f"{new.path}: no rows in common with {base.path} (base: {what(base)}; new: {what(new)})"
    if comparison.only_base or comparison.only_new:
        return (f"{new.path}: {plural(len(comparison.only_base), 'row')} only in {base.path} and "
                f"{len(comparison.only_new)} only in {new.path}: the files do not measure the same points")
    return None
