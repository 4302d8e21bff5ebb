"""compare: saved runs row by row, each later file against the first (the base).

Rows match on Row.key() (collective, dtype, op, mode, size, world size, backend, ...); a key that
occurs more than once in a file (two benchmarks measuring the same point) pairs in order of appearance.
For each pair: both p50 times and busbws, the ratio new/base worded "1.08x slower" or "1.10x faster",
and whether the difference is significant: a two-sided Mann-Whitney U test on the two runs'
per-iteration samples (samples_us), p below --significance-level. A row with fewer than 2 samples on
either side (an async window is one sample) cannot be tested. Per collective, the geometric mean of the
ratios summarises the pairs. --fail-above PCT is a regression gate: it fails (exit 1) when a
significant slowdown is more than PCT percent (ratio > 1 + PCT/100), and when the files do not measure
the same points (no rows in common, or rows in only one of them): a gate that compared nothing passes
nothing. Without a gate that mismatch is a warning on stderr.

Rows are matched by a join of the runs' frames (commbench.results.frame) on the key and the occurrence number.
"""

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from commbench.core.sizes import format_size
from commbench.errors import UsageError
from commbench.results.frame import rows_frame
from commbench.results.kinds import check_comparable
from commbench.results.model import KEY_FIELDS, Row
from commbench.results.saved import SavedRun, expand_paths, load_run
from commbench.writers.console import TextTable, make_console, markdown_table, print_table


@dataclass(frozen=True)
class Pair:
    base: Row
    new: Row
    ratio: float | None  # new p50 / base p50; > 1 is slower
    p_value: float | None  # None: not testable (fewer than 2 samples on a side)
    significant: bool

    @property
    def slowdown_pct(self) -> float:
        return 0.0 if self.ratio is None else (self.ratio - 1.0) * 100.0


@dataclass
class RunComparison:
    base: SavedRun
    new: SavedRun
    pairs: list[Pair]
    only_base: list[Row]
    only_new: list[Row]

    def regressions(self, fail_above_pct: float) -> list[Pair]:
        return [pair for pair in self.pairs if pair.significant and pair.slowdown_pct > fail_above_pct]


def change_text(ratio: float | None) -> str:
    """'1.08x slower', '1.10x faster', 'same'; '-' when there is nothing to compare."""
    if ratio is None:
        return "-"
    if ratio == 1.0:
        return "same"
    return f"{ratio:.2f}x slower" if ratio > 1 else f"{1 / ratio:.2f}x faster"


def _samples(row: Row) -> list[float]:
    return [value for value in row.samples_us if value is not None and math.isfinite(value)]


def rank_test_p_value(base: Row, new: Row) -> float | None:
    """The two-sided Mann-Whitney U p-value of the two rows' samples, None when not testable."""
    base_samples, new_samples = _samples(base), _samples(new)
    if len(base_samples) < 2 or len(new_samples) < 2:
        return None
    if len(set(base_samples) | set(new_samples)) == 1:
        return 1.0  # every sample equal: no difference (scipy would divide by zero)
    return float(mannwhitneyu(base_samples, new_samples, alternative="two-sided").pvalue)


def pair_rows(base: Row, new: Row, significance_level: float) -> Pair:
    measured = base.time_us_p50 is not None and new.time_us_p50 is not None and base.time_us_p50 > 0
    ratio = new.time_us_p50 / base.time_us_p50 if measured else None
    p_value = rank_test_p_value(base, new)
    return Pair(base, new, ratio, p_value, p_value is not None and p_value < significance_level)


def _keyed(rows: list[Row]) -> pd.DataFrame:
    """The rows' keys, each row's position, and its occurrence among earlier rows of the same key."""
    frame = rows_frame(rows)[list(KEY_FIELDS)]
    frame["position"] = range(len(frame))
    frame["occurrence"] = frame.groupby(list(KEY_FIELDS), sort=False, dropna=False).cumcount()
    return frame


