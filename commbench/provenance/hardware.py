"""Per-host hardware: CPU, memory, NUMA nodes, network interfaces and InfiniBand/RoCE ports from /proc
and /sys, GPUs (gpus.py), the CPUs usable and their load, one thread's memory copy rate (cpu_probes.py),
the kernel, container hints and the torch build (system.py), gathered into one dict by probe_host for
every result's metadata and `commbench env`.

Invariants: probe_host never raises and returns within its budget (probing.py); each section is present
when its probe answered, and otherwise named under ``missing`` with why. Absent hardware is an empty
section (no InfiniBand ports: ``infiniband: []``), not a missing one. Sizes are bytes, link speeds as
the kernel gives them (Mb/s for interfaces, Gb/s for InfiniBand ports).
"""

import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from commbench.provenance.cpu_probes import probe_load, probe_memory_copy
from commbench.provenance.gpus import probe_gpus
from commbench.provenance.pci import rdma_device_link
from commbench.provenance.probing import (
    PROBE_BUDGET_S,
    ProbeBudget,
    ProbeMissing,
    Roots,
    numbered,
    parse_cpu_list,
    read_optional,
    read_text,
)
from commbench.provenance.system import probe_container, probe_os, probe_software

INTERFACE_KINDS = {"1": "ethernet", "32": "infiniband", "772": "loopback"}  # /sys/class/net/*/type (ARPHRD)
_MODEL_KEYS = ("model name", "Model", "cpu model", "cpu", "Processor")  # x86, ARM, MIPS, POWER, old ARM


def _cpuinfo(roots: Roots) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per processor block."""
    blocks: list[dict[str, str]] = [{}]
    for line in read_text(roots.proc / "cpuinfo").splitlines():
        if not line.strip():
            blocks.append({})
            continue
        key, _, value = line.partition(":")
        blocks[-1].setdefault(key.strip(), value.strip())
    return [block for block in blocks if block]


def probe_cpu(roots: Roots) -> dict[str, Any]:
    """Model, sockets, physical cores and logical CPUs (online), from cpuinfo and cpu*/topology."""
    blocks = _cpuinfo(roots)
    model = next((block[key] for key in _MODEL_KEYS for block in blocks if block.get(key)), "")
    cpu_dir = roots.sys / "devices" / "system" / "cpu"
    online_text = read_optional(cpu_dir / "online")
    counted = sum("processor" in block for block in blocks)
    online = parse_cpu_list(online_text) if online_text else list(range(counted))
    places: set[tuple[str, str]] = set()
    for cpu in online:
        topology = cpu_dir / f"cpu{cpu}" / "topology"
        package, core = read_optional(topology / "physical_package_id"), read_optional(topology / "core_id")
        if package is None or core is None:
            places = set()
            break
        places.add((package, core))
    if not places:  # no topology in sysfs: cpuinfo's ids, where the kernel gives them
        places = {(b.get("physical id", "0"), b.get("core id", str(i))) for i, b in enumerate(blocks)}
    if not online:
        raise ProbeMissing("no CPUs found in cpuinfo or sysfs")
    return {"model": model, "sockets": len({package for package, _ in places}), "cores": len(places),
            "logical_cpus": len(online), "threads_per_core": round(len(online) / max(len(places), 1), 2)}


def _meminfo_bytes(text: str, key: str) -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip().endswith(key):  # 'MemTotal' or NUMA's 'Node 0 MemTotal'
            number, _, unit = value.strip().partition(" ")
            return int(number) * (1024 if unit.strip() == "kB" else 1)
    return None


def probe_memory(roots: Roots) -> dict[str, Any]:
    text = read_text(roots.proc / "meminfo")
    total = _meminfo_bytes(text, "MemTotal")
    if total is None:
        raise ProbeMissing(f"no MemTotal in {roots.proc / 'meminfo'}")
    return {"total_bytes": total, "available_bytes": _meminfo_bytes(text, "MemAvailable")}


def probe_numa(roots: Roots) -> dict[str, Any]:
    """NUMA nodes with their CPUs and memory; a kernel without NUMA shows one node."""
    nodes = []
    for number, path in numbered(roots.sys / "devices" / "system" / "node", "node"):
        cpus = read_optional(path / "cpulist")
        meminfo = read_optional(path / "meminfo")
        nodes.append({"node": number, "cpus": cpus or "",
                      "memory_bytes": _meminfo_bytes(meminfo, "MemTotal") if meminfo else None})
    return {"nodes": len(nodes) or 1, "per_node": nodes}


def _speed_mbps(path: Path) -> int | None:
    """/sys/class/net/X/speed: Mb/s, or None where the kernel has none (loopback, down, virtual: -1)."""
    text = read_optional(path / "speed")
    try:
        speed = int(text) if text is not None else -1
    except ValueError:
        return None
    return speed if speed > 0 else None


def probe_network(roots: Roots) -> list[dict[str, Any]]:
    net = roots.sys / "class" / "net"
    try:
        names = sorted(entry.name for entry in net.iterdir())
    except OSError as exc:
        raise ProbeMissing(f"cannot list {net}: {exc.strerror or exc}") from None
    interfaces = []
    for name in names:
        path = net / name
        kind = INTERFACE_KINDS.get(read_optional(path / "type") or "", "other")
        virtual = "/virtual/" in str(path.resolve()) or kind == "loopback"
        mtu = read_optional(path / "mtu")
        interfaces.append({"name": name, "kind": kind, "state": read_optional(path / "operstate") or "",
                           "speed_mbps": _speed_mbps(path),
                           "mtu": int(mtu) if mtu and mtu.isdigit() else None,
                           "virtual": virtual})
    return interfaces


def _rate_gbps(text: str) -> float | None:
    """'400 Gb/sec (4X NDR)' -> 400.0."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def probe_infiniband(roots: Roots) -> list[dict[str, Any]]:
    """InfiniBand and RoCE ports (/sys/class/infiniband/*/ports/*): rate, state and link layer, and their
    device's PCIe link and NUMA node (pci.py)."""
    devices = roots.sys / "class" / "infiniband"
    if not devices.exists():
        return []  # no RDMA devices: absent, not missing
    ports = []
    for device in sorted(devices.iterdir(), key=lambda path: path.name):
        link = rdma_device_link(roots, device.name)  # the NIC's PCIe link and NUMA node
        for number, port in numbered(device / "ports", ""):
            rate = read_optional(port / "rate") or ""
            state = read_optional(port / "state") or ""
            ports.append({"device": device.name, "port": number, "rate": rate, "rate_gbps": _rate_gbps(rate),
                          "state": state.partition(":")[2].strip() or state,
                          "link_layer": read_optional(port / "link_layer") or "", **link})
    return ports


