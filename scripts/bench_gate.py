"""How often the regression gate cries wolf, and how often it catches a real slowdown, on this machine.

Runs one command (`commbench --collective all_reduce,reduce_scatter_base --sizes 1K:256K --iters 20
--repeat 10` on 2 local ranks) 2 x N times unchanged and N times slowed for real (every core busy with
a loop of its own, which the ranks share), then judges with commbench's own compare at `--fail-above 10`:

- false alarms: runs 2i and 2i + 1 of the unchanged command, N comparisons (target: at most 1 in 20),
  with every pass (--repeat 10) and with the first five (what --repeat 5 would have measured);
- detections: unchanged run 2i against slowed run i, N comparisons (target: at least 19 in 20);
- the smallest slowdown detected reliably: the unchanged pairs again with the new side's times scaled
  by each factor (target: the smallest factor caught in at least 19 of 20);
- and, side by side, what the gate of commbench 0.1 did with the same files (a Mann-Whitney U test on
  the samples within one pass, p < 0.05): its false alarms.

Prints counts and PASS or FAIL per target, and the load average before and after (the machine is
shared: the rates move with its load). Files go to --workdir (a temporary folder by default). Exit
status 1 when a target fails at --repeat's passes (the five-pass lines are shown for comparison).

    python scripts/bench_gate.py [--comparisons 20] [--repeat 10] [--sizes 1K:256K] [--iters 20]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from scipy.stats import mannwhitneyu

from commbench.analysis.compare import compare_runs
from commbench.analysis.gate import slowdowns
from commbench.results.model import Row
from commbench.results.saved import SavedRun, load_run

FAIL_ABOVE = 10.0
FACTORS = (1.15, 1.2, 1.3, 1.5, 2.0, 3.0)
TARGET_FALSE = 1 / 20
TARGET_CAUGHT = 19 / 20


def _run(options: argparse.Namespace, path: Path, squeezed: bool) -> float:
    """One run of the command (on one busy core when ``squeezed``); its wall time."""
    command = [sys.executable, "-m", "commbench", "--collective", options.collective, "--sizes",
               options.sizes, "--iters", str(options.iters), "--warmup", "5", "--repeat", str(options.repeat),
               "--nproc", "2", "--quiet", "--json", str(path), "--csv", str(path.with_suffix(".csv"))]
    hogs = []
    if squeezed:
        # Every core busy with a loop of its own, which the ranks share: squeezing both ranks onto one
        # core was no slowdown on an idle 2-core VM (they wait for each other anyway: 0.8x the wall
        # time), and one core beside one busy loop slowed unevenly (passes 1x to 4x).
        hogs = [subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"],
                                 stdin=subprocess.DEVNULL) for core in sorted(os.sched_getaffinity(0))]
    env = {name: value for name, value in os.environ.items()
           if name not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    started = time.perf_counter()
    try:
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    if result.returncode != 0:
        sys.exit(f"bench_gate: {' '.join(command)} exited {result.returncode}: {result.stderr[-2000:]}")
    return time.perf_counter() - started


def _passes(run: SavedRun, count: int, factor: float = 1.0) -> SavedRun:
    """The run's first ``count`` passes, every time scaled by ``factor``."""
    rows = [_scaled(row, factor) for row in run.rows if row.repeat < count]
    return replace(run, rows=rows)


def _scaled(row: Row, factor: float) -> Row:
    if factor == 1.0 or row.time_us_p50 is None:
        return row
    return replace(row, time_us_p50=row.time_us_p50 * factor,
                   samples_us=[value * factor for value in row.samples_us])


def _gate_fails(base: SavedRun, new: SavedRun) -> bool:
    return bool(slowdowns(compare_runs(base, new), FAIL_ABOVE))


def _old_gate_fails(base: SavedRun, new: SavedRun) -> bool:
    """commbench 0.1's gate on the first pass: a sample-level rank test, p < 0.05, above the line."""
    first = {row.key(): row for row in base.rows if row.repeat == 0 and row.samples_us}
    for row in new.rows:
        other = first.get(row.key())
        if row.repeat != 0 or other is None or not row.samples_us or not other.time_us_p50:
            continue
        ratio = row.time_us_p50 / other.time_us_p50
        if ratio > 1 + FAIL_ABOVE / 100 and mannwhitneyu(other.samples_us, row.samples_us).pvalue < 0.05:
            return True
    return False


