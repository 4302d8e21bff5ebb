"""Precision per second: the default sweep against the same sweep at a fixed 20 iterations, side by side.

Runs `commbench --collective reduce_scatter_base --sizes 1K:256M` on 2 local ranks twice per run: the
default (adaptive) sweep and the same sweep with `--iters 20 --warmup 5`, one after the other (which goes
first alternates from run to run, so a machine that grows busier does not always favour one side).
Both run with `--repeat 1`, which stamps each row with the seconds since measuring began (`elapsed_s`),
so the time spent measuring shows apart from the start-up both pay. Each row's interval is the median's
distribution-free 95% interval (docs/measurement.md, "Statistics"), computed by the same function from
both sides' samples. Per run it prints the walls, and per size each side's samples, ±95% and timed
seconds, and whether the default row is at least as precise; then PASS or FAIL against issue 36's
targets:

- wall: the default sweep's at most 1/3 of the fixed sweep's (whole commands, start-up included);
- intervals: every row of both sides has one;
- precision: every default row's ±95% no wider than the fixed row's, a tenth of the rows (rounded down)
  allowed within 1.2x of it.

And what equal precision would have cost: the same interval from the same distribution narrows as
1/sqrt(samples), so in expectation a row is as precise as the fixed one only with as many samples; the
wall the default sweep would need for that is its own plus the missing samples at its rows' medians.
The walls move with the machine's load (the two sides run minutes apart), so beside them the script
prints the two sides' work at one price: every op each ran at a size (probe, warm-up and timed ops),
priced at the fixed run's median for that size, which leaves the load's drift between the runs out. The
machine's load average is printed before and after each run. Exit status 1 when a target fails in any
run.

`--odds` prints instead, without running anything, how likely a row of n samples is to be at least as
precise as (and within 1.2x of) a row of 20 when both draw from one distribution (log-normal, 20%
spread; 2,000 pairs each): what the precision target asks of a sampler, whatever it does.

    python scripts/bench_sweep.py [--runs 3] [--sizes 1K:256M] [--nproc 2] [--collective reduce_scatter_base]
    python scripts/bench_sweep.py --odds
"""

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from commbench.core.sizes import format_size
from commbench.measure.stats import ci95_rel
from commbench.results.model import Row
from commbench.results.saved import load_run

WALL_TARGET = 1 / 3  # the default sweep's wall over the fixed sweep's
WITHIN = 1.2  # a row this much wider than the fixed one is "within 1.2x"
ALLOWED_WITHIN = 0.1  # the share of rows (rounded down) that may be within 1.2x rather than as precise
FIXED = ["--iters", "20", "--warmup", "5"]


@dataclass(frozen=True)
class RowPair:
    """One size: the default row and the fixed row."""

    size_bytes: int
    default: Row
    fixed: Row

    @property
    def widths(self) -> tuple[float | None, float | None]:
        """Both sides' ±95% (relative half-width), by one function from their samples."""
        return ci95_rel(self.default.samples_us), ci95_rel(self.fixed.samples_us)

    def verdict(self) -> str:
        """'yes' (at least as precise), 'within' (within 1.2x), 'no', or 'none' (a side has no interval)."""
        default, fixed = self.widths
        if default is None or fixed is None:
            return "none"
        return "yes" if default <= fixed else "within" if default <= WITHIN * fixed else "no"

    @property
    def price(self) -> float:
        """Seconds of one op at this size: the fixed row's median."""
        return statistics.median(self.fixed.samples_us) * 1e-6 if self.fixed.samples_us else 0.0

    @property
    def missing(self) -> int:
        """The samples the default row lacks to match the fixed row's count."""
        return max(0, len(self.fixed.samples_us) - len(self.default.samples_us))

    def priced_ops(self) -> tuple[float, float]:
        """Seconds of both sides' ops (probe, warm-up and timed ops) at one price, ``price``."""
        default, fixed = ((row.iters + row.warmup + 1) * self.price for row in (self.default, self.fixed))
        return default, fixed

    def missing_seconds(self) -> float:
        """The default side's time for the samples it lacks, at its own median."""
        return self.missing * statistics.median(self.default.samples_us) * 1e-6 if self.default.samples_us \
            else 0.0


