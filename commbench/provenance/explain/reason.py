"""What every rule returns and reads: a Reason (the cause, the evidence it read, the estimated share of
bandwidth it costs and how that was estimated) and the Context (the series' setting, its bounds with and
without rank 0's NCCL variables, the algorithm that ran, the row and its size regime).

How a loss is estimated, per rule (``basis`` says which): the model's own bound with and without the
cause (an NCCL variable unset, the links at their maximum, the CPUs not shared); a published effect where
the model has none; the α-β fit for a small size; the row's own arrival skew for a straggler; a rough
share, named so; None where nothing supports a number. Reasons are ranked by loss, estimated ones first.

Invariants: a rule is a pure function of a Context, returning None when its cause is absent or costs
nothing here (an NCCL variable that rules out an algorithm this hardware lacks anyway).
"""

from dataclasses import dataclass, replace
from typing import Any

from commbench.provenance.baselines import Baselines
from commbench.provenance.explain.algorithms import best, bounds
from commbench.provenance.explain.bounds import Bound
from commbench.provenance.explain.hosts import Host, Scope
from commbench.provenance.explain.regime import Regime
from commbench.results.model import Row


@dataclass(frozen=True)
class Reason:
    rule: str
    text: str  # short, for the console line: 'NCCL_NVLS_ENABLE=0 is set'
    evidence: dict[str, Any]
    loss: float | None  # the estimated share of the bound the cause costs (None: not estimated)
    basis: str  # how ``loss`` was estimated

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "text": self.text, "evidence": self.evidence,
                "loss": None if self.loss is None else round(self.loss, 4), "basis": self.basis}


@dataclass(frozen=True)
class Context:
    """What the rules read: the series' setting, its bounds with and without rank 0's NCCL variables,
    the algorithm that ran (or NCCL's likely choice), the row, and the series' size regime."""

    scope: Scope
    hardware: tuple[Bound, ...]  # what the hardware allows (no NCCL variables)
    allowed: tuple[Bound, ...]  # what rank 0's NCCL variables leave
    baselines: Baselines
    ran: Bound | None = None
    ran_known: bool = False
    row: Row | None = None
    regime: Regime | None = None
    skew_threshold: float = 25.0  # the run's --skew-threshold
    hostnames: tuple[str, ...] = ()  # by rank


def cost(before: Bound | None, after: Bound | None) -> float | None:
    if before is None or after is None or not before.gbps:
        return None
    return max(0.0, 1.0 - (after.gbps or 0.0) / before.gbps)


def changed(ctx: Context, hosts: dict[str, Host]) -> Bound | None:
    """The best bound, under the run's NCCL variables, were ``hosts`` (changed copies) what the series
    ran on: how a rule prices a cause the model can take away or add."""
    return best(bounds(replace(ctx.scope, hosts={**ctx.scope.hosts, **hosts}), ctx.scope.env, ctx.baselines))


def used_hosts(ctx: Context) -> list[Host]:
    return [ctx.scope.hosts[name] for name, _ in ctx.scope.ranks]
