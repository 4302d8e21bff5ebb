"""What adaptive iteration counts cost and buy: a full sweep, adaptive against a fixed 20 iterations.

Runs `commbench --collective reduce_scatter_base --sizes 1K:256M` on 2 local ranks twice, adaptive (the
default) and with `--iters 20 --warmup 5`, and prints the wall time of each and their ratio (target:
at most 0.6), and per size the two medians with their 95% confidence intervals, whether the adaptive
row is at least as precise (its interval's relative half-width no wider; judged where the adaptive row
has the 6 samples an interval needs; target: every such row), and whether each median lies within the
other's interval. The machine's load average is printed before and after: on a shared machine the
ratios move with it.

    python scripts/bench_sweep.py [--sizes 1K:256M] [--nproc 2] [--collective reduce_scatter_base]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commbench.core.sizes import format_size
from commbench.measure.stats import MIN_SAMPLES_FOR_CI, ci95_rel, median_ci95, percentile
from commbench.results.saved import load_run

TARGET_RATIO = 0.6


def _run(label: str, extra: list[str], options: argparse.Namespace, folder: Path) -> tuple[float, dict]:
    json_path = folder / f"{label}.json"
    command = [sys.executable, "-m", "commbench", "--collective", options.collective, "--sizes",
               options.sizes, "--nproc", str(options.nproc), "--json", str(json_path), "--output-dir",
               str(folder), "--quiet", *extra]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    return elapsed, {row.size_bytes: row for row in load_run(json_path).rows}


def _interval(samples: list[float]) -> tuple[float, tuple[float, float] | None]:
    ordered = sorted(samples)
    return percentile(ordered, 0.5), median_ci95(ordered)


def _shown(median: float, interval: tuple[float, float] | None) -> str:
    if interval is None:
        return f"{median:>12.1f} {'[too few samples]':>20}"
    return f"{median:>12.1f} [{interval[0]:>8.1f}, {interval[1]:>8.1f}]"


def _percent(value: float | None) -> str:
    return f"{'-':>7}" if value is None else f"{100 * value:>6.1f}%"


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def _compare(adaptive: dict, fixed: dict) -> tuple[list[str], int, int, int, int]:
    """Per size a line, and the counts of rows judged and passed for precision and for agreement."""
    lines = []
    precise = judged_precise = agreeing = judged = 0
    for size, row in adaptive.items():
        other = fixed[size]
        a_median, a_interval = _interval(row.samples_us)
        f_median, f_interval = _interval(other.samples_us)
        a_rel, f_rel = ci95_rel(row.samples_us), ci95_rel(other.samples_us)
        as_precise = "n/a"
        if len(row.samples_us) >= MIN_SAMPLES_FOR_CI and a_rel is not None and f_rel is not None:
            judged_precise += 1
            precise += a_rel <= f_rel
            as_precise = "yes" if a_rel <= f_rel else "no"
        verdict = "n/a"
        if a_interval is not None and f_interval is not None:
            agree = (a_interval[0] <= f_median <= a_interval[1]
                     and f_interval[0] <= a_median <= f_interval[1])
            judged += 1
            agreeing += agree
            verdict = "yes" if agree else "no"
        lines.append(f"{format_size(size):>9}{row.iters:>7}{len(row.samples_us):>8}"
                     f"{_shown(a_median, a_interval)}{_shown(f_median, f_interval)}"
                     f"{_percent(a_rel)}{_percent(f_rel)}{as_precise:>9}  {verdict}")
    return lines, precise, judged_precise, agreeing, judged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collective", default="reduce_scatter_base")
    parser.add_argument("--sizes", default="1K:256M")
    parser.add_argument("--nproc", type=int, default=2)
    options = parser.parse_args()
    load_before = _load()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        fixed_time, fixed = _run("fixed", ["--iters", "20", "--warmup", "5"], options, folder)
        adaptive_time, adaptive = _run("adaptive", [], options, folder)
    ratio = adaptive_time / fixed_time
    print(f"{options.collective} {options.sizes} on {options.nproc} ranks; load average (1, 5, 15 min) "
          f"{load_before} before, {_load()} after")
    verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
    print(f"wall time: adaptive {adaptive_time:.1f} s, fixed 20 iterations {fixed_time:.1f} s, "
          f"ratio adaptive/fixed {ratio:.2f} (target <= {TARGET_RATIO}: {verdict})")
    print(f"{'size':>9}{'iters':>7}{'samples':>8}{'adaptive p50 [95% CI] µs':>34}"
          f"{'fixed p50 [95% CI] µs':>34}{'±95% a':>7}{'±95% f':>7}  precise  agree")
    lines, precise, judged_precise, agreeing, judged = _compare(adaptive, fixed)
    print("\n".join(lines))
    print(f"adaptive at least as precise as fixed at {precise} of {judged_precise} sizes where it has "
          f"{MIN_SAMPLES_FOR_CI} samples or more (target: all)")
    print(f"medians within each other's interval at {agreeing} of {judged} sizes with an interval on both"
          f" sides (an interval needs {MIN_SAMPLES_FOR_CI} samples)")


if __name__ == "__main__":
    main()