@dataclass(frozen=True)
class Judgement:
    ratio: float
    work_ratio: float  # the sides' ops at one price (RowPair.priced_ops), default over fixed
    with_interval: tuple[int, int]  # default rows, fixed rows
    verdicts: dict[str, int]  # yes / within / no / none: how many rows
    rows: int

    @property
    def allowed_within(self) -> int:
        return math.floor(ALLOWED_WITHIN * self.rows)

    def wall_passes(self) -> bool:
        return self.ratio <= WALL_TARGET

    def intervals_pass(self) -> bool:
        return self.with_interval == (self.rows, self.rows)

    def precision_passes(self) -> bool:
        counts = self.verdicts
        return counts.get("no", 0) == 0 and counts.get("none", 0) == 0 \
            and counts.get("within", 0) <= self.allowed_within

    def passes(self) -> bool:
        return self.wall_passes() and self.intervals_pass() and self.precision_passes()


def judge(pairs: list[RowPair], default_wall: float, fixed_wall: float) -> Judgement:
    """The targets of the module docstring, from one run's rows and walls."""
    verdicts: dict[str, int] = {}
    for pair in pairs:
        verdicts[pair.verdict()] = verdicts.get(pair.verdict(), 0) + 1
    with_interval = (sum(pair.widths[0] is not None for pair in pairs),
                     sum(pair.widths[1] is not None for pair in pairs))
    priced = [sum(pair.priced_ops()[side] for pair in pairs) for side in (0, 1)]
    return Judgement(default_wall / fixed_wall, priced[0] / priced[1], with_interval, verdicts, len(pairs))


def pair_rows(default: list[Row], fixed: list[Row]) -> list[RowPair]:
    """The two sides' rows by size (a sync sweep of one collective: one row a size on each side)."""
    by_size = {row.size_bytes: row for row in fixed}
    return [RowPair(row.size_bytes, row, by_size[row.size_bytes]) for row in default]


