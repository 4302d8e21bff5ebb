"""`commbench compare`: the comparisons on stdout (console tables or Markdown) and the regression gate.

The gate (--fail-above PCT) fails (exit 1) when a point is significantly slower than the line
t = 1 + PCT/100: its one-sided p-value that new/base exceeds t (evidence.py), adjusted by
Benjamini-Hochberg over the comparison's testable points, is at most --significance-level, and its
estimate is above t; likewise a collective, its points taken together per pass
(compare.SeriesChange), adjusted over the comparison's collectives. It also fails when the sides do not
measure the same points (no rows in common, or rows on one side only): a gate that compared nothing
passes nothing. It fails closed on what it cannot judge (compare.unjudgeable): a point with fewer than
two passes on a side (samples within one pass say nothing of the next run), a pass whose p50 is not a
time (0, infinite, NaN), a side without a time; and a comparison of which no point was judged. Only a
caller that asks (``allow_unjudged``) lets such points pass, named as not judged. Without a gate a
mismatch is a warning on stderr.
"""

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from commbench.analysis.compare import (
    RunComparison,
    change_text,
    compare_runs,
    coverage_problem,
    describe_point,
    interval_text,
    pair_tables,
    summary_table,
    unjudgeable,
    unmatched_lines,
)
from commbench.analysis.evidence import Change, benjamini_hochberg
from commbench.core.words import plural
from commbench.errors import UsageError
from commbench.results.kinds import check_comparable
from commbench.results.saved import SavedRun, expand_paths, load_run
from commbench.writers.console import TABLE_WIDTH, TextTable, make_console, markdown_table, print_table

REPEAT_HINT = ("run both sides with --repeat 5 or more (or give a side several files: compare --base "
               "BASE.json ... NEW.json ...)")


@dataclass(frozen=True)
class Slowdown:
    """What the gate fails on (a point, or a collective's points together), with the q-value of its
    slowdown beyond the line."""

    what: str
    collective: bool  # a collective's points taken together, not one point
    change: Change
    base_spread_pct: float | None
    base_passes: int
    q_value: float

    def describe(self) -> str:
        change = self.change
        spread = self.base_spread_pct
        base = f"±{spread:.0f}% over {self.base_passes} passes" if spread is not None else "one pass"
        return (f"{self.what}: {change_text(change.ratio)} (new/base {change.ratio:.2f}, 95% "
                f"{interval_text(change)}; base spread {base}; q={self.q_value:.2g})")


def slowdowns(comparison: RunComparison, fail_above_pct: float) -> list[Slowdown]:
    """The points significantly slower than 1 + PCT/100 (Benjamini-Hochberg over the testable ones),
    then the collectives whose points together are (Benjamini-Hochberg over the collectives): a
    slowdown spread over a collective's points, too small beside each point's noise to show at one."""
    line = 1.0 + fail_above_pct / 100.0
    found = []
    testable = comparison.testable()
    beyond = _beyond(line, [pair.change for pair in testable if pair.change], comparison.significance_level)
    for pair, q in zip(testable, beyond, strict=True):
        if q is not None and pair.change:
            found.append(Slowdown(describe_point(pair), False, pair.change, pair.base_spread_pct,
                                  pair.passes[0], q))
    series = comparison.series
    for each, q in zip(series, _beyond(line, [each.change for each in series], comparison.significance_level),
                       strict=True):
        if q is not None:
            what = f"{each.collective}, its {each.points} points together (each pass's geometric mean)"
            found.append(Slowdown(what, True, each.change, each.base_spread_pct, each.passes[0], q))
    return found


def _beyond(line: float, changes: list[Change], level: float) -> list[float | None]:
    """For each change, its q-value (Benjamini-Hochberg over ``changes``) where it is significantly
    beyond ``line`` at ``level`` and its estimate is above the line; None where not."""
    q_values = benjamini_hochberg([change.p_beyond(line) for change in changes])
    return [q if q is not None and q <= level and change.ratio > line else None
            for change, q in zip(changes, q_values, strict=True)]


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
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)  # one line, for grep

    def show(self, table: TextTable) -> None:
        if self.markdown:
            print(markdown_table(table))
        else:
            print_table(self.console, table)

    def item(self, text: str) -> None:
        self.say(f"- {text}" if self.markdown else f"  {text}")


