"""explain's engine: a run's rows by series, each with its bounds (what the hardware allows, what rank 0's
NCCL variables leave), its size regime, and per row what ran, how far it is from the best, and the
reasons, ranked by their estimated cost (docs/explain.md).

Invariants: pure functions of saved data (a run's meta as results.json holds it, its rows, its fits);
only sweep rows are explained (a pattern's, replay's or fabric's rows mean more than one collective);
rows without busbw (errors, barrier) are left out; a series whose hardware cannot be read still gets its
rows and regime, with ``no_bound`` saying why there is no bound.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from commbench.measure.impls import REFERENCE_IMPL
from commbench.provenance.baselines import Baselines, load_baselines
from commbench.provenance.explain import env_rules, host_rules, row_rules
from commbench.provenance.explain.algorithms import best, bound_of, bounds, with_protocol
from commbench.provenance.explain.bounds import Bound
from commbench.provenance.explain.hosts import Scope, scope_of
from commbench.provenance.explain.nccl_env import NcclEnv
from commbench.provenance.explain.reason import Context, Reason
from commbench.provenance.explain.regime import Regime
from commbench.results.fit import SeriesFit, fit_rows
from commbench.results.model import SERIES_FIELDS, Row

MODEL_VERSION = 1  # results.json's explain.model: bumped when a formula or constant changes
DEFAULT_SKEW_THRESHOLD = 25.0  # --skew-threshold's default, for files that do not record it
Rule = Callable[[Context], Reason | None]
SERIES_RULES: tuple[Rule, ...] = (
    env_rules.nccl_algo, env_rules.nccl_proto, env_rules.nvls_disabled, env_rules.p2p_disabled,
    env_rules.shm_disabled, env_rules.ib_disabled, env_rules.ib_hca, env_rules.gdr_level, env_rules.channels,
    env_rules.buffsize, host_rules.nvlinks_inactive, host_rules.pcie_below_max, host_rules.numa_split,
    host_rules.uneven_ranks, host_rules.oversubscribed, host_rules.cores_shared)
ROW_RULES: tuple[Rule, ...] = (row_rules.straggler, row_rules.small_size, row_rules.algorithm_choice)


def ranked(reasons: list[Reason]) -> tuple[Reason, ...]:
    """Estimated costs first, largest first; then the reasons nothing could price, in rule order."""
    return tuple(sorted(reasons, key=lambda reason: (reason.loss is None, -(reason.loss or 0.0))))


@dataclass(frozen=True)
class RowExplanation:
    size_bytes: int
    mode: str
    busbw_gbps: float
    ran: Bound | None  # the bound of what ran (or of NCCL's likely choice, ran_known False)
    ran_known: bool
    protocol: str
    best: Bound | None  # the best the hardware allows
    allowed: Bound | None  # the best rank 0's NCCL variables leave
    reasons: tuple[Reason, ...]

    @property
    def pct_of_best(self) -> float | None:
        return None if self.best is None or not self.best.gbps else 100 * self.busbw_gbps / self.best.gbps

    def to_dict(self) -> dict[str, Any]:
        return {"size_bytes": self.size_bytes, "mode": self.mode, "busbw_gbps": self.busbw_gbps,
                "best_algorithm": self.best.algorithm if self.best else None,
                "best_gbps": None if self.best is None else round(self.best.gbps or 0, 4),
                "pct_of_best": None if self.pct_of_best is None else round(self.pct_of_best, 2),
                "allowed_algorithm": self.allowed.algorithm if self.allowed else None,
                "ran_algorithm": self.ran.algorithm if self.ran else None, "ran_known": self.ran_known,
                "ran_protocol": self.protocol,
                "ran_gbps": None if self.ran is None or self.ran.gbps is None else round(self.ran.gbps, 4),
                "reasons": [reason.rule for reason in self.reasons]}


@dataclass(frozen=True)
class SeriesExplanation:
    benchmark: str
    series: dict[str, Any]
    where: str  # 'ranks on hosts, backend on device, GPU model'
    hardware: tuple[Bound, ...]  # what the hardware allows, per algorithm
    allowed: tuple[Bound, ...]  # what rank 0's NCCL variables leave
    regime: Regime | None
    rows: tuple[RowExplanation, ...]
    no_bound: str = ""  # why there is no bound at all

    @property
    def title(self) -> str:
        parts = [self.benchmark, *(str(self.series.get(name) or "") for name in
                                   ("collective", "dtype", "op", "placement", "mode", "impl"))]
        return " · ".join(part for part in parts if part and part != REFERENCE_IMPL)

    @property
    def best(self) -> Bound | None:
        return best(self.hardware)

    def headline(self) -> RowExplanation | None:
        """The row the console line speaks for: the largest size."""
        return max(self.rows, key=lambda row: row.size_bytes, default=None)

    def reasons(self) -> tuple[Reason, ...]:
        """Every rule that fired on some row, once, with its largest estimated cost."""
        found: dict[str, Reason] = {}
        for row in self.rows:
            for reason in row.reasons:
                known = found.get(reason.rule)
                if known is None or (reason.loss or 0.0) > (known.loss or 0.0):
                    found[reason.rule] = reason
        return ranked(list(found.values()))

    def to_dict(self) -> dict[str, Any]:
        return {**self.series, "benchmark": self.benchmark, "where": self.where, "no_bound": self.no_bound,
                "best": None if self.best is None else self.best.to_dict(),
                "bounds": [bound.to_dict() for bound in self.hardware],
                "allowed": [bound.to_dict() for bound in self.allowed],
                "regime": None if self.regime is None else self.regime.to_dict(),
                "reasons": [reason.to_dict() for reason in self.reasons()],
                "rows": [row.to_dict() for row in self.rows]}


def _ran(row: Row, scope: Scope, allowed: tuple[Bound, ...],
         baselines: Baselines) -> tuple[Bound | None, bool]:
    """What ran: gloo's path; NCCL's logged algorithm (--nccl-debug) with its protocol; Send/Recv; else
    the best the NCCL variables leave, as NCCL's likely choice at large sizes (not known)."""
    if scope.backend == "gloo" or not scope.function:
        return best(allowed), scope.backend == "gloo" or bool(allowed)
    if row.nccl_algo:
        return with_protocol(bound_of(row.nccl_algo, scope, scope.env, baselines), row.nccl_proto), True
    return best(allowed), False


