"""How often the regression gate fails on passes drawn from a known distribution: the gate itself
(`compare_runs`, then `slowdowns`, as `commbench compare --fail-above 10` judges), on runs made of
chosen pass times (tests/gate_helpers.py), without starting a process.

Each comparison is 20 points of one collective on each side; every pass's p50 is log-normal with a 20%
spread, and one pass in five twice as slow (the kind of swing a shared machine shows). The new side is
the base's distribution times a factor: 1 (identical sides: a failure is a false alarm) or a slowdown.
Per passes a side (5 and 10): how many of --trials comparisons failed at each factor, with PASS or FAIL
against the targets: identical sides fail at most 1 in 20, 1.3x is caught in at least 9 of 10 and 2x
in at least 19 of 20. docs/performance.md#the-regression-gate quotes its table.

    python scripts/gate_rates.py [--trials 150] [--passes 5,10] [--seed 11]
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.gate_helpers import gate_fails  # noqa: E402

FAIL_ABOVE = 10.0
POINTS = 20
SPREAD = 0.2  # the passes' log-normal sigma
SLOW_SHARE, SLOW_FACTOR = 0.2, 2.0  # one pass in five twice as slow
FACTORS = (1.0, 1.15, 1.2, 1.3, 1.5, 2.0)
TARGETS = {1.0: ("at most", 1 / 20), 1.3: ("at least", 9 / 10), 2.0: ("at least", 19 / 20)}


def draw(rng: np.random.Generator, passes: int, factor: float) -> np.ndarray:
    """[point][pass] p50s in µs, as the module docstring describes."""
    times = np.exp(rng.normal(np.log(800.0 * factor), SPREAD, size=(POINTS, passes)))
    return times * np.where(rng.random((POINTS, passes)) < SLOW_SHARE, SLOW_FACTOR, 1.0)


def verdict(factor: float, failed: int, trials: int) -> str:
    if factor not in TARGETS:
        return ""
    bound, share = TARGETS[factor]
    good = failed <= share * trials if bound == "at most" else failed >= share * trials
    return f" [{'PASS' if good else 'FAIL'}: {bound} {share:.0%}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=150, help="comparisons per factor and passes")
    parser.add_argument("--passes", default="5,10", help="passes a side, comma-separated")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"the gate at --fail-above {FAIL_ABOVE:g}, {args.trials} comparisons of {POINTS} points per cell "
          f"(log-normal passes, {SPREAD:.0%} spread, one in {1 / SLOW_SHARE:g} {SLOW_FACTOR:g}x slow)")
    labels = ("identical" if factor == 1 else f"{factor:g}x" for factor in FACTORS)
    print("passes  " + "  ".join(f"{label:>9}" for label in labels))
    verdicts = []
    for passes in (int(text) for text in args.passes.split(",")):
        counts = [sum(gate_fails(draw(rng, passes, 1.0), draw(rng, passes, factor), FAIL_ABOVE)
                      for _ in range(args.trials)) for factor in FACTORS]
        print(f"{passes:>6}  " + "  ".join(f"{count:>9}" for count in counts))
        for factor, count in zip(FACTORS, counts, strict=True):
            if factor in TARGETS:
                what = "identical sides failed" if factor == 1 else f"{factor:g}x caught"
                verdicts.append(f"{passes} passes: {what} {count} of {args.trials}"
                                f"{verdict(factor, count, args.trials)}")
    print("\n".join(verdicts))
    return 1 if any("FAIL" in line for line in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
