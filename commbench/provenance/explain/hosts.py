"""Where a series ran, as the bound model reads it: the group's hosts and ranks on each, and each host's
links (GPUs and their NVLinks, NVSwitch, PCIe; RDMA ports; Ethernet; CPUs, their load and memory copy
rate) from its hardware record (provenance/hardware.py's format, any commbench version's).

Invariants: pure functions of saved data; what a record does not say stays None (never a default that
looks like a measurement); the group read is the first of the run's groups (sub-communicators of one
run have one shape), and ``sharing`` counts the groups whose traffic leaves each host.
"""

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from commbench.provenance.baselines import Baselines, Link
from commbench.provenance.explain.nccl_env import NcclEnv
from commbench.provenance.nccl_debug import NCCL_FUNCTIONS

_NV_CELL = re.compile(r"^NV(\d+)$")
SWITCHED_BOARD_GPUS = 8  # an HGX board: 8 GPUs of NVLink 4 or later meet in NVSwitches, never a mesh


@dataclass(frozen=True)
class Pcie:
    gen: int
    width: int

    def text(self) -> str:
        return f"PCIe {self.gen} x{self.width}"


def _pcie(gen: Any, width: Any) -> Pcie | None:
    """A link a record gives as generation and width (1..6, 1..32), else None."""
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (gen, width)):
        return None
    return Pcie(gen, width) if 1 <= gen <= 6 and 1 <= width <= 32 else None


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    links: int | None  # active NVLinks (None: not probed)
    pcie: Pcie | None  # the most the link can run at
    pcie_now: Pcie | None  # what it ran at when probed (GPUs lower it when idle)
    numa_node: int | None


@dataclass(frozen=True)
class Port:
    """An active InfiniBand or RoCE port, and its device's PCIe link and NUMA node."""

    device: str
    port: int | None
    rate_gbps: float  # Gb/s, as the port's rate file gives it
    link_layer: str
    pcie: Pcie | None
    pcie_now: Pcie | None
    numa_node: int | None

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}" if self.port is not None else self.device


@dataclass(frozen=True)
class Host:
    name: str
    gpus: tuple[Gpu, ...]
    link: Link | None  # the GPUs' NVLink generation (from the model)
    model_links: int | None  # NVLinks the model has
    nvswitch: bool | None
    nvswitch_basis: str
    ports: tuple[Port, ...]  # active RDMA ports
    ethernet: tuple[str, float] | None  # the fastest physical interface that is up: (name, Gb/s)
    usable_cpus: int | None
    load_1min: float | None
    copy_gbps: float | None  # one thread's memory copy rate
    nccl_version: str

    @property
    def gpu_model(self) -> str:
        return "/".join(sorted({gpu.name for gpu in self.gpus})) or "no GPU"

    @property
    def fewest_links(self) -> int | None:
        links = [gpu.links for gpu in self.gpus]
        return None if not links or any(count is None for count in links) else min(links)  # type: ignore

    @property
    def slowest_pcie(self) -> Pcie | None:
        found = [gpu.pcie for gpu in self.gpus]
        if not found or any(pcie is None for pcie in found):
            return None
        return min(found, key=lambda pcie: (pcie.gen, pcie.width))  # type: ignore[arg-type, return-value]


def _switched(gpus: tuple[Gpu, ...], link: Link | None, topology: str) -> tuple[bool | None, str]:
    """Whether NVSwitch joins the GPUs, and what says so. The topology matrix: through a switch a pair
    shows all of a GPU's links (NV18), in a direct mesh the links are shared out among the peers (NV6 x 3
    peers). Without one: an 8-GPU board of NVLink 4 or later (HGX) is switched; else unknown."""
    pairs = [int(found[1]) for line in topology.splitlines() if line.startswith("GPU")
             for cell in line.split()[1:] if (found := _NV_CELL.match(cell))]
    full = max((gpu.links for gpu in gpus if gpu.links), default=None)
    if pairs and full and len(gpus) >= 3:
        if max(pairs) >= full:
            return True, f"topology: GPU pairs NV{max(pairs)}, every link through the switch"
        if max(pairs) * (len(gpus) - 1) <= full:
            return False, f"topology: GPU pairs NV{max(pairs)}, a direct mesh"
    generation = int(link.name[-1]) if link and link.name[-1:] in set("0123456789") else 0
    if len(gpus) >= SWITCHED_BOARD_GPUS and generation >= 4 and full:
        return True, f"{len(gpus)} GPUs of {link.name} on one board (HGX boards switch them)"  # type: ignore
    return None, "not known: no topology matrix of 3 or more GPUs recorded"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _positive(value: Any) -> float | None:
    """A finite number above 0 (a file's rate or speed), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _section(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _gpus(record: Mapping[str, Any]) -> tuple[Gpu, ...]:
    devices = _dicts(_section(record, "gpus").get("devices"))
    return tuple(Gpu(_int(device.get("index")) or index, _text(device.get("name")) or "GPU",
                     _int(device.get("nvlink_links")),
                     _pcie(device.get("pcie_gen"), device.get("pcie_width")),
                     _pcie(device.get("pcie_gen_current"), device.get("pcie_width_current")),
                     _int(device.get("numa_node"))) for index, device in enumerate(devices))


def _ports(record: Mapping[str, Any]) -> tuple[Port, ...]:
    return tuple(Port(_text(port.get("device")), _int(port.get("port")), rate,
                      _text(port.get("link_layer")) or "InfiniBand",
                      _pcie(port.get("pcie_gen"), port.get("pcie_width")),
                      _pcie(port.get("pcie_gen_current"), port.get("pcie_width_current")),
                      _int(port.get("numa_node")))
                 for port in _dicts(record.get("infiniband"))
                 if port.get("state") == "ACTIVE" and (rate := _positive(port.get("rate_gbps"))))


def _ethernet(record: Mapping[str, Any]) -> tuple[str, float] | None:
    """The fastest physical interface that is up: (name, Gb/s)."""
    up = [(_text(interface.get("name")), speed / 1000) for interface in _dicts(record.get("network"))
          if not interface.get("virtual") and interface.get("state") == "up"
          and (speed := _positive(interface.get("speed_mbps")))]
    return max(up, key=lambda interface: interface[1], default=None)


def _usable_cpus(record: Mapping[str, Any]) -> int | None:
    """The CPUs a rank may run on: its affinity (else the online CPUs), capped by a container's quota."""
    usable = (_int(_section(record, "load").get("usable_cpus"))
              or _int(_section(record, "cpu").get("logical_cpus")))
    limit = _positive(_section(record, "container").get("cpu_limit"))
    if usable and limit and limit >= 1:
        return min(usable, int(limit))
    return usable or None