def show_comparison(out: Printer, comparison: RunComparison) -> None:
    heading = f"base {comparison.base.describe()} vs new {comparison.new.describe()}"
    if not out.markdown and len(heading) > TABLE_WIDTH:  # two lines rather than one wrapped or too wide
        heading = f"base {comparison.base.describe()}\nvs new {comparison.new.describe()}"
    out.say(f"## {heading}\n" if out.markdown else heading)
    for side in (comparison.base, comparison.new):
        for run in side.incomplete():
            out.say(f"note: {run.path} is not a complete run (status {run.meta.get('status')})")
    if not comparison.pairs:
        out.say("no rows in common")
    for table in pair_tables(comparison):
        out.show(table)
    if comparison.pairs:
        out.show(summary_table(comparison))
        out.say(statistics_note(comparison))
        out.say(COMPARE_KEY)
    for line in unmatched_lines(comparison):
        out.say(f"    {line}" if out.markdown and line.startswith("  ") else line)


COMPARE_KEY = ("key: q: a point's p-value adjusted for the number of points compared (significant below "
               "the false discovery rate) · base spread: how far the base's passes' p50s differ, of how many "
               "passes · docs/results.md")


def statistics_note(comparison: RunComparison) -> str:
    """How the table's interval and significance were reached, and what was not testable."""
    untestable = len(comparison.untestable())
    note = (f"passes are the evidence: 95% intervals by Welch's t on the passes' log p50s, significance "
            f"by Benjamini-Hochberg at a false discovery rate of {comparison.significance_level:g}")
    if untestable:
        note += (f"; {untestable} of {len(comparison.pairs)} points have one pass on a side and no "
                 f"significance: {REPEAT_HINT}")
    return note


@dataclass
class Verdict:
    """What the gate found over every comparison of one command."""

    allow_unjudged: bool = False  # points the gate cannot judge are named but do not fail it
    slowdowns: list[str] = field(default_factory=list)  # the points', then the collectives'
    collectives: int = 0  # of the slowdowns, how many are a collective's points taken together
    mismatches: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)  # points it cannot judge, each with the reason
    too_few_passes: bool = False  # of those, some for want of passes: the hint to repeat applies
    nothing_judged: list[str] = field(default_factory=list)  # comparisons no point of which was judged

    def judge(self, comparison: RunComparison) -> None:
        """Note the points of ``comparison`` the gate cannot judge, and whether it judged none."""
        for pair in comparison.pairs:
            found = unjudgeable(pair)
            if found is not None:
                self.unjudged.append(f"{comparison.new.path}: {describe_point(pair)}: {found.reason}")
                self.too_few_passes |= found.too_few_passes
        if comparison.pairs and not comparison.testable():
            self.nothing_judged.append(str(comparison.new.path))

    def cannot_judge(self) -> bool:
        return bool(self.unjudged or self.nothing_judged)

    def status(self) -> int:
        failed = self.slowdowns or self.mismatches or (self.cannot_judge() and not self.allow_unjudged)
        return 1 if failed else 0


SHOWN_UNJUDGED = 10  # points listed on stdout; the count says how many more


def gate_verdict(out: Printer, fail_above: float, verdict: Verdict) -> int:
    """Print the regression gate's verdict (stdout, and one stderr line per kind of finding); its status."""
    gate = f"regression gate (--fail-above {fail_above:g}%)"
    if verdict.slowdowns:
        count = (f"{plural(len(verdict.slowdowns), 'significant slowdown')} above {fail_above:g}% "
                 f"({plural(len(verdict.slowdowns) - verdict.collectives, 'point')}, "
                 f"{plural(verdict.collectives, 'collective')} taken together)")
        out.say(f"{gate}: FAILED, {count}:")
        for line in verdict.slowdowns:
            out.item(line)
        print(f"commbench: regression: {count} (first: {verdict.slowdowns[0]})", file=sys.stderr)
    if verdict.mismatches:
        which = plural(len(verdict.mismatches), "comparison") + (" does" if len(verdict.mismatches) == 1
                                                                 else " do")
        out.say(f"{gate}: FAILED, {which} not cover the same rows:")
        for line in verdict.mismatches:
            out.item(line)
        print(f"commbench: regression gate: {verdict.mismatches[0]}"
              + (f" (and {len(verdict.mismatches) - 1} more comparisons)" if len(verdict.mismatches) > 1
                 else ""), file=sys.stderr)
    if verdict.cannot_judge():
        _say_unjudged(out, gate, verdict)
    if verdict.status() == 0 and not verdict.nothing_judged:
        out.say(f"{gate}: passed, no significant slowdown above {fail_above:g}%")
    return verdict.status()


