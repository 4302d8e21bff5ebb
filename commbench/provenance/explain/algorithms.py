"""Each algorithm's bound on a series' scope (the formulas of bounds.py's docstring), what the hardware
offers it, and what rank 0's NCCL variables leave of it.

Invariants: pure; ``bounds(scope, NcclEnv())`` is what the hardware allows, ``bounds(scope, scope.env)``
what the run's environment allows, with the same algorithms in the same order, so a reason can compare
them; an algorithm the hardware or the environment rules out keeps its place with gbps None and why.
"""

from collections.abc import Callable
from dataclasses import replace

from commbench.core.untrusted import whole_number
from commbench.provenance.baselines import Baselines
from commbench.provenance.explain.bounds import (
    LOOPBACK_COPIES,
    NVLS_FACTOR,
    NVLS_WIRE,
    PROTOCOL,
    PROTOCOL_FORMATS,
    RING_FUNCTIONS,
    TREE_FACTOR,
    TREE_TWO_NODES,
    Bound,
    Part,
    bound_from,
    intra,
    network,
    nvlink,
    one_nic,
)
from commbench.provenance.explain.hosts import Host, Scope
from commbench.provenance.explain.nccl_env import NcclEnv

Model = Callable[[Scope, NcclEnv, Baselines], Bound]


def _version(text: str) -> tuple[int, ...]:
    numbers = [whole_number(part, 0) for part in text.split("+")[0].split(".")[:3]]
    return tuple(number for number in numbers if number is not None)


def _inside(scope: Scope, env: NcclEnv, baselines: Baselines) -> tuple[Part | None, str]:
    """The tightest link inside the group's hosts that hold 2 or more of its ranks; (None, '') when none
    does, (None, why) when a host's links are not recorded."""
    parts = []
    for name, ranks in scope.ranks:
        if ranks < 2:
            continue
        part = intra(scope.hosts[name], env, baselines)
        if part is None:
            return None, f"no NVLink or PCIe link recorded for the GPUs of {name}"
        parts.append(part)
    return (min(parts, key=lambda part: part.gbps) if parts else None), ""


def _across(scope: Scope, env: NcclEnv, baselines: Baselines) -> tuple[Part | None, str]:
    if scope.nodes < 2:
        return None, ""
    parts = []
    for name, ranks in scope.ranks:
        part = network(scope.hosts[name], ranks, scope, baselines, env)
        if part is None:
            return None, f"no network with a known speed recorded on {name}"
        parts.append(part)
    return min(parts, key=lambda part: part.gbps), ""


def _tree_split(scope: Scope, across: Part) -> Part:
    if scope.nodes == 2:
        return across.scaled(1, " (2 hosts: each sends and receives S once)")
    return across.scaled(0.5, " / 2 (a double binary tree moves 2S per host)")


def _busbw(algorithm: str, parts: list[Part | None], scope: Scope, sources: tuple[str, ...]) -> Bound:
    """An algbw limit (the tightest part) as busbw, times the collective's factor."""
    present = [part for part in parts if part is not None]
    tightest = min(present, key=lambda part: part.gbps)
    factor = scope.busbw_factor
    return bound_from(algorithm, tightest.scaled(factor, f"; algbw x busbw factor {factor:.3g}"), sources)


def ring(scope: Scope, env: NcclEnv, baselines: Baselines, name: str = "RING") -> Bound:
    inside, why_inside = _inside(scope, env, baselines)
    across, why_across = _across(scope, env, baselines)
    if why_inside or why_across:
        return Bound(name, None, why_not=why_inside or why_across)
    present = [part for part in (inside, across) if part is not None]
    if not present:
        return Bound(name, None, why_not="a group of one rank moves nothing")
    return bound_from(name, min(present, key=lambda part: part.gbps))


def tree(scope: Scope, env: NcclEnv, baselines: Baselines) -> Bound:
    if scope.nodes < 2:
        return Bound("TREE", None, why_not="one host: NCCL's trees span hosts")
    inside, why_inside = _inside(scope, env, baselines)
    across, why_across = _across(scope, env, baselines)
    if why_inside or why_across or across is None:
        return Bound("TREE", None, why_not=why_inside or why_across)
    return _busbw("TREE", [inside, _tree_split(scope, across)], scope, (TREE_TWO_NODES, TREE_FACTOR))


