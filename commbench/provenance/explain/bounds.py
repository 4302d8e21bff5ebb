"""The bound model: the busbw (nccl-tests' definition, GB/s, 1e9 bytes per second per direction) each
algorithm can reach on the hardware a series ran on, with its formula, its sources and the physical peak
behind it (docs/explain.md derives each formula).

A link's usable rate is its line rate times an efficiency NCCL's maintainers state: 370 of 450 GB/s on
NVLink, 24 of 25 GB/s per 200 Gb/s NIC; NVLink SHARP's (NVLS) from their figure of 480 busbw on 8 H100.
What each algorithm makes a link carry, per direction, for an all_reduce of S bytes on n ranks, g per host:
- ring (and PAT): 2(n-1)/n S per rank, which is what busbw counts: busbw <= a GPU's links; across hosts
  the rings cross each host once per NIC, so busbw <= the host's NICs together;
- tree: S per GPU on the chain inside a host; S per host across 2 hosts, 2S across more (double binary
  tree), spread over the host's NICs: algbw <= that;
- NVLS: (n+1)/n S per GPU (algbw = wire x n/(n+1), nccl-tests PR 239); NVLS_TREE: NVLS inside, tree across;
- CollNet: the switch reduces: S per host across hosts, 2(g-1)/g S per GPU inside;
- Send/Recv (all_to_all, gather, scatter): a rank's own traffic; across hosts one NIC's (nccl-tests 267);
- gloo on CPU: every byte a rank sends or receives is copied once by the kernel (socket buffers over
  loopback TCP), so busbw <= one thread's memory copy rate / 2, times the rank's share of the CPUs.

Invariants: pure; a bound the records cannot support has gbps None and ``why_not``; every figure names
the link that sets it, the formula with its numbers, and the sources of its constants.
"""

from dataclasses import asdict, dataclass
from typing import Any

from commbench.provenance.baselines import Baselines
from commbench.provenance.explain.hosts import Host, Pcie, Port, Scope
from commbench.provenance.explain.nccl_env import NcclEnv

ISSUE_212 = "https://github.com/NVIDIA/nccl-tests/issues/212"
NVLS_FACTOR = "https://github.com/NVIDIA/nccl-tests/pull/239"
TREE_TWO_NODES = "https://github.com/NVIDIA/nccl-tests/issues/237"
TREE_FACTOR = "https://github.com/NVIDIA/nccl-tests/issues/279"
ONE_NIC = "https://github.com/NVIDIA/nccl-tests/issues/267"
PROTOCOL_FORMATS = "https://github.com/meta-pytorch/torchcomms/pull/3018"


@dataclass(frozen=True)
class Efficiency:
    value: float
    what: str
    source: str


NCCL_P2P = Efficiency(370 / 450, "NCCL's protocols get 370 of NVLink 4's 450 GB/s", ISSUE_212)
NVLS_WIRE = Efficiency(275 * 9 / 8 / 450, "8 x H100 NVLS all_reduce peaks at algbw 275 GB/s: 309 of 450 GB/s "
                       "on each GPU's links at 9/8 of the buffer", ISSUE_212)
NET = Efficiency(24 / 25, "24 GB/s per 200 Gb/s NIC", "https://github.com/NVIDIA/nccl-tests/issues/119")
PCIE = Efficiency(NCCL_P2P.value, "assumed: NCCL's NVLink protocol overhead", ISSUE_212)
NO_GDR = Efficiency(16 / 24, "without GPUDirect RDMA 16 of 24 GB/s", "https://github.com/NVIDIA/nccl/issues/412")
PROTOCOL = {"SIMPLE": 1.0, "LL128": 120 / 128, "LL": 4 / 8}  # data bytes per byte moved (PROTOCOL_FORMATS)
LOOPBACK_COPIES = 2  # gloo on one host: the kernel copies each byte into a socket buffer and out of it
RING_FUNCTIONS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce")


