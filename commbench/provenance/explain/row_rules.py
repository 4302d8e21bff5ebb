"""A row's own causes: a straggler rank, a size below the bandwidth-bound regime, and NCCL choosing an
algorithm or protocol that allows less than its best at that size.

Invariants: as every rule (reason.py); these read ``ctx.row`` and return None without one.
"""

from commbench.core.sizes import approximate_size, format_size
from commbench.provenance.explain.algorithms import best
from commbench.provenance.explain.reason import Context, Reason, cost
from commbench.provenance.explain.regime import NEAR_PEAK
from commbench.results.model import SKEW_FLOOR_US, skew_percent

MOST_LOSS = 0.95  # a loss estimate never claims the whole bound


def straggler(ctx: Context) -> Reason | None:
    """The rank its group waited for (docs/measurement.md#per-rank-times-arrival-skew-and-stragglers),
    when its skew passes the run's --skew-threshold: the others waited that share of the op."""
    row = ctx.row
    percent = None if row is None else skew_percent(row)
    if row is None or percent is None or percent <= ctx.skew_threshold:
        return None
    if (row.skew_us_max or 0.0) < SKEW_FLOOR_US:
        return None
    rank = row.slowest_rank
    host = ctx.hostnames[rank] if rank is not None and 0 <= rank < len(ctx.hostnames) else "?"
    return Reason("straggler", f"rank {rank} ({host}) arrived last, {row.skew_us_max:.0f} µs after the "
                  f"first ({percent:.0f}% of p50)",
                  {"slowest_rank": row.slowest_rank, "host": host, "skew_us_max": row.skew_us_max,
                   "time_us_p50": row.time_us_p50, "skew_threshold_percent": ctx.skew_threshold},
                  min(MOST_LOSS, percent / 100), "measured: the share of the op the others waited")


def small_size(ctx: Context) -> Reason | None:
    regime, row = ctx.regime, ctx.row
    if regime is None or row is None or not regime.reliable:
        return None
    share = regime.share(row.size_bytes)
    if share >= NEAR_PEAK:
        return None
    return Reason("small-size", f"latency-bound: at {format_size(row.size_bytes)} the α-β fit gives "
                  f"{share:.0%} of its β (90% from {approximate_size(regime.near_peak_bytes)})",
                  {"size_bytes": row.size_bytes, "alpha_us": round(regime.alpha_us, 3),
                   "beta_gbps": round(regime.beta_gbps, 4), "half_bandwidth_bytes": round(regime.half_bytes)},
                  1 - share, "fit: algbw(s) = β s / (s + α β)")


def algorithm_choice(ctx: Context) -> Reason | None:
    """NCCL chose (its log says) an algorithm or protocol that allows less here than the best the run's
    variables leave: its tuner picks per size, for latency at small sizes."""
    ran, top = ctx.ran, best(ctx.allowed)
    if not ctx.ran_known or ran is None or top is None or ran.gbps is None:
        return None
    loss = cost(top, ran)
    if not loss or loss < 0.01:
        return None
    protocol = f"/{ctx.row.nccl_proto}" if ctx.row is not None and ctx.row.nccl_proto else ""
    return Reason("algorithm-choice", f"NCCL chose {ran.algorithm}{protocol} here ({top.algorithm} allows "
                  f"{top.gbps:.3g})", {"nccl_algo": ran.algorithm, "nccl_proto": protocol.lstrip("/"),
                                        "bound_ran": round(ran.gbps, 2), "best_allowed": top.algorithm,
                                        "bound_best": round(top.gbps or 0, 2)},
                  loss, "model: the bound of what ran against the best allowed")
