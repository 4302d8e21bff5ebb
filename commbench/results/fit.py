"""The latency-bandwidth (Hockney) model: t(size) = α + size / β, fitted over a sweep's sizes.

α is the time of an empty message (µs), β the bandwidth the time approaches at large sizes (GB/s, 1e9
bytes per second, in the same size convention as algbw). The fit is weighted least squares on the p50
times with weights 1/t², i.e. it minimises the squared *relative* error: without weights the largest
sizes, whose times are thousands of times longer, would decide everything and α would be noise.

A fit is marked unreliable (docs/fit.md), everywhere it is shown and in the saved "reliability", when
- β is extrapolated: β above EXTRAPOLATION_FACTOR (2) times the highest algbw measured among its points.
  In the model algbw(s) = β·s/(s + α·β), so a sweep whose algbw never reached β/2 stopped below the
  half-bandwidth size n½ = α·β, and β says what larger messages would do, not what was seen;
- or the model does not describe the points: rms relative error above ERROR_LIMIT (25%).
"""

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from commbench.results.model import SERIES_FIELDS, Row

if TYPE_CHECKING:
    import pandas

EXTRAPOLATION_FACTOR = 2.0  # β above this times the best algbw measured: the sweep stopped below n½ = αβ
ERROR_LIMIT = 0.25  # rms relative error above which the model does not describe the points


@dataclass(frozen=True)
class HockneyFit:
    alpha_us: float  # latency: the modelled time of a zero-byte message
    beta_gbps: float | None  # bandwidth; None when the time does not grow with size
    points: int
    rms_relative_error: float  # how well the model describes the points (0.05: 5% off on average)
    peak_algbw_gbps: float  # the highest size/time among the points: the best algbw the sweep measured

    def problems(self) -> list[str]:
        """Why the fit should not be quoted as the link's α and β: [] when nothing is wrong."""
        found = []
        if self.beta_gbps is not None and self.beta_gbps > EXTRAPOLATION_FACTOR * self.peak_algbw_gbps:
            found.append("extrapolated")
        if self.rms_relative_error > ERROR_LIMIT:
            found.append("poor fit")
        return found

    @property
    def reliability(self) -> str:
        """'ok', 'extrapolated', 'poor fit' or 'extrapolated, poor fit' (saved with each fit)."""
        return ", ".join(self.problems()) or "ok"


def fit_hockney(sizes_bytes: list[float], times_us: list[float]) -> HockneyFit | None:
    """α and β minimising Σ ((t_i - α - s_i/β) / t_i)² with α ≥ 0 and β > 0; None below 2 sizes.

    In the unknowns (α, x = 1/β) the model is linear, so this is a 2x2 weighted least-squares solve.
    When the unconstrained optimum has a negative α (times that are almost proportional to size), the
    constrained optimum lies on α = 0; when it has x ≤ 0 (the time does not grow with size), on x = 0.
    """
    points = [(float(s), float(t)) for s, t in zip(sizes_bytes, times_us, strict=True)
              if s > 0 and t is not None and t > 0 and math.isfinite(t)]
    if len({s for s, _ in points}) < 2:
        return None
    weights = [1.0 / (t * t) for _, t in points]
    sw = sum(weights)
    sws = sum(w * s for w, (s, _) in zip(weights, points, strict=True))
    swss = sum(w * s * s for w, (s, _) in zip(weights, points, strict=True))
    swt = sum(w * t for w, (_, t) in zip(weights, points, strict=True))
    swst = sum(w * s * t for w, (s, t) in zip(weights, points, strict=True))
    determinant = sw * swss - sws * sws
    alpha = (swss * swt - sws * swst) / determinant
    per_byte = (sw * swst - sws * swt) / determinant  # µs per byte = 1/β
    if alpha < 0:
        alpha, per_byte = 0.0, swst / swss
    if per_byte <= 0:
        alpha, per_byte = swt / sw, 0.0
    residuals = [(t - alpha - s * per_byte) / t for s, t in points]
    rms = math.sqrt(sum(r * r for r in residuals) / len(residuals))
    beta = 1e-3 / per_byte if per_byte > 0 else None  # bytes/µs = 1e6 B/s; GB/s = 1e-3 bytes/µs
    peak = max(s / t for s, t in points) * 1e-3
    return HockneyFit(alpha_us=alpha, beta_gbps=beta, points=len(points), rms_relative_error=rms,
                      peak_algbw_gbps=peak)