def _say_unjudged(out: Printer, gate: str, verdict: Verdict) -> None:
    """What the gate could not judge: a failure (it fails closed), or with ``allow_unjudged`` a warning."""
    hint = f"; {REPEAT_HINT}" if verdict.too_few_passes else ""
    if verdict.unjudged:
        what = f"{plural(len(verdict.unjudged), 'point')} not judged"
        first = verdict.unjudged[0]
    else:
        what = f"nothing judged for {', '.join(verdict.nothing_judged)} (no point has a time on both sides)"
        first = verdict.nothing_judged[0]
    if verdict.allow_unjudged:
        out.say(f"{gate}: {what}, allowed:")
    else:
        out.say(f"{gate}: FAILED, {what}: what the gate cannot judge fails it:")
    for line in verdict.unjudged[:SHOWN_UNJUDGED]:
        out.item(line)
    if len(verdict.unjudged) > SHOWN_UNJUDGED:
        out.item(f"... and {len(verdict.unjudged) - SHOWN_UNJUDGED} more")
    kind = "warning: regression gate" if verdict.allow_unjudged else "regression gate: FAILED"
    print(f"commbench: {kind}: {what} (first: {first}){hint}", file=sys.stderr)


def _sides(paths: list[str], base_paths: list[str]) -> tuple[list[SavedRun], list[list[SavedRun]]]:
    """(the base side's runs, each new side's runs): with --base, the files given pool into one new
    side; without, the first file is the base and each later file a new side."""
    if base_paths:
        base = [load_run(path) for path in expand_paths(base_paths)]
        news = [load_run(path) for path in expand_paths(paths)]
        return base, [news]
    files = expand_paths(paths)
    if len(files) < 2:
        twice = f" ({paths[0]} is given twice)" if len(paths) > 1 else ""
        raise UsageError(f"compare needs two different results files{twice}: BASE.json NEW.json [MORE.json "
                         "...] (or --base BASE.json NEW.json)")
    runs = [load_run(path) for path in files]  # every file is read before anything is printed
    seen: dict[Path, str] = {}
    for given, run in zip(files, runs, strict=True):
        first = seen.setdefault(run.path.resolve(), str(given))
        if first != str(given):
            raise UsageError(f"{first} and {given} are the same run ({run.path}): compare needs two "
                             "different results files")
    return [runs[0]], [[run] for run in runs[1:]]


def compare_command(paths: list[str], fail_above: float | None, significance_level: float,
                    markdown: bool, base_paths: list[str] | None = None, allow_unjudged: bool = False) -> int:
    """`commbench compare`; with ``fail_above`` the gate, whose status it returns. ``allow_unjudged``
    lets the points the gate cannot judge pass (named as not judged) instead of failing it."""
    if not 0 < significance_level < 1:
        raise UsageError(f"--significance-level {significance_level:g} must be between 0 and 1")
    if fail_above is not None and not (math.isfinite(fail_above) and fail_above >= 0):
        raise UsageError(f"--fail-above {fail_above:g} must be a percentage of 0 or more")
    base, news = _sides(paths, list(base_paths or []))
    check_comparable(base + [run for side in news for run in side])  # fabric compares only with fabric
    out = Printer(markdown)
    verdict = Verdict(allow_unjudged)
    for new in news:
        comparison = compare_runs(base, new, significance_level)
        show_comparison(out, comparison)
        problem = coverage_problem(comparison)
        if problem and fail_above is None:
            print(f"commbench: warning: {problem}", file=sys.stderr)
        elif problem:
            verdict.mismatches.append(problem)
        if fail_above is not None:
            found = slowdowns(comparison, fail_above)
            verdict.slowdowns.extend(f"{comparison.new.path}: {each.describe()}" for each in found)
            verdict.collectives += sum(each.collective for each in found)
            verdict.judge(comparison)
    return 0 if fail_above is None else gate_verdict(out, fail_above, verdict)