def _nvls_wire(host: Host, ranks: int) -> tuple[Part | None, str]:
    generation = int(host.link.name[-1]) if host.link and host.link.name[-1:] in set("0123456789") else 0
    if generation < 4:
        return None, f"{host.name}: NVLink SHARP needs NVLink 4 or later ({host.gpu_model})"
    if not host.nvswitch:
        return None, f"{host.name}: NVLink SHARP needs NVSwitch ({host.nvswitch_basis})"
    if _version(host.nccl_version) and _version(host.nccl_version) < (2, 17):
        return None, f"{host.name}: NCCL {host.nccl_version} predates NVLS (2.17)"
    wire = nvlink(host, NVLS_WIRE)
    if wire is None:
        return None, f"{host.name}: NVLink links not recorded"
    share = f" x {ranks}/{ranks + 1} (each GPU moves (n+1)/n of the buffer)"
    return wire.scaled(ranks / (ranks + 1), share), ""


def nvls(scope: Scope, env: NcclEnv, baselines: Baselines, name: str = "NVLS") -> Bound:
    if (scope.nodes == 1) != (name == "NVLS"):
        return Bound(name, None, why_not="one host: NCCL uses NVLS there" if name == "NVLS_TREE" else
                     "several hosts: NCCL uses NVLS_TREE there")
    if scope.per_node < 2:
        return Bound(name, None, why_not="one rank per host: nothing for the switch to reduce")
    wires = []
    for host, ranks in scope.ranks:
        wire, why = _nvls_wire(scope.hosts[host], ranks)
        if wire is None:
            return Bound(name, None, why_not=why)
        wires.append(wire)
    parts: list[Part | None] = [min(wires, key=lambda part: part.gbps)]
    if name == "NVLS_TREE":
        across, why = _across(scope, env, baselines)
        if across is None:
            return Bound(name, None, why_not=why)
        parts.append(_tree_split(scope, across))
    return _busbw(name, parts, scope, (NVLS_FACTOR,) + ((TREE_FACTOR,) if name == "NVLS_TREE" else ()))


def nvls_tree(scope: Scope, env: NcclEnv, baselines: Baselines) -> Bound:
    return nvls(scope, env, baselines, "NVLS_TREE")


def collnet(scope: Scope, env: NcclEnv, baselines: Baselines, name: str = "COLLNET_DIRECT") -> Bound:
    needs = "IB SHARP switches and NCCL's SHARP plugin, with NCCL_COLLNET_ENABLE=1"
    if scope.nodes < 2 or not all(scope.hosts[host].ports for host, _ in scope.ranks):
        return Bound(name, None, why_not="needs InfiniBand ports on several hosts", needs=needs)
    inside, why_inside = _inside(scope, env, baselines)
    across, why_across = _across(scope, env, baselines)
    if why_inside or why_across or across is None:
        return Bound(name, None, why_not=why_inside or why_across, needs=needs)
    ranks = scope.per_node
    if inside is not None and ranks >= 2:  # inside: a reduce-scatter and an all-gather, 2(g-1)/g S per GPU
        inside = inside.scaled(ranks / (2 * (ranks - 1)),
                               f" x {ranks}/{2 * (ranks - 1)} (2(g-1)/g S per GPU)")
    bound = _busbw(name, [inside, across.scaled(1, " (the switch reduces: S per host)")], scope, ())
    return replace(bound, needs=needs)


def collnet_chain(scope: Scope, env: NcclEnv, baselines: Baselines) -> Bound:
    return collnet(scope, env, baselines, "COLLNET_CHAIN")


def pat(scope: Scope, env: NcclEnv, baselines: Baselines) -> Bound:
    if scope.nodes < 2 or any(ranks != 1 for _, ranks in scope.ranks):
        return Bound("PAT", None, why_not="PAT runs with one rank per host, on several hosts")
    versions = [_version(host.nccl_version) for host in scope.hosts.values() if _version(host.nccl_version)]
    if versions and min(versions) < (2, 23):
        return Bound("PAT", None, why_not="NCCL before 2.23 has no PAT")
    return ring(scope, env, baselines, "PAT")


def send_receive(scope: Scope, env: NcclEnv, baselines: Baselines) -> Bound:
    inside, why = _inside(scope, env, baselines)
    if why:
        return Bound("P2P", None, why_not=why)
    parts = [inside] if inside is not None else []
    for host, _ in scope.ranks if scope.nodes > 1 else ():
        nic = (one_nic(scope.hosts[host], env, baselines)
               or network(scope.hosts[host], 1, scope, baselines, env))
        if nic is None:
            return Bound("P2P", None, why_not=f"no network with a known speed recorded on {host}")
        parts.append(nic)
    if not parts:
        return Bound("P2P", None, why_not="a group of one rank moves nothing")
    return bound_from("P2P", min(parts, key=lambda part: part.gbps))