@dataclass(frozen=True)
class SeriesFit:
    """The fit of one series of rows (collective, dtype, op, mode, ...) of one benchmark."""

    series: dict[str, Any]
    benchmark: str
    fit: HockneyFit
    busbw_factor: float
    min_size_bytes: int
    max_size_bytes: int

    @property
    def beta_bus_gbps(self) -> float | None:
        beta = self.fit.beta_gbps
        return None if beta is None else beta * self.busbw_factor

    def to_dict(self) -> dict[str, Any]:
        """The flat form stored in results.json's "fits" list."""
        return {**self.series, "benchmark": self.benchmark, **asdict(self.fit),
                "beta_bus_gbps": self.beta_bus_gbps, "busbw_factor": self.busbw_factor,
                "min_size_bytes": self.min_size_bytes, "max_size_bytes": self.max_size_bytes,
                "weights": "1/t^2", "reliability": self.fit.reliability}


def fit_rows(rows: Iterable[Row]) -> list[SeriesFit]:
    """One fit per benchmark and series with at least two sizes that move data, in first-seen order."""
    from commbench.results.frame import (
        rows_frame,  # pandas loads on first use: every rank imports this module
    )

    return fit_frame(rows_frame(rows))


def fit_frame(frame: "pandas.DataFrame") -> list[SeriesFit]:
    """fit_rows over a frame of one run's rows (commbench.load's, filtered to one path)."""
    from commbench.results.frame import native

    fits = []
    keys = ["benchmark", *SERIES_FIELDS]
    sized = frame[frame["size_bytes"] > 0]
    # A series of one size has no fit: dropped at once (a fabric run has thousands, one per pair and way).
    sized = sized[sized.groupby(keys, sort=False, dropna=False)["size_bytes"].transform("nunique") >= 2]
    for key, members in sized.groupby(keys, sort=False, dropna=False):
        found = fit_hockney(members["size_bytes"].tolist(), members["time_us_p50"].tolist())
        if found is not None:
            series = {name: native(value) for name, value in zip(SERIES_FIELDS, key[1:], strict=True)}
            fits.append(SeriesFit(series, native(key[0]), found, native(members["busbw_factor"].iloc[0]),
                                  native(members["size_bytes"].min()), native(members["size_bytes"].max())))
    return fits


def _significant(value: float) -> str:
    """Three significant digits without an exponent: 25.1, 180, 0.307, 1234."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def describe_fit(alpha_us: float, beta_gbps: float | None, beta_bus_gbps: float | None) -> str:
    """'α = 25.1 µs, β = 180 GB/s (busbw 315 GB/s)', the line users quote."""
    if beta_gbps is None:
        return f"α = {_significant(alpha_us)} µs, β: none (the time does not grow with size)"
    bus = "" if beta_bus_gbps is None or beta_bus_gbps == beta_gbps \
        else f" (busbw {_significant(beta_bus_gbps)} GB/s)"
    return f"α = {_significant(alpha_us)} µs, β = {_significant(beta_gbps)} GB/s{bus}"


def unreliable_text(fit: HockneyFit) -> str:
    """Why a fit is unreliable, in words ('' when it is not): what the console, nccl-tests and the report
    print after the fit."""
    reasons = []
    if "extrapolated" in fit.problems():
        times = fit.beta_gbps / fit.peak_algbw_gbps
        reasons.append(f"β extrapolated, {_significant(times)}x the highest algbw measured "
                       f"({_significant(fit.peak_algbw_gbps)} GB/s)")
    if "poor fit" in fit.problems():
        reasons.append(f"fit error {fit.rms_relative_error:.0%} rms, over {ERROR_LIMIT:.0%}")
    return f"unreliable: {'; '.join(reasons)}" if reasons else ""


def fit_line(fit: SeriesFit, with_mode: bool) -> str:
    prefix = f"{fit.series.get('mode', '')} " if with_mode else ""
    error = fit.fit.rms_relative_error
    quality = f", fit error {error:.0%} rms" if 0.005 <= error <= ERROR_LIMIT else ""
    warning = f" · {unreliable_text(fit.fit)}" if fit.fit.problems() else ""
    described = describe_fit(fit.fit.alpha_us, fit.fit.beta_gbps, fit.beta_bus_gbps)
    return f"{prefix}α-β fit: {described}{quality}{warning}"