def _no_bound(scope: Scope, hardware: tuple[Bound, ...]) -> str:
    if scope.missing:
        return scope.missing
    if not hardware:
        return f"no bandwidth model for backend {scope.backend or '?'} on {scope.device or '?'}"
    if best(hardware) is None:
        return "; ".join(dict.fromkeys(f"{bound.algorithm}: {bound.why_not}" for bound in hardware))
    return ""


def explain_series(meta: Mapping[str, Any], rows: list[Row], fit: SeriesFit | None,
                   baselines: Baselines) -> SeriesExplanation:
    """One series (a benchmark's collective, dtype, op, mode, ... at every size)."""
    first = rows[0]
    scope = scope_of(meta, first.collective, first.busbw_factor, baselines)
    hardware, allowed = bounds(scope, NcclEnv(), baselines), bounds(scope, scope.env, baselines)
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    threshold = config.get("skew_threshold_percent")  # the run's --skew-threshold
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        threshold = DEFAULT_SKEW_THRESHOLD
    names = meta.get("hostnames")
    hostnames = tuple(str(name) for name in names) if isinstance(names, list) else ()
    context = Context(scope, hardware, allowed, baselines, skew_threshold=float(threshold),
                      hostnames=hostnames, regime=Regime.of(fit))
    series_reasons = [] if scope.missing else [reason for rule in SERIES_RULES if (reason := rule(context))]
    explained = []
    for row in sorted(rows, key=lambda row: row.size_bytes):
        ran, known = _ran(row, scope, allowed, baselines)
        here = replace(context, ran=ran, ran_known=known, row=row)
        reasons = series_reasons + [reason for rule in ROW_RULES if (reason := rule(here))]
        explained.append(RowExplanation(row.size_bytes, row.mode, row.busbw_gbps or 0.0, ran, known,
                                        row.nccl_proto, best(hardware), best(allowed), ranked(reasons)))
    return SeriesExplanation(first.benchmark, first.series(), "" if scope.missing else scope.describe(),
                             hardware, allowed, context.regime, tuple(explained), _no_bound(scope, hardware))


def _key(benchmark: str, series: dict[str, Any]) -> tuple:
    return (benchmark, *(series.get(name) for name in SERIES_FIELDS))


def explain_run(meta: Mapping[str, Any], rows: list[Row], fits: list[SeriesFit] | None = None,
                baselines: Baselines | None = None) -> list[SeriesExplanation]:
    """Every series of a run's sweep rows, in first-seen order (``fits``: the run's own, else fitted)."""
    measured = [row for row in rows if not row.pattern and not row.error and row.busbw_gbps is not None
                and row.size_bytes > 0]
    if not measured:
        return []
    baselines = baselines or load_baselines()
    by_fit = {_key(fit.benchmark, fit.series): fit for fit in (fit_rows(measured) if fits is None else fits)}
    groups: dict[tuple, list[Row]] = {}
    for row in measured:
        groups.setdefault(_key(row.benchmark, row.series()), []).append(row)
    return [explain_series(meta, members, by_fit.get(key), baselines) for key, members in groups.items()]