@dataclass(frozen=True)
class Part:
    """One link's limit on a path (busbw or algbw, as the algorithm uses it)."""

    gbps: float
    limit: str
    formula: str
    peak: str
    peak_gbps: float
    sources: tuple[str, ...]

    def scaled(self, factor: float, formula: str) -> "Part":
        return Part(self.gbps * factor, self.limit, f"{self.formula}{formula}", self.peak, self.peak_gbps,
                    self.sources)


@dataclass(frozen=True)
class Bound:
    """The most busbw ``algorithm`` allows here, or why it is not available (gbps None)."""

    algorithm: str
    gbps: float | None
    limit: str = ""
    formula: str = ""
    peak: str = ""
    peak_gbps: float | None = None
    sources: tuple[str, ...] = ()
    why_not: str = ""
    needs: str = ""  # what the hardware record cannot show but the algorithm needs (IB SHARP)

    @property
    def available(self) -> bool:
        return self.gbps is not None

    def to_dict(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items() if value not in ("", (), None)} | {
            "gbps": None if self.gbps is None else round(self.gbps, 4)}


def bound_from(algorithm: str, part: Part, extra_sources: tuple[str, ...] = ()) -> Bound:
    return Bound(algorithm, part.gbps, part.limit, part.formula, part.peak, part.peak_gbps,
                 tuple(dict.fromkeys(part.sources + extra_sources)))


def nvlink(host: Host, efficiency: Efficiency) -> Part | None:
    """A GPU's NVLinks (the host's GPU with the fewest active), per direction."""
    links, link = host.fewest_links, host.link
    if not links or link is None or not link.per_link_gbps:
        return None
    line = links * link.per_link_gbps
    switch = ", NVSwitch" if host.nvswitch else ""
    return Part(line * efficiency.value, "NVLink",
                f"{links} links x {link.per_link_gbps:g} GB/s x {efficiency.value:.3f} ({efficiency.what})",
                f"{link.name}: {links} of {host.model_links} links active x {link.per_link_gbps:g} GB/s = "
                f"{line:g} GB/s per direction{switch} ({host.gpu_model})", line,
                (link.source, efficiency.source))


def pcie(link: Pcie | None, what: str, baselines: Baselines) -> Part | None:
    x16 = None if link is None else baselines.links.get(f"pcie{link.gen}_x16")
    if link is None or x16 is None:
        return None
    line = x16.gbps * link.width / 16
    return Part(line * PCIE.value, f"{what} PCIe",
                f"{link.text()} {line:g} GB/s x {PCIE.value:.3f} ({PCIE.what})",
                f"{what} {link.text()} = {line:g} GB/s per direction", line, (x16.source, PCIE.source))


def intra(host: Host, env: NcclEnv, baselines: Baselines) -> Part | None:
    """What one GPU can send to its peers on the host per direction: NVLink, else its PCIe link (P2P or,
    with P2P disabled, through host memory); with SHM disabled too, its NIC."""
    if env.p2p_disabled and env.shm_disabled:  # out through a NIC and back: its port or the GPU's slot
        parts = [part for part in (one_nic(host, env, baselines), pcie(host.slowest_pcie, "GPU", baselines))
                 if part is not None]
        return min(parts, key=lambda part: part.gbps) if parts else None
    if env.p2p_disabled:
        return pcie(host.slowest_pcie, "GPU to host memory (P2P disabled, SHM):", baselines)
    return nvlink(host, NCCL_P2P) or pcie(host.slowest_pcie, "GPU", baselines)


