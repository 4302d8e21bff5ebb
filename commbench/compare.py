"""compare: saved runs row by row, each later file against the first (the base).

Rows match on Row.key() (collective, dtype, op, mode, size, world size, backend, ...); a key that
occurs more than once in a file (two benchmarks measuring the same point) pairs in order of appearance.
For each pair: both p50 times and busbws, the ratio new/base worded "1.08x slower" or "1.10x faster",
and whether the difference is significant: a two-sided Mann-Whitney U test on the two runs'
per-iteration samples (samples_us), p below --significance-level. A row with fewer than 2 samples on
either side (an async window is one sample) cannot be tested. Per collective, the geometric mean of the
ratios summarises the pairs. --fail-above PCT is a regression gate: it fails (exit 1) when a
significant slowdown is more than PCT percent (ratio > 1 + PCT/100).
"""

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from scipy.stats import mannwhitneyu

from commbench.console import TextTable, make_console, markdown_table, print_table
from commbench.errors import UsageError
from commbench.results import Row, SavedRun, load_run
from commbench.sizes import format_size


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
    ratio = new.time_us_p50 / base.time_us_p50 if base.time_us_p50 > 0 else None
    p_value = rank_test_p_value(base, new)
    return Pair(base, new, ratio, p_value, p_value is not None and p_value < significance_level)


def compare_runs(base: SavedRun, new: SavedRun, significance_level: float = 0.05) -> RunComparison:
    waiting: dict[tuple, list[Row]] = {}
    for row in new.rows:
        waiting.setdefault(row.key(), []).append(row)
    pairs, only_base = [], []
    for row in base.rows:
        candidates = waiting.get(row.key())
        if candidates:
            pairs.append(pair_rows(row, candidates.pop(0), significance_level))
        else:
            only_base.append(row)
    left = {id(row) for rows in waiting.values() for row in rows}
    only_new = [row for row in new.rows if id(row) in left]
    return RunComparison(base, new, pairs, only_base, only_new)


def geometric_means(pairs: Iterable[Pair]) -> dict[str, tuple[float, int, int, int]]:
    """Per collective: (geometric mean ratio, pairs, significantly slower, significantly faster)."""
    logs: dict[str, list[float]] = {}
    slower: dict[str, int] = {}
    faster: dict[str, int] = {}
    for pair in pairs:
        if pair.ratio is None or pair.ratio <= 0:
            continue
        name = pair.base.collective
        logs.setdefault(name, []).append(math.log(pair.ratio))
        slower[name] = slower.get(name, 0) + (pair.significant and pair.ratio > 1)
        faster[name] = faster.get(name, 0) + (pair.significant and pair.ratio < 1)
    return {name: (math.exp(sum(values) / len(values)), len(values), slower[name], faster[name])
            for name, values in logs.items()}


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


def compare_command(paths: list[str], fail_above: float | None, significance_level: float,
                    markdown: bool) -> int:
    if len(paths) < 2:
        raise UsageError("compare needs at least two results files: BASE.json NEW.json [MORE.json ...]")
    if not 0 < significance_level < 1:
        raise UsageError(f"--significance-level {significance_level:g} must be between 0 and 1")
    if fail_above is not None and fail_above < 0:
        raise UsageError(f"--fail-above {fail_above:g} must not be negative")
    runs = [load_run(path) for path in paths]  # every file is read before anything is printed
    from commbench.fabric.hooks import refuse_fabric_against_sweep

    refuse_fabric_against_sweep(runs)
    console = make_console()

    def say(text: str) -> None:
        if markdown:
            print(text)
        else:
            console.print(text, markup=False, highlight=False)

    def show(table: TextTable) -> None:
        if markdown:
            print(markdown_table(table))
        else:
            print_table(console, table)

    failures: list[str] = []
    for new in runs[1:]:
        comparison = compare_runs(runs[0], new, significance_level)
        heading = f"base {comparison.base.describe()} vs new {comparison.new.describe()}"
        say(f"## {heading}\n" if markdown else heading)
        for run in (comparison.base, comparison.new):
            note = _status_note(run)
            if note:
                say(note)
        if not comparison.pairs:
            say("no rows in common")
        for table in pair_tables(comparison):
            show(table)
        if comparison.pairs:
            show(summary_table(comparison))
        for line in unmatched_lines(comparison):
            say(f"    {line}" if markdown and line.startswith("  ") else line)
        if fail_above is not None:
            regressions = comparison.regressions(fail_above)
            failures.extend(f"{new.path}: {describe_pair(pair)}" for pair in regressions)
    if fail_above is None:
        return 0
    if failures:
        say(f"regression gate (--fail-above {fail_above:g}%): FAILED, {len(failures)} significant "
            f"slowdowns above {fail_above:g}%:")
        for line in failures:
            say(f"- {line}" if markdown else f"  {line}")
        print(f"commbench: regression: {len(failures)} significant slowdowns above {fail_above:g}% "
              f"(first: {failures[0]})", file=sys.stderr)
        return 1
    say(f"regression gate (--fail-above {fail_above:g}%): passed, no significant slowdown above "
        f"{fail_above:g}%")
    return 0