def gloo(scope: Scope, env: NcclEnv, baselines: Baselines) -> Bound:
    """gloo's copies: one thread's memory copy rate / 2 per rank, shared when ranks outnumber CPUs."""
    parts = []
    for name, ranks in scope.ranks:
        host = scope.hosts[name]
        if not host.copy_gbps:
            return Bound("GLOO", None, why_not=f"no memory copy rate recorded on {name} (a run before "
                         "commbench measured it)")
        share = min(1.0, (host.usable_cpus or ranks) / ranks)
        cpus = f" x {host.usable_cpus}/{ranks} (CPUs per rank)" if share < 1 else ""
        parts.append(Part(host.copy_gbps / LOOPBACK_COPIES * share, "memory copy",
                          f"{host.copy_gbps:g} GB/s / {LOOPBACK_COPIES} copies per byte (into and out of a "
                          f"socket buffer){cpus}",
                          f"one thread's memory copy on {name}: {host.copy_gbps:g} GB/s (probed at start)",
                          host.copy_gbps, ()))
    across, why = _across(scope, env, baselines)
    if why:
        return Bound("GLOO", None, why_not=why)
    return bound_from("GLOO", min([*parts, *([across] if across else [])], key=lambda part: part.gbps))


NCCL_MODELS: dict[str, Model] = {"RING": ring, "TREE": tree, "NVLS": nvls, "NVLS_TREE": nvls_tree,
                                 "COLLNET_DIRECT": collnet, "COLLNET_CHAIN": collnet_chain, "PAT": pat}


def candidates(scope: Scope) -> list[str]:
    """The algorithms NCCL has for the series' collective."""
    if not scope.function:
        return ["P2P"]
    found = ["RING"] if scope.function in RING_FUNCTIONS else []
    if scope.function == "AllReduce":
        found += ["TREE", "NVLS", "NVLS_TREE", "COLLNET_DIRECT", "COLLNET_CHAIN"]
    if scope.function in ("AllGather", "ReduceScatter"):
        found += ["PAT"]
    return found


def _allowed(bound: Bound, scope: Scope, env: NcclEnv) -> Bound:
    """``bound`` as the environment leaves it: ruled out, or slowed by the protocols it allows."""
    if not bound.available or bound.algorithm in ("GLOO", "P2P"):
        return bound
    algorithms = env.algorithms(scope.function)
    if algorithms is not None and bound.algorithm not in algorithms:
        return replace(bound, gbps=None, why_not=f"NCCL_ALGO={env.variables['NCCL_ALGO']} rules it out")
    if env.nvls_disabled and bound.algorithm.startswith("NVLS"):
        return replace(bound, gbps=None, why_not="NCCL_NVLS_ENABLE=0")
    if bound.needs and not env.collnet_enabled:
        return replace(bound, gbps=None, why_not=f"needs {bound.needs}")
    protocols = env.protocols(scope.function)
    if protocols is not None and "SIMPLE" not in protocols:
        best = max(protocols, key=lambda name: PROTOCOL[name])
        return replace(bound, gbps=bound.gbps * PROTOCOL[best],  # type: ignore[operator]
                       formula=f"{bound.formula}; x {PROTOCOL[best]:.3g} (NCCL_PROTO: {best} at best)",
                       sources=bound.sources + (PROTOCOL_FORMATS,))
    return bound


def bound_of(algorithm: str, scope: Scope, env: NcclEnv, baselines: Baselines) -> Bound:
    """One algorithm's bound as the hardware and ``env``'s transports allow it, before NCCL_ALGO and the
    like: what an algorithm NCCL did run could reach."""
    if scope.missing:
        return Bound(algorithm, None, why_not=scope.missing)
    if algorithm == "GLOO":
        return gloo(scope, env, baselines)
    if algorithm == "P2P":
        return send_receive(scope, env, baselines)
    model = NCCL_MODELS.get(algorithm)
    return model(scope, env, baselines) if model else Bound(algorithm, None, why_not="no model for it")


def bounds(scope: Scope, env: NcclEnv, baselines: Baselines) -> tuple[Bound, ...]:
    """Every algorithm's bound for the scope under ``env`` (NcclEnv(): what the hardware allows)."""
    if scope.missing:
        return ()
    if scope.backend == "gloo":
        return (gloo(scope, env, baselines),)
    if scope.backend != "nccl":
        return ()
    return tuple(_allowed(bound_of(name, scope, env, baselines), scope, env) for name in candidates(scope))


def best(found: tuple[Bound, ...]) -> Bound | None:
    available = [bound for bound in found if bound.available]
    return max(available, key=lambda bound: bound.gbps or 0.0) if available else None


def with_protocol(bound: Bound, protocol: str) -> Bound:
    """The bound of an algorithm as it ran with ``protocol`` (LL moves half data, LL128 15/16)."""
    factor = PROTOCOL.get(protocol.upper(), 1.0)
    if factor == 1.0 or bound.gbps is None:
        return bound
    return replace(bound, gbps=bound.gbps * factor, formula=f"{bound.formula}; x {factor:.3g} ({protocol})",
                   sources=bound.sources + (PROTOCOL_FORMATS,))
