"""The peak of the link that bounds a run's rows, from the detected hardware (docs/provenance.md).

The rule: a collective whose every group stays on one host is bounded by the link inside the host; one
whose groups span hosts by the hosts' network.
- Inside a host, CUDA: each GPU's active NVLinks times its generation's per-link rate (the model gives
  the generation, configs/baselines.yaml); a GPU without NVLink: its PCIe link (generation and width).
  The slowest GPU of the hosts used decides. CPU: the nominal loopback figure.
- Across hosts: the host's network bandwidth shared by the groups that have ranks on it. CUDA: the sum
  of the active InfiniBand/RoCE ports (NCCL spreads channels over every NIC); without RDMA ports, and on
  CPU (gloo uses one interface), the fastest physical interface that is up. The slowest host decides.

Invariants: a pure function of saved records; None when the hardware does not say enough (a peak is
never guessed); every Peak names what it was computed from.
"""

from dataclasses import dataclass
from typing import Any

from commbench.provenance.baselines import Baselines


@dataclass(frozen=True)
class Peak:
    gbps: float
    source: str  # what the figure is: 'nvlink4 x18 (NVIDIA H100 80GB HBM3)', '8 x 400 Gb/s InfiniBand ...'


def _pcie_peak(device: dict[str, Any], baselines: Baselines) -> Peak | None:
    link = baselines.links.get(f"pcie{device.get('pcie_gen')}_x16")
    width = device.get("pcie_width")
    if link is None or not width:
        return None
    return Peak(link.gbps * width / 16, f"PCIe {device['pcie_gen']} x{width} ({device.get('name', 'GPU')})")


def gpu_peak(device: dict[str, Any], baselines: Baselines) -> Peak | None:
    """One GPU's bound inside its host: NVLink when it has active links, else PCIe."""
    name = device.get("name") or ""
    link = baselines.link_of_model(name)
    links = device.get("nvlink_links")
    if link is not None and links is None and link.per_link_gbps:  # the driver's list only: the model's
        full = baselines.links_of_model(name) or 0                    # own NVLink count
        return Peak(link.per_link_gbps * full, f"{link.name} x{full} (model {name}; links not probed)")
    if link is not None and links and link.per_link_gbps:
        return Peak(link.per_link_gbps * links, f"{link.name} x{links} ({name})")
    return _pcie_peak(device, baselines)


def _slowest(peaks: list[Peak | None]) -> Peak | None:
    if not peaks or any(peak is None for peak in peaks):
        return None  # one host the hardware does not describe: no bound can be claimed
    return min((peak for peak in peaks if peak is not None), key=lambda peak: peak.gbps)


def _host_gpu_peak(record: dict[str, Any], baselines: Baselines) -> Peak | None:
    devices = (record.get("gpus") or {}).get("devices") or []
    return _slowest([gpu_peak(device, baselines) for device in devices]) if devices else None


def _host_network_peak(host: str, record: dict[str, Any], device: str, sharing: int) -> Peak | None:
    ports = [port for port in record.get("infiniband") or []
             if port.get("state") == "ACTIVE" and port.get("rate_gbps")]
    share = f", shared by {sharing} groups" if sharing > 1 else ""
    if ports and device == "cuda":
        total = sum(port["rate_gbps"] for port in ports) / 8
        rates = "/".join(f"{rate:g}" for rate in sorted({port["rate_gbps"] for port in ports}))
        return Peak(total / sharing, f"{len(ports)} x {rates} Gb/s RDMA ports on {host}{share}")
    up = [i for i in record.get("network") or []
          if not i.get("virtual") and i.get("state") == "up" and i.get("speed_mbps")]
    if not up:
        return None
    fastest = max(up, key=lambda interface: interface["speed_mbps"])
    return Peak(fastest["speed_mbps"] / 8000 / sharing,
                f"{fastest['name']} {fastest['speed_mbps'] / 1000:g} Gb/s on {host}{share}")


def run_peak(hardware: dict[str, dict[str, Any]], hostnames: list[str], members: list[list[int]],
             device: str, baselines: Baselines) -> Peak | None:
    """The peak for a run whose groups are ``members`` (ranks), the ranks on ``hostnames``."""
    groups_hosts = [{hostnames[rank] for rank in ranks} for ranks in members] or [set(hostnames)]
    used = sorted(set().union(*groups_hosts))
    if any(host not in hardware for host in used):
        return None
    if all(len(hosts) == 1 for hosts in groups_hosts):  # every group inside one host
        if device != "cuda":
            loopback = baselines.links.get("loopback")
            return None if loopback is None else Peak(loopback.gbps,
                                                      "loopback (nominal, configs/baselines.yaml)")
        return _slowest([_host_gpu_peak(hardware[host], baselines) for host in used])
    sharing = {host: sum(host in hosts for hosts in groups_hosts if len(hosts) > 1) for host in used}
    return _slowest([_host_network_peak(host, hardware[host], device, max(sharing[host], 1))
                     for host in used])
