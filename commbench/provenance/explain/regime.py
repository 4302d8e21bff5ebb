"""The size regime of a series, from its α-β fit (results/fit.py, docs/fit.md): algbw(s) = β s / (s + n½)
with the half-bandwidth size n½ = α·β, so a size below n½ gets less than half of β (latency-bound) and a
size reaches 90% of β from 9 n½.

Invariants: pure; a fit without β (the time does not grow with size) has no regime; an unreliable fit's
regime is kept but marked, and rules do not rest on it.
"""

from dataclasses import dataclass
from typing import Any

from commbench.results.fit import SeriesFit

NEAR_PEAK = 0.9  # the share of β from which a size counts as bandwidth-bound


@dataclass(frozen=True)
class Regime:
    alpha_us: float
    beta_gbps: float  # algbw β
    busbw_factor: float
    reliability: str  # 'ok', or why the fit should not be quoted (docs/fit.md)

    @classmethod
    def of(cls, fit: SeriesFit | None) -> "Regime | None":
        if fit is None or fit.fit.beta_gbps is None:
            return None
        return cls(fit.fit.alpha_us, fit.fit.beta_gbps, fit.busbw_factor, fit.fit.reliability)

    @property
    def reliable(self) -> bool:
        return self.reliability == "ok"

    @property
    def half_bytes(self) -> float:
        """n½ = α·β: µs x GB/s = 1e3 bytes."""
        return self.alpha_us * self.beta_gbps * 1e3

    @property
    def near_peak_bytes(self) -> float:
        """The size from which algbw reaches NEAR_PEAK of β: n½ x 0.9 / 0.1."""
        return self.half_bytes * NEAR_PEAK / (1 - NEAR_PEAK)

    @property
    def beta_bus_gbps(self) -> float:
        return self.beta_gbps * self.busbw_factor

    def share(self, size_bytes: float) -> float:
        """The share of β the model gives a size."""
        return size_bytes / (size_bytes + self.half_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"alpha_us": round(self.alpha_us, 3), "beta_gbps": round(self.beta_gbps, 4),
                "beta_bus_gbps": round(self.beta_bus_gbps, 4),
                "latency_bound_below_bytes": round(self.half_bytes),
                "near_peak_from_bytes": round(self.near_peak_bytes), "reliability": self.reliability}