def host_of(name: str, record: Mapping[str, Any], baselines: Baselines) -> Host:
    """A host's links from its record, any commbench version's, read as untrusted data: a field of the
    wrong type is as good as absent."""
    record = record if isinstance(record, Mapping) else {}
    gpus = _gpus(record)
    model = gpus[0].name if gpus else ""
    link = baselines.link_of_model(model) if gpus else None
    switched, basis = _switched(gpus, link, _text(_section(record, "gpus").get("topology")))
    load = _section(record, "load")
    return Host(name=name, gpus=gpus, link=link,
                model_links=baselines.links_of_model(model) if gpus else None,
                nvswitch=switched, nvswitch_basis=basis, ports=_ports(record), ethernet=_ethernet(record),
                usable_cpus=_usable_cpus(record), load_1min=_positive(load.get("load_1min")),
                copy_gbps=_positive(_section(record, "memory_copy").get("gbps")),
                nccl_version=_text(_section(record, "software").get("nccl")))


@dataclass(frozen=True)
class Scope:
    """One series' setting: its collective, the group it ran in, the hosts of that group and their links,
    and what rank 0's NCCL variables allow."""

    collective: str
    function: str  # the NCCL function ('AllReduce'); '' for Send/Recv-based collectives
    busbw_factor: float
    device: str
    backend: str
    group_size: int
    ranks: tuple[tuple[str, int], ...]  # (host, ranks of the group on it), in rank order
    sharing: Mapping[str, int]  # host -> groups spanning hosts that have ranks on it
    hosts: Mapping[str, Host]
    env: NcclEnv
    missing: str = ""  # why the hardware cannot be read ('' when it can)

    @property
    def nodes(self) -> int:
        return len(self.ranks)

    @property
    def per_node(self) -> int:
        """The fewest ranks of the group on one host."""
        return min((count for _, count in self.ranks), default=0)

    def describe(self) -> str:
        counts = sorted({count for _, count in self.ranks})
        per = "/".join(map(str, counts))
        hosts = f"{self.nodes} host{'s' if self.nodes != 1 else ''}"
        return (f"{self.group_size} ranks on {hosts} ({per} per host), {self.backend} on {self.device}"
                + (f", {self.hosts[self.ranks[0][0]].gpu_model}" if self.device == "cuda" and self.ranks
                   and self.ranks[0][0] in self.hosts else ""))


def _groups(meta: Mapping[str, Any], world: int) -> list[list[int]]:
    members = (meta.get("groups") or {}).get("members") if isinstance(meta.get("groups"), dict) else None
    found = [[rank for rank in group if _int(rank) is not None and rank >= 0]
             for group in (members if isinstance(members, list) else []) if isinstance(group, list)]
    return [group for group in found if group] or [list(range(world))]


def scope_of(meta: Mapping[str, Any], collective: str, busbw_factor: float, baselines: Baselines) -> Scope:
    """The series' setting from a run's meta (results.json's, read as untrusted data)."""
    names = meta.get("hostnames")
    hostnames = [str(name) for name in names] if isinstance(names, list) else []
    hardware = meta.get("hardware") if isinstance(meta.get("hardware"), dict) else {}
    world = _int(meta.get("world_size")) or len(hostnames)
    groups = _groups(meta, world)
    group = groups[0]
    missing = ""
    counts: Counter[str] = Counter()
    if not group:  # a world size below 1 (a damaged file): no rank to bound
        missing = "the run recorded no ranks"
    elif not hostnames or any(rank >= len(hostnames) for rank in group):
        missing = "the run recorded no host names"
    else:
        counts = Counter(hostnames[rank] for rank in group)
    spanning = [{hostnames[rank] for rank in ranks} for ranks in groups if hostnames
                and all(rank < len(hostnames) for rank in ranks)]
    sharing = {host: max(1, sum(host in hosts for hosts in spanning if len(hosts) > 1)) for host in counts}
    if not missing and not hardware:
        missing = "the run recorded no hardware (a run saved before commbench recorded it)"
    absent = [host for host in counts if host not in hardware]
    if not missing and absent:
        missing = f"no hardware record of {', '.join(sorted(absent))}"
    hosts = {host: host_of(host, hardware[host], baselines) for host in counts if host in hardware}
    env = meta.get("env") if isinstance(meta.get("env"), dict) else {}
    return Scope(collective=collective, function=NCCL_FUNCTIONS.get(collective, ""),
                 busbw_factor=busbw_factor,
                 device=str(meta.get("device") or ""), backend=str(meta.get("backend") or ""),
                 group_size=len(group), ranks=tuple(counts.items()), sharing=sharing, hosts=hosts,
                 env=NcclEnv.of(env), missing=missing)