# Each section of a host's record and the probe that fills it, in the order they run. The software probe
# goes last: outside a run it imports torch (seconds), which must not eat the GPU probe's budget.
Probe = Callable[[Roots, ProbeBudget], Any]
PROBES: list[tuple[str, Probe]] = [
    ("cpu", lambda roots, budget: probe_cpu(roots)),
    ("memory", lambda roots, budget: probe_memory(roots)),
    ("numa", lambda roots, budget: probe_numa(roots)),
    ("load", lambda roots, budget: probe_load(roots)),
    ("network", lambda roots, budget: probe_network(roots)),
    ("infiniband", lambda roots, budget: probe_infiniband(roots)),
    ("os", lambda roots, budget: probe_os(roots)),
    ("container", lambda roots, budget: probe_container(roots)),
    ("gpus", probe_gpus),
    ("memory_copy", lambda roots, budget: probe_memory_copy(budget)),
    ("software", lambda roots, budget: probe_software()),
]


def probe_host(roots: Roots | None = None, budget_s: float = PROBE_BUDGET_S,
               probes: list[tuple[str, Probe]] | None = None) -> dict[str, Any]:
    """This host's record: every section a probe answered, and ``missing``: section -> why not."""
    roots = roots or Roots()
    budget = ProbeBudget(budget_s)
    record: dict[str, Any] = {"host": socket.gethostname(),
                              "probed_at": datetime.now(UTC).isoformat(timespec="seconds")}
    missing: dict[str, str] = {}
    for name, probe in probes if probes is not None else PROBES:
        if budget.spent():
            missing[name] = f"not probed: the probe budget of {budget_s:g} s was spent"
            continue
        try:
            record[name] = probe(roots, budget)
        except ProbeMissing as exc:
            missing[name] = str(exc)
        except Exception as exc:  # a probe's own bug must not cost a run: record it instead
            missing[name] = f"probe failed: {type(exc).__name__}: {exc}"
    record["missing"] = missing
    record["probe_seconds"] = round(time.monotonic() - budget.started, 3)
    return record