@dataclass(frozen=True)
class Nic:
    """A NIC's active ports that NCCL may use: its usable GB/s is their rate, or its PCIe slot's when
    that is slower (a dual-port 200 Gb/s card in a PCIe 4 slot gets one slot's worth)."""

    device: str
    ports: tuple[Port, ...]

    @property
    def line_gbps(self) -> float:
        return sum(port.rate_gbps for port in self.ports) / 8

    def rate(self, env: NcclEnv, baselines: Baselines) -> tuple[float, str]:
        """Usable GB/s and how they were reached."""
        rate = self.line_gbps * NET.value
        ports = "+".join(f"{port.rate_gbps:g}" for port in self.ports)
        text = f"{ports} Gb/s x {NET.value:.2f}"
        slot_link = self.ports[0].pcie
        slot = pcie(slot_link, "NIC", baselines)
        if slot_link is not None and slot is not None and slot.gbps < rate:
            rate, text = slot.gbps, f"{ports} Gb/s in a {slot_link.text()} slot: {slot.gbps:.3g} GB/s"
        if env.gdr_disabled:
            rate = rate * NO_GDR.value
            text = f"{text} x {NO_GDR.value:.2f} (NCCL_NET_GDR_LEVEL: {NO_GDR.what})"
        return rate, text


def usable_nics(host: Host, env: NcclEnv) -> list[Nic]:
    """The host's NICs with the active ports NCCL_IB_HCA leaves (all without it)."""
    chosen = env.hca
    by_device: dict[str, list[Port]] = {}
    for port in host.ports:
        if chosen is None or chosen.allows(port.device, port.port):
            by_device.setdefault(port.device, []).append(port)
    return [Nic(device, tuple(ports)) for device, ports in by_device.items()]


def network(host: Host, ranks: int, scope: Scope, baselines: Baselines, env: NcclEnv) -> Part | None:
    """The host's traffic to other hosts per direction, its ranks together: RDMA NICs (CUDA), capped by
    its GPUs' PCIe links (GPUDirect RDMA goes through them); else its fastest interface (sockets)."""
    sharing = scope.sharing.get(host.name, 1)
    nics = usable_nics(host, env) if scope.device == "cuda" and not env.ib_disabled else []
    if nics:
        rates = [nic.rate(env, baselines) for nic in nics]
        line = sum(nic.line_gbps for nic in nics)
        ports = [port for nic in nics for port in nic.ports]
        layers = "/".join(sorted({port.link_layer for port in ports}))
        sources = (NET.source, NO_GDR.source) if env.gdr_disabled else (NET.source,)
        part = Part(sum(rate for rate, _ in rates) / sharing, "NICs",
                    f"{len(nics)} NICs: " + ", ".join(sorted({text for _, text in rates}))
                    + (f", shared by {sharing} groups" if sharing > 1 else ""),
                    f"{len(ports)} x {ports[0].rate_gbps:g} Gb/s {layers} ports = {line:g} GB/s per "
                    f"direction on {host.name}", line, sources)
        gpu_link = pcie(host.slowest_pcie, "GPU", baselines)
        if gpu_link is not None and ranks * gpu_link.gbps < part.gbps:
            return gpu_link.scaled(ranks, f" x {ranks} GPUs (GPUDirect RDMA crosses each GPU's PCIe link)")
        return part
    if host.ethernet is None:
        return None
    name, gbits = host.ethernet
    return Part(gbits / 8 * NET.value / sharing, "network",
                f"{name} {gbits:g} Gb/s x {NET.value:.2f}" + (f" / {sharing} groups" if sharing > 1 else ""),
                f"{name} {gbits:g} Gb/s = {gbits / 8:g} GB/s per direction on {host.name}", gbits / 8,
                (NET.source,))


def one_nic(host: Host, env: NcclEnv, baselines: Baselines) -> Part | None:
    """One rank's traffic to other hosts when it cannot spread over NICs (Send/Recv): its best port."""
    nics = usable_nics(host, env) if not env.ib_disabled else []
    if not nics:
        return None
    nic = max(nics, key=lambda nic: nic.rate(env, baselines)[0])
    rate, text = nic.rate(env, baselines)
    return Part(rate, "one NIC", f"{nic.device}: {text} (Send/Recv uses one NIC per peer)",
                f"{nic.device} {nic.line_gbps * 8:g} Gb/s {nic.ports[0].link_layer} = {nic.line_gbps:g} GB/s "
                f"per direction", nic.line_gbps, (NET.source, ONE_NIC))
