"""The hosts' own causes: NVLinks down, PCIe links below their maximum, GPUs and NICs on different NUMA
nodes, uneven ranks per host, more ranks than CPUs, CPUs already busy when the run started.

Invariants: as every rule (reason.py); a rule reads only the hosts the series' group ran on.
"""

from dataclasses import replace

from commbench.core.words import plural
from commbench.provenance.explain.algorithms import best
from commbench.provenance.explain.hosts import Host, Pcie
from commbench.provenance.explain.reason import Context, Reason, changed, cost, used_hosts

NUMA_SPLIT_LOSS = 0.5  # GPUs and NICs on different NUMA nodes: busbw about half (NUMA_SOURCE)
NUMA_SOURCE = "https://github.com/NVIDIA/nccl-tests/issues/347"
SHARED_LOAD = 0.5  # runnable tasks beyond the run's own ranks from which the CPUs count as shared


def nvlinks_inactive(ctx: Context) -> Reason | None:
    evidence = {f"{host.name} GPU {gpu.index}": f"{gpu.links} of {host.model_links} NVLinks active"
                for host in used_hosts(ctx) for gpu in host.gpus
                if gpu.links is not None and host.model_links and gpu.links < host.model_links}
    if not evidence:
        return None
    full = {host.name: replace(host, gpus=tuple(replace(gpu, links=host.model_links) for gpu in host.gpus))
            for host in used_hosts(ctx)}
    loss = cost(changed(ctx, full), best(ctx.allowed))
    if loss == 0.0:  # the links down bound nothing here (a NIC does): no reason, as every rule
        return None
    where, what = next(iter(evidence.items()))
    return Reason("nvlinks-inactive", f"{where} has {what}", evidence, loss,
                  "model: the bound with every NVLink active")


def _below(now: Pcie | None, most: Pcie | None) -> bool:
    return now is not None and most is not None and (now.gen, now.width) < (most.gen, most.width)


def _as_probed(host: Host, evidence: dict[str, str]) -> Host:
    """The host with each GPU's and NIC's link at what it ran at when probed; what was slower, noted."""
    gpus = []
    for gpu in host.gpus:
        if _below(gpu.pcie_now, gpu.pcie):
            evidence[f"{host.name} GPU {gpu.index}"] = f"{gpu.pcie_now.text()} of {gpu.pcie.text()}"  # type: ignore
            gpu = replace(gpu, pcie=gpu.pcie_now)
        gpus.append(gpu)
    ports = []
    for port in host.ports:
        if _below(port.pcie_now, port.pcie):
            evidence[f"{host.name} {port.device}"] = f"{port.pcie_now.text()} of {port.pcie.text()}"  # type: ignore
            port = replace(port, pcie=port.pcie_now)
        ports.append(port)
    return replace(host, gpus=tuple(gpus), ports=tuple(ports))


def pcie_below_max(ctx: Context) -> Reason | None:
    """A GPU's or NIC's PCIe link ran below its maximum when probed, on a path the bound crosses. The
    probe runs before any traffic, and an idle GPU lowers its link: the text says to check under load."""
    evidence: dict[str, str] = {}
    probed = {host.name: _as_probed(host, evidence) for host in used_hosts(ctx)}
    loss = cost(best(ctx.allowed), changed(ctx, probed)) if evidence else None
    if not loss:
        return None
    where, link = next(iter(evidence.items()))
    return Reason("pcie-below-max", f"{where}'s PCIe link ran at {link} when probed (GPUs lower theirs when "
                  "idle: check under load)", evidence, loss, "model: the bound with the links as probed")


def numa_split(ctx: Context) -> Reason | None:
    """Across hosts: GPUs on a NUMA node with none of the NICs NCCL may use."""
    if ctx.scope.nodes < 2 or ctx.scope.device != "cuda":
        return None
    evidence = {}
    for host in used_hosts(ctx):
        nic_nodes = {port.numa_node for port in host.ports if port.numa_node is not None}
        far = [gpu for gpu in host.gpus if gpu.numa_node is not None and nic_nodes
               and gpu.numa_node not in nic_nodes]
        if far:
            evidence[host.name] = (f"GPUs {', '.join(str(gpu.index) for gpu in far)} on NUMA node "
                                   f"{'/'.join(sorted({str(gpu.numa_node) for gpu in far}))}, NICs on "
                                   f"{'/'.join(map(str, sorted(nic_nodes)))}")
    if not evidence:
        return None
    where, what = next(iter(evidence.items()))
    return Reason("numa-split", f"{where}: {what}", evidence, NUMA_SPLIT_LOSS,
                  f"published: NICs on the other NUMA node from their GPUs halved busbw ({NUMA_SOURCE})")


def uneven_ranks(ctx: Context) -> Reason | None:
    counts = {host: ranks for host, ranks in ctx.scope.ranks}
    if len(set(counts.values())) < 2:
        return None
    fewest, most = min(counts.values()), max(counts.values())
    return Reason("uneven-ranks", f"ranks per host differ ({fewest} to {most}): NCCL's rings and trees are "
                  "built for even hosts", {f"ranks on {host}": ranks for host, ranks in counts.items()},
                  1 - fewest / most, "rough: the share of the busiest host's ranks the emptiest lacks")


def oversubscribed(ctx: Context) -> Reason | None:
    hosts = [(ctx.scope.hosts[name], ranks) for name, ranks in ctx.scope.ranks]
    evidence = {host.name: f"{ranks} ranks on {host.usable_cpus} usable "
                           f"CPU{'s' if host.usable_cpus > 1 else ''}"
                for host, ranks in hosts if host.usable_cpus and ranks > host.usable_cpus}
    if not evidence:
        return None
    relieved = {name: replace(ctx.scope.hosts[name], usable_cpus=ranks) for name, ranks in ctx.scope.ranks}
    loss = cost(changed(ctx, relieved), best(ctx.allowed))
    where, what = next(iter(evidence.items()))
    return Reason("oversubscribed", f"{where}: {what}", evidence, loss or None,
                  "model: the bound with a CPU per rank" if loss else "not estimated: the bound does not "
                  "rest on the CPUs here, but each rank's progress thread does")


def cores_shared(ctx: Context) -> Reason | None:
    """The CPUs were busy beyond the run's own ranks when the run started (the 1-minute load average,
    which counts the ranks themselves as they start)."""
    evidence = {}
    for name, ranks in ctx.scope.ranks:
        host = ctx.scope.hosts[name]
        if host.load_1min is None or not host.usable_cpus:
            continue
        others = host.load_1min - min(ranks, host.usable_cpus)
        if others >= SHARED_LOAD and host.load_1min > host.usable_cpus:
            evidence[name] = (f"load average {host.load_1min:g} on {host.usable_cpus} usable CPUs with "
                              f"{plural(ranks, 'rank')} of this run")
    if not evidence:
        return None
    name, what = next(iter(evidence.items()))
    host = ctx.scope.hosts[name]
    share = host.usable_cpus / host.load_1min  # type: ignore[operator]
    return Reason("cores-shared", f"other work shares the CPUs ({name}: {what})", evidence, 1 - share,
                  "rough: the CPUs' share the load average leaves")
