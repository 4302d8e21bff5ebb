"""The statistics of compare and its regression gate: passes are the unit of evidence.

A measured point (a row's key) has one row per pass on each side (the passes of `--repeat N`, pooled
over every file of that side). Samples within one pass share that pass's conditions (the load on the
machine, the state of the fabric), so they say how precisely that pass was measured, not how the next
pass or run will go; only the spread between passes does. Each pass therefore counts once, by its p50,
which already carries its own sampling noise (resampling its samples again would count that noise
twice).

- A side's time is the geometric mean of its passes' p50s; the change is r = new / base, the ratio of
  the two sides' geometric means (times vary by factors, so the comparison is made on their logarithms).
- Its 95% interval: Welch's t on the passes' ln p50: ln r +- t(0.975, df) x se, with
  se = sqrt(s_base^2 / n_base + s_new^2 / n_new) (s: the standard deviation of a side's ln p50 over
  its n passes) and df Welch-Satterthwaite's; exp() of both ends.
- Significance from the same test: against no change (two-sided, the `significant` column)
  p = 2 P(T >= |ln r| / se); against the gate's line L = 1 + PCT/100 (one-sided: is the slowdown
  beyond L?) p = P(T >= ln(r / L) / se), T following Student's t with df degrees of freedom.
- Many points: p-values are adjusted by Benjamini-Hochberg over a comparison's testable points
  (q-values); a point is significant when its q is at most --significance-level, which bounds the
  expected share of false discoveries among the points called significant.
- A point with fewer than MIN_PASSES_PER_SIDE passes on a side carries no run-to-run information: it gets a
  change but no interval and no significance.

The measured false-alarm and detection rates of this rule are in docs/performance.md (scripts/bench_gate.py).
"""

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import t as student_t

MIN_PASSES_PER_SIDE = 2  # fewer passes on a side: no run-to-run information, no interval


@dataclass(frozen=True)
class Change:
    """new / base for one point: the estimate and, with passes on both sides, its t statistics."""

    ratio: float
    standard_error: float | None = None  # of ln r; None: too few passes for an interval
    df: float | None = None

    @property
    def testable(self) -> bool:
        return self.standard_error is not None

    def interval(self, level: float = 0.95) -> tuple[float, float] | None:
        if self.standard_error is None or self.df is None:
            return None
        half = student_t.ppf(0.5 + level / 2, self.df) * self.standard_error if self.standard_error else 0.0
        return self.ratio * math.exp(-half), self.ratio * math.exp(half)

    @property
    def low(self) -> float | None:
        found = self.interval()
        return None if found is None else found[0]

    @property
    def high(self) -> float | None:
        found = self.interval()
        return None if found is None else found[1]

    def p_different(self) -> float | None:
        """Two-sided: is the change other than none?"""
        if not self.testable:
            return None
        return min(1.0, 2.0 * self._upper_tail(abs(math.log(self.ratio))))

    def p_beyond(self, line: float) -> float | None:
        """One-sided: is new / base above ``line`` (a slowdown past the gate's line)?"""
        return self._upper_tail(math.log(self.ratio / line)) if self.testable else None

    def _upper_tail(self, distance: float) -> float:
        """P(T >= distance / se); a zero se (every pass alike on both sides) decides by the sign."""
        if not self.standard_error:
            return 0.0 if distance > 0 else 1.0
        return float(student_t.sf(distance / self.standard_error, self.df))


def _log_moments(p50s: Sequence[float]) -> tuple[float, float, int]:
    """(mean, variance / n, n) of the passes' ln p50."""
    logs = [math.log(value) for value in p50s]
    variance = statistics.variance(logs) if len(logs) > 1 else 0.0
    return statistics.fmean(logs), variance / len(logs), len(logs)


def estimate_change(base_p50s: Sequence[float], new_p50s: Sequence[float]) -> Change | None:
    """The change of one point from each side's pass p50s; None when a side has no positive time."""
    if not base_p50s or not new_p50s or min(*base_p50s, *new_p50s) <= 0:
        return None
    base_mean, base_var, base_n = _log_moments(base_p50s)
    new_mean, new_var, new_n = _log_moments(new_p50s)
    ratio = math.exp(new_mean - base_mean)
    if min(base_n, new_n) < MIN_PASSES_PER_SIDE:
        return Change(ratio)
    total = base_var + new_var
    df = (total ** 2 / (base_var ** 2 / (base_n - 1) + new_var ** 2 / (new_n - 1))) if total else \
        float(base_n + new_n - 2)
    return Change(ratio, math.sqrt(total), df)


def geometric_mean(values: Sequence[float]) -> float | None:
    """A side's time: the geometric mean of its passes' p50s (None without a positive one)."""
    positive = [value for value in values if value > 0]
    return math.exp(statistics.fmean(math.log(value) for value in positive)) if positive else None


def benjamini_hochberg(p_values: Sequence[float | None]) -> list[float | None]:
    """q-values: each p-value adjusted for the number of tests (None stays None and is no test).
    q(i) = min over k >= rank(i) of p(k) x m / k, at most 1."""
    tested = sorted((p, index) for index, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 1.0
    for rank in range(len(tested), 0, -1):
        p, index = tested[rank - 1]
        running = min(running, p * len(tested) / rank)
        adjusted[index] = running
    return adjusted
