"""The latency-bandwidth (Hockney) model: t(size) = α + size / β, fitted over a sweep's sizes.

α is the time of an empty message (µs), β the bandwidth the time approaches at large sizes (GB/s, 1e9
bytes per second, in the same size convention as algbw). The fit is weighted least squares on the p50
times with weights 1/t², i.e. it minimises the squared *relative* error: without weights the largest
sizes, whose times are thousands of times longer, would decide everything and α would be noise.
"""

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from commbench.results import Row


@dataclass(frozen=True)
class HockneyFit:
    alpha_us: float  # latency: the modelled time of a zero-byte message
    beta_gbps: float | None  # bandwidth; None when the time does not grow with size
    points: int
    rms_relative_error: float  # how well the model describes the points (0.05: 5% off on average)


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
    return HockneyFit(alpha_us=alpha, beta_gbps=beta, points=len(points), rms_relative_error=rms)


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
                "weights": "1/t^2"}


def fit_rows(rows: Iterable[Row]) -> list[SeriesFit]:
    """One fit per benchmark and series with at least two sizes that move data, in first-seen order."""
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        if row.size_bytes > 0:
            groups.setdefault((row.benchmark, tuple(row.series().items())), []).append(row)
    fits = []
    for (benchmark, series), members in groups.items():
        found = fit_hockney([row.size_bytes for row in members], [row.time_us_p50 for row in members])
        if found is not None:
            fits.append(SeriesFit(dict(series), benchmark, found, members[0].busbw_factor,
                                  min(row.size_bytes for row in members),
                                  max(row.size_bytes for row in members)))
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


def fit_line(fit: SeriesFit, with_mode: bool) -> str:
    prefix = f"{fit.series.get('mode', '')} " if with_mode else ""
    error = fit.fit.rms_relative_error
    quality = f", fit error {error:.0%} rms" if error >= 0.005 else ""
    return f"{prefix}α-β fit: {describe_fit(fit.fit.alpha_us, fit.fit.beta_gbps, fit.beta_bus_gbps)}{quality}"