def _mark(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def _run(extra: list[str], options: argparse.Namespace, folder: Path, label: str) -> tuple[float, list[Row]]:
    json_path = folder / f"{label}.json"
    command = [sys.executable, "-m", "commbench", "--collective", options.collective, "--sizes",
               options.sizes, "--nproc", str(options.nproc), "--json", str(json_path), "--output-dir",
               str(folder), "--quiet", "--repeat", "1", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench_sweep: {' '.join(command[2:])} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed, load_run(json_path).rows


def _percent(value: float | None) -> str:
    return f"{'-':>7}" if value is None else f"{100 * value:>6.1f}%"


def _timed_seconds(row: Row) -> float:
    return sum(row.samples_us) * 1e-6


def _table(pairs: list[RowPair]) -> list[str]:
    lines = [f"{'size':>9}{'samples d':>10}{'f':>4}{'±95% d':>8}{'f':>8}{'d/f':>6}{'timed s d':>10}{'f':>7}"
             f"  as precise"]
    for pair in pairs:
        default, fixed = pair.widths
        ratio = f"{default / fixed:>6.2f}" if default is not None and fixed else f"{'-':>6}"
        lines.append(f"{format_size(pair.size_bytes):>9}{len(pair.default.samples_us):>10}"
                     f"{len(pair.fixed.samples_us):>4}{_percent(default):>8}{_percent(fixed):>8}{ratio}"
                     f"{_timed_seconds(pair.default):>10.2f}{_timed_seconds(pair.fixed):>7.2f}"
                     f"  {pair.verdict()}")
    return lines


def one_run(index: int, options: argparse.Namespace, folder: Path) -> Judgement:
    load_before = _load()
    sides: dict[str, tuple[float, list[Row]]] = {}
    order = [("fixed", FIXED), ("default", [])]
    for label, extra in order if index % 2 == 0 else order[::-1]:
        sides[label] = _run(extra, options, folder, f"{label}-{index}")
    (default_wall, default_rows), (fixed_wall, fixed_rows) = sides["default"], sides["fixed"]
    pairs = pair_rows(default_rows, fixed_rows)
    verdict = judge(pairs, default_wall, fixed_wall)
    first = "fixed" if index % 2 == 0 else "default"
    print(f"run {index + 1}: {options.collective} {options.sizes} on {options.nproc} ranks, {first} first; "
          f"load average (1, 5, 15 min) {load_before} before, {_load()} after")
    print("\n".join(_table(pairs)))
    measuring = [max(row.elapsed_s or 0.0 for row in rows) for rows in (default_rows, fixed_rows)]
    print(f"wall: default {default_wall:.1f} s, fixed {fixed_wall:.1f} s, ratio {verdict.ratio:.2f} "
          f"(target <= {WALL_TARGET:.2f}: {_mark(verdict.wall_passes())}); measuring alone (start-up "
          f"excluded): {measuring[0]:.1f} s, {measuring[1]:.1f} s, ratio {measuring[0] / measuring[1]:.2f}")
    print(f"work at one price (every op at the fixed run's median for its size): ratio "
          f"{verdict.work_ratio:.2f}")
    rows = verdict.rows
    print(f"intervals: default {verdict.with_interval[0]} of {rows} rows, fixed {verdict.with_interval[1]} "
          f"of {rows} (target: all: {_mark(verdict.intervals_pass())})")
    counts = verdict.verdicts
    print(f"precision: default at least as precise in {counts.get('yes', 0)} of {rows} rows, within "
          f"{WITHIN}x in {counts.get('within', 0)}, wider in {counts.get('no', 0)}, without an interval in "
          f"{counts.get('none', 0)} (target: all, {verdict.allowed_within} may be within {WITHIN}x: "
          f"{_mark(verdict.precision_passes())})")
    missing = sum(pair.missing_seconds() for pair in pairs)
    priced = [sum(pair.priced_ops()[side] for pair in pairs) for side in (0, 1)]
    priced_missing = sum(pair.missing * pair.price for pair in pairs)
    print(f"equal precision: the fixed side's samples in every default row would add {missing:.1f} s, a "
          f"wall ratio of at least {(default_wall + missing) / fixed_wall:.2f}; at one price a work ratio "
          f"of at least {(priced[0] + priced_missing) / priced[1]:.2f}")
    return verdict


def odds(pairs: int = 2000, spread: float = 0.2, seed: int = 1) -> list[str]:
    """Per sample count, how often its interval is no wider than (within 1.2x of) a 20-sample one's."""
    import numpy as np

    generator = np.random.default_rng(seed)
    lines = [f"{'samples':>8}{'as precise':>12}{'within 1.2x':>13}{'median width ratio':>20}"]
    for count in (6, 9, 12, 20, 30, 40, 60):
        ratios = []
        for _ in range(pairs):
            default = ci95_rel(np.exp(generator.normal(0.0, spread, count)).tolist())
            fixed = ci95_rel(np.exp(generator.normal(0.0, spread, 20)).tolist())
            ratios.append(default / fixed)
        lines.append(f"{count:>8}{sum(r <= 1 for r in ratios) / pairs:>12.2f}"
                     f"{sum(r <= WITHIN for r in ratios) / pairs:>13.2f}{statistics.median(ratios):>20.2f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collective", default="reduce_scatter_base")
    parser.add_argument("--sizes", default="1K:256M")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--odds", action="store_true", help="print the precision target's odds and stop")
    options = parser.parse_args()
    if options.odds:
        print("\n".join(odds()))
        return
    verdicts = []
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(options.runs):
            verdicts.append(one_run(index, options, Path(scratch)))
            print()
    ratios = sorted(verdict.ratio for verdict in verdicts)
    precise = sorted(verdict.verdicts.get("yes", 0) for verdict in verdicts)
    work = sorted(verdict.work_ratio for verdict in verdicts)
    print(f"over {len(verdicts)} runs: wall ratio {ratios[0]:.2f} to {ratios[-1]:.2f} (median "
          f"{statistics.median(ratios):.2f}), work at one price {work[0]:.2f} to {work[-1]:.2f}; rows at "
          f"least as precise {precise[0]} to {precise[-1]} of "
          f"{verdicts[0].rows}; all targets met in {sum(verdict.passes() for verdict in verdicts)} of "
          f"{len(verdicts)} runs")
    sys.exit(0 if all(verdict.passes() for verdict in verdicts) else 1)


if __name__ == "__main__":
    main()