def compare_runs(base: SavedRun, new: SavedRun, significance_level: float = 0.05) -> RunComparison:
    # A left join keeps the base's order; keys match with their missing parts (NaN) equal.
    joined = _keyed(base.rows).merge(_keyed(new.rows), on=[*KEY_FIELDS, "occurrence"], how="left",
                                     suffixes=("_base", "_new"), indicator=True)
    both = joined[joined["_merge"] == "both"]
    pairs = [pair_rows(base.rows[b], new.rows[int(n)], significance_level)
             for b, n in zip(both["position_base"], both["position_new"], strict=True)]
    only_base = [base.rows[b] for b in joined.loc[joined["_merge"] == "left_only", "position_base"]]
    paired = set(both["position_new"].astype(int))
    only_new = [row for position, row in enumerate(new.rows) if position not in paired]
    return RunComparison(base, new, pairs, only_base, only_new)


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

def _title(row: Row) -> str:
    parts = [row.benchmark] if row.benchmark else []
    parts += [row.collective, row.dtype] + ([f"op {row.op}"] if row.op else [])
    return " · ".join(parts + row.qualifiers())


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _significance(pair: Pair) -> str:
    if pair.p_value is None:
        return "n/a (1 sample)" if min(len(_samples(pair.base)), len(_samples(pair.new))) < 2 else "n/a"
    return f"{'yes' if pair.significant else 'no'} (p={pair.p_value:.2g})"


def pair_tables(comparison: RunComparison) -> list[TextTable]:
    """One table per collective, dtype and op (of a benchmark): a row per size and mode."""
    groups: dict[str, list[Pair]] = {}
    for pair in comparison.pairs:
        groups.setdefault(_title(pair.base), []).append(pair)
    tables = []
    columns = ["size", "mode", "base µs", "new µs", "change", "significant", "base busbw", "new busbw"]
    for title, pairs in groups.items():
        rows = [[format_size(p.base.size_bytes), p.base.mode, _number(p.base.time_us_p50, 1),
                 _number(p.new.time_us_p50, 1), change_text(p.ratio), _significance(p),
                 _number(p.base.busbw_gbps, 3), _number(p.new.busbw_gbps, 3)] for p in pairs]
        tables.append(TextTable(title, columns, rows, left_columns=2))
    return tables


def summary_table(comparison: RunComparison) -> TextTable:
    rows = [[name, str(count), change_text(ratio), str(slower), str(faster)]
            for name, (ratio, count, slower, faster) in geometric_means(comparison.pairs).items()]
    return TextTable("summary per collective (geometric mean of the p50 ratios)",
                     ["collective", "rows", "geomean change", "significantly slower", "significantly faster"],
                     rows, left_columns=1)


def unmatched_lines(comparison: RunComparison) -> list[str]:
    """Rows found in only one file, by series: nothing is dropped silently."""
    lines = []
    for which, rows in (("base", comparison.only_base), ("new", comparison.only_new)):
        if not rows:
            continue
        by_series: dict[str, list[str]] = {}
        for row in rows:
            series = f"{_title(row)} · {row.mode} · {row.backend} · {row.world_size} ranks"
            by_series.setdefault(series, []).append(format_size(row.size_bytes))
        lines.append(f"only in {which} ({len(rows)} rows):")
        lines.extend(f"  {series}: {', '.join(sizes)}" for series, sizes in by_series.items())
    return lines


def describe_pair(pair: Pair) -> str:
    row = pair.base
    what = " ".join(part for part in (row.benchmark, row.collective, row.dtype, row.op, row.mode) if part)
    return f"{what} {format_size(row.size_bytes)}: {change_text(pair.ratio)} (p={pair.p_value:.2g})"


def _status_note(run: SavedRun) -> str | None:
    status = run.meta.get("status")
    if status and status != "complete":
        return f"note: {run.path} is not a complete run (status {status})"
    return None


def coverage_problem(comparison: RunComparison) -> str | None:
    """What the two files do not both measure, in one line; None when every row has its pair."""
    base, new = comparison.base, comparison.new
    if not comparison.pairs:
        def what(run: SavedRun) -> str:
            return ", ".join(dict.fromkeys(row.collective for row in run.rows)) or "no rows"
        return f"{new.path}: no rows in common with {base.path} (base: {what(base)}; new: {what(new)})"
    if comparison.only_base or comparison.only_new:
        return (f"{new.path}: {len(comparison.only_base)} rows only in {base.path} and "
                f"{len(comparison.only_new)} only in {new.path}: the files do not measure the same points")
    return None


