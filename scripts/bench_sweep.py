"""What adaptive iteration counts cost and buy: a full sweep, adaptive against a fixed 20 iterations.

Runs `commbench --collective reduce_scatter_base --sizes 1K:256M` on 2 local ranks twice, adaptive (the
default) and with --iters 20, and prints the wall time of each, their ratio, and per size the two
medians with their 95% confidence intervals and whether each median lies within the other's interval.

    python scripts/bench_sweep.py [--sizes 1K:256M] [--nproc 2] [--collective reduce_scatter_base]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commbench.results import load_run
from commbench.sizes import format_size
from commbench.stats import MIN_SAMPLES_FOR_CI, median_ci95, percentile


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collective", default="reduce_scatter_base")
    parser.add_argument("--sizes", default="1K:256M")
    parser.add_argument("--nproc", type=int, default=2)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        fixed_time, fixed = _run("fixed", ["--iters", "20"], options, folder)
        adaptive_time, adaptive = _run("adaptive", [], options, folder)
    print(f"{options.collective} {options.sizes} on {options.nproc} ranks")
    print(f"wall time: adaptive {adaptive_time:.1f} s, fixed 20 iterations {fixed_time:.1f} s, "
          f"ratio adaptive/fixed {adaptive_time / fixed_time:.2f}")
    print(f"{'size':>9}{'iters':>7}{'adaptive p50 [95% CI] µs':>34}{'fixed p50 [95% CI] µs':>34}  agree")
    agreeing = judged = 0
    for size, row in adaptive.items():
        a_median, a_interval = _interval(row.samples_us)
        f_median, f_interval = _interval(fixed[size].samples_us)
        if a_interval is None or f_interval is None:
            verdict = "n/a"
        else:
            agree = (a_interval[0] <= f_median <= a_interval[1]
                     and f_interval[0] <= a_median <= f_interval[1])
            judged += 1
            agreeing += agree
            verdict = "yes" if agree else "no"
        print(f"{format_size(size):>9}{row.iters:>7}{_shown(a_median, a_interval)}"
              f"{_shown(f_median, f_interval)}  {verdict}")
    print(f"medians within each other's interval at {agreeing} of {judged} sizes with an interval on both"
          f" sides (an interval needs {MIN_SAMPLES_FOR_CI} samples)")


if __name__ == "__main__":
    main()
