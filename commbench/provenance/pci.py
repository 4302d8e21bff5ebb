"""A PCI device's link and NUMA node, from sysfs (/sys/bus/pci/devices/<bus id>/): the generation and
width its link runs at now and at most, and the NUMA node it hangs off. GPUs (by the bus id NVML or
nvidia-smi gives) and InfiniBand/RoCE devices (/sys/class/infiniband/<device>/device) are read alike.

Invariants: as every probe (probing.py): a file that is absent or unreadable leaves its field None, never
an error; bus ids are written as sysfs writes them ('0000:18:00.0'; nvidia-smi's '00000000:18:00.0' has
an 8-digit domain). The current link is what the device ran at when probed: GPUs lower theirs when idle,
so a current link below the maximum is a hint to check under load, not proof (docs/explain.md).
"""

import re
from pathlib import Path
from typing import Any

from commbench.provenance.probing import Roots, read_optional

# The kernel's link speed text ('16.0 GT/s PCIe', older kernels '16 GT/s') -> the PCIe generation.
GENERATION_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_BUS_ID = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})"
                     r"\.(?P<function>[0-7])$")


def generation(speed: str | None) -> int | None:
    """'16.0 GT/s PCIe' -> 4; None for text that names no known rate ('Unknown', '')."""
    try:
        return GENERATION_OF_GTS.get(float((speed or "").split()[0]))
    except (IndexError, ValueError):
        return None


def normal_bus_id(text: str | None) -> str | None:
    """A bus id as sysfs names its directory: '00000000:18:00.0' or '18:00.0' -> '0000:18:00.0'."""
    found = _BUS_ID.match((text or "").strip())
    if found is None:
        return None
    domain = int(found["domain"] or "0", 16)
    return f"{domain:04x}:{found['bus']}:{found['device']}.{found['function']}".lower()


def _number(text: str | None) -> int | None:
    try:
        value = int((text or "").strip())
    except ValueError:
        return None
    return value if value >= 0 else None  # numa_node -1: the platform has no NUMA information


def pci_link(device_dir: Path) -> dict[str, Any]:
    """The link and NUMA node of the PCI device at ``device_dir`` (None where sysfs does not say); the
    maximum is ``pcie_gen`` and ``pcie_width``, as GPU records have always named it."""
    return {"numa_node": _number(read_optional(device_dir / "numa_node")),
            "pcie_gen_current": generation(read_optional(device_dir / "current_link_speed")),
            "pcie_width_current": _number(read_optional(device_dir / "current_link_width")),
            "pcie_gen": generation(read_optional(device_dir / "max_link_speed")),
            "pcie_width": _number(read_optional(device_dir / "max_link_width"))}


def device_link(roots: Roots, bus_id: str | None) -> dict[str, Any]:
    """``pci_link`` of the device with this bus id; {} when the id cannot be read."""
    normal = normal_bus_id(bus_id)
    if normal is None:
        return {}
    return {"pci_bus_id": normal, **pci_link(roots.sys / "bus" / "pci" / "devices" / normal)}


def rdma_device_link(roots: Roots, device: str) -> dict[str, Any]:
    """``pci_link`` of an InfiniBand/RoCE device (/sys/class/infiniband/<device>/device)."""
    path = roots.sys / "class" / "infiniband" / device / "device"
    try:
        bus_id = normal_bus_id(path.resolve().name) if path.is_symlink() else None
    except OSError:
        bus_id = None
    return {"pci_bus_id": bus_id, **pci_link(path)}