def _verdict(count: int, total: int, target: float, at_most: bool) -> str:
    good = count <= target * total if at_most else count >= target * total
    return "PASS" if good else "FAIL"


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def measure(options: argparse.Namespace, folder: Path) -> tuple[list[SavedRun], list[SavedRun], dict]:
    """The unchanged runs (2 x N) and the slowed ones (N), interleaved in time, and their wall times."""
    unchanged, slowed, seconds = [], [], {"unchanged": 0.0, "slowed": 0.0}
    for index in range(options.comparisons):
        for label, squeezed in ((f"a{index}", False), (f"b{index}", False), (f"s{index}", True)):
            path = folder / f"{label}.json"
            seconds["slowed" if squeezed else "unchanged"] += _run(options, path, squeezed)
            (slowed if squeezed else unchanged).append(load_run(path))
        print(f"  comparison {index + 1} of {options.comparisons} measured", flush=True)
    return unchanged, slowed, seconds


def report(options: argparse.Namespace, unchanged: list[SavedRun],
           slowed: list[SavedRun]) -> tuple[list[str], bool]:
    """The lines to print, and whether every target was met at --repeat's passes."""
    total = options.comparisons
    met = True
    pairs = [(unchanged[2 * i], unchanged[2 * i + 1]) for i in range(total)]
    lines = []
    for passes in sorted({options.repeat, min(5, options.repeat)}, reverse=True):
        false_alarms = sum(_gate_fails(_passes(a, passes), _passes(b, passes)) for a, b in pairs)
        caught = sum(_gate_fails(_passes(a, passes), _passes(s, passes))
                     for (a, _), s in zip(pairs, slowed, strict=True))
        quiet = _verdict(false_alarms, total, TARGET_FALSE, True)
        catches = _verdict(caught, total, TARGET_CAUGHT, False)
        if passes == options.repeat:
            met = quiet == catches == "PASS"
        lines.append(f"{passes} passes: false alarms {false_alarms} of {total} [{quiet}: at most 1 in 20]; "
                     f"busy-core slowdown caught {caught} of {total} [{catches}: at least 19 in 20]")
        by_factor = {factor: sum(_gate_fails(_passes(a, passes), _passes(b, passes, factor))
                                 for a, b in pairs) for factor in FACTORS}
        reliable = [factor for factor, count in by_factor.items() if count >= TARGET_CAUGHT * total]
        lines.append(f"{passes} passes: scaled slowdowns caught " + ", ".join(
            f"{factor:g}x {count}/{total}" for factor, count in by_factor.items())
            + f"; smallest caught in 19 of 20: {f'{min(reliable):g}x' if reliable else 'none up to 3x'}")
    old = sum(_old_gate_fails(a, b) for a, b in pairs)
    lines.append(f"commbench 0.1's gate (samples of one pass, Mann-Whitney p < 0.05) on the same unchanged "
                 f"pairs: false alarms {old} of {total}")
    return lines, met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--sizes", default="1K:256K")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--collective", default="all_reduce,reduce_scatter_base")
    parser.add_argument("--workdir", default=None, help="Keep the runs here (default: a temporary folder).")
    options = parser.parse_args()
    if shutil.which("taskset") is None:
        sys.exit("bench_gate: needs taskset (util-linux) to pin the slowed runs' busy loops to cores")
    folder = Path(options.workdir or tempfile.mkdtemp(prefix="bench_gate."))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {_load()}; {3 * options.comparisons} runs of --repeat {options.repeat} "
          f"into {folder}", flush=True)
    unchanged, slowed, seconds = measure(options, folder)
    lines, met = report(options, unchanged, slowed)
    for line in lines:
        print(line)
    print(f"wall time per run: unchanged {seconds['unchanged'] / (2 * options.comparisons):.1f} s, slowed "
          f"{seconds['slowed'] / options.comparisons:.1f} s; load average after: {_load()}")
    (folder / "summary.json").write_text(json.dumps({"options": vars(options), "seconds": seconds}))
    if options.workdir is None:
        shutil.rmtree(folder)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
