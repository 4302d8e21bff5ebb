"""The registry: one descriptor per collective, by name.

A descriptor (base.Collective) says how a message size maps onto buffers for a world size and placement,
the bus-bandwidth factor, how the Backend runs it, and for --check which values each output must hold.
The runner, timers and writers read descriptors and never branch on a collective's name. Descriptors live
by family, each beside its buffers and expected values, and register themselves where they are defined:
adding a collective is one ``register(Collective(...))`` in its family's module (see
docs/architecture.md). The families are imported here in the order `--collective all` runs them.
"""

from commbench.measure.collectives import reductions, gathers, exchanges, uneven, point_to_point  # noqa: F401, I001
from commbench.measure.collectives.base import (
    IN_PLACE,
    MODES,
    OUT_OF_PLACE,
    PLACEMENTS,
    REGISTRY,
    Buffers,
    Collective,
    Expected,
    Layout,
    register,
)
from commbench.errors import UsageError, did_you_mean

__all__ = ["IN_PLACE", "MODES", "OUT_OF_PLACE", "PLACEMENTS", "REGISTRY", "Buffers", "Collective", "Expected",
           "Layout", "placements_for", "register", "resolve_collectives"]


def placements_for(collective: Collective, requested: list[str]) -> list[str]:
    """The placements to run: those asked for that the collective has, else its default (only) one."""
    chosen = [placement for placement in requested if placement in collective.placements]
    return chosen or [collective.default_placement]


def resolve_collectives(spec: str | list[str]) -> list[str]:
    """Names from a comma list (or 'all'), in the order given, duplicates dropped."""
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if part == "all":
            names.extend(REGISTRY)
            continue
        if part not in REGISTRY:
            raise UsageError(f"unknown collective {part!r}{did_you_mean(part, list(REGISTRY))}; "
                             "see 'commbench list'")
        names.append(part)
    if not names:
        raise UsageError("no collective given: --collective NAME[,NAME...] or all")
    return list(dict.fromkeys(names))