@dataclass
class Printer:
    """compare's stdout, as console text or Markdown."""

    markdown: bool

    def __post_init__(self) -> None:
        self.console = make_console()

    def say(self, text: str) -> None:
        if self.markdown:
            print(text)
        else:
            self.console.print(text, markup=False, highlight=False)

    def show(self, table: TextTable) -> None:
        if self.markdown:
            print(markdown_table(table))
        else:
            print_table(self.console, table)

    def item(self, text: str) -> None:
        self.say(f"- {text}" if self.markdown else f"  {text}")


def show_comparison(out: Printer, comparison: RunComparison) -> None:
    heading = f"base {comparison.base.describe()} vs new {comparison.new.describe()}"
    out.say(f"## {heading}\n" if out.markdown else heading)
    for run in (comparison.base, comparison.new):
        note = _status_note(run)
        if note:
            out.say(note)
    if not comparison.pairs:
        out.say("no rows in common")
    for table in pair_tables(comparison):
        out.show(table)
    if comparison.pairs:
        out.show(summary_table(comparison))
    for line in unmatched_lines(comparison):
        out.say(f"    {line}" if out.markdown and line.startswith("  ") else line)


def gate_verdict(out: Printer, fail_above: float, slowdowns: list[str], mismatches: list[str]) -> int:
    """Print the regression gate's verdict (stdout, and one stderr line per kind of failure); its status."""
    gate = f"regression gate (--fail-above {fail_above:g}%)"
    if slowdowns:
        out.say(f"{gate}: FAILED, {len(slowdowns)} significant slowdowns above {fail_above:g}%:")
        for line in slowdowns:
            out.item(line)
        print(f"commbench: regression: {len(slowdowns)} significant slowdowns above {fail_above:g}% "
              f"(first: {slowdowns[0]})", file=sys.stderr)
    if mismatches:
        which = "1 comparison does" if len(mismatches) == 1 else f"{len(mismatches)} comparisons do"
        out.say(f"{gate}: FAILED, {which} not cover the same rows:")
        for line in mismatches:
            out.item(line)
        print(f"commbench: regression gate: {mismatches[0]}"
              + (f" (and {len(mismatches) - 1} more comparisons)" if len(mismatches) > 1 else ""),
              file=sys.stderr)
    if slowdowns or mismatches:
        return 1
    out.say(f"{gate}: passed, no significant slowdown above {fail_above:g}%")
    return 0


def compare_command(paths: list[str], fail_above: float | None, significance_level: float,
                    markdown: bool) -> int:
    if not 0 < significance_level < 1:
        raise UsageError(f"--significance-level {significance_level:g} must be between 0 and 1")
    if fail_above is not None and fail_above < 0:
        raise UsageError(f"--fail-above {fail_above:g} must not be negative")
    files = expand_paths(paths)
    if len(files) < 2:
        raise UsageError("compare needs at least two results files: BASE.json NEW.json [MORE.json ...]")
    runs = [load_run(path) for path in files]  # every file is read before anything is printed
    check_comparable(runs)  # a fabric result compares only with fabric results
    out = Printer(markdown)
    slowdowns: list[str] = []
    mismatches: list[str] = []
    for new in runs[1:]:
        comparison = compare_runs(runs[0], new, significance_level)
        show_comparison(out, comparison)
        problem = coverage_problem(comparison)
        if problem and fail_above is None:
            print(f"commbench: warning: {problem}", file=sys.stderr)
        elif problem:
            mismatches.append(problem)
        if fail_above is not None:
            regressions = comparison.regressions(fail_above)
            slowdowns.extend(f"{new.path}: {describe_pair(pair)}" for pair in regressions)
    return 0 if fail_above is None else gate_verdict(out, fail_above, slowdowns, mismatches)
