"""The implementations: every way commbench can run a collective, by name (--impl).

An implementation (a subclass of base.Implementation per family) says which collectives it runs, what it
needs, what the backend sets up for it, how it issues each collective and what proves its path ran; the
runner measures each alike, its set-up timed apart, and an implementation that cannot run here becomes
rows with the reason. The families register themselves in their modules, imported here in the order
`--impl all` runs them (docs/implementations.md). REFERENCE_IMPL is the one registered as the reference.
"""

from commbench.measure.impls import c10d, nccl, symmetric, nvshmem, torchcomms  # noqa: F401, I001
from commbench.measure.impls.base import (
    REGISTRY,
    Evidence,
    Implementation,
    Needs,
    Setting,
    SizeFacts,
    reference,
)
from commbench.errors import UsageError, did_you_mean

__all__ = ["DEFAULT_IMPLS", "REFERENCE_IMPL", "REGISTRY", "Evidence", "Implementation", "Needs", "Setting",
           "SizeFacts", "check_applicable", "impls_for", "process_sets", "resolve_impls"]

# torch.distributed's own call: --impl's default, what rows from before --impl ran, what "vs" compares with
REFERENCE_IMPL = reference().name
DEFAULT_IMPLS = [REFERENCE_IMPL]


def resolve_impls(names: list[str]) -> list[str]:
    """--impl: names (or 'all') in registry order, once each; UsageError naming an unknown one."""
    chosen: list[str] = []
    for name in names:
        if name == "all":
            chosen.extend(REGISTRY)
        elif name in REGISTRY:
            chosen.append(name)
        else:
            raise UsageError(f"unknown implementation {name!r}{did_you_mean(name, [*REGISTRY, 'all'])}; "
                             f"choose from {', '.join(REGISTRY)} or all (docs/implementations.md)")
    if not chosen:
        raise UsageError(f"no implementation given: --impl {', '.join(REGISTRY)} or all")
    return list(dict.fromkeys(name for name in REGISTRY if name in chosen))


def impls_for(collective: str, names: list[str]) -> list[str]:
    """The implementations of ``names`` that run ``collective``, in order."""
    return [name for name in names if REGISTRY[name].runs(collective)]


def check_applicable(names: list[str], collectives: list[str], everything: bool) -> None:
    """UsageError when an implementation named on its own runs none of the collectives asked for
    (with 'all', such implementations are left out of those collectives' tables)."""
    if everything:
        return
    for name in names:
        if not any(REGISTRY[name].runs(collective) for collective in collectives):
            runs = ", ".join(REGISTRY[name].collectives or ())
            raise UsageError(f"--impl {name} runs {runs}: none of the collectives asked for "
                             f"({', '.join(collectives)})")


def process_sets(names: list[str]) -> list[list[str]]:
    """``names`` in the sets of rank processes they run in, each in order: torch holds one symmetric-memory
    backend per process, fixed once its allocator is used (symm_mem.set_backend). The first set, run by
    the run's own ranks, holds every implementation that needs no such backend and those of the first
    backend named; each other backend's run in rank processes of their own."""
    by_backend: dict[str, list[str]] = {}
    for name in names:
        path = REGISTRY[name].path
        by_backend.setdefault(path.symmetric_backend if path is not None else "", []).append(name)
    plain = by_backend.pop("", [])
    sets = list(by_backend.values())
    first = sets.pop(0) if sets else []
    own = [name for name in names if name in plain or name in first]
    return [own, *sets] if own else sets
