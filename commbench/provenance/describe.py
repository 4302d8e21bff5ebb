"""Hardware records as text: one line per host for the console header, and `commbench env`'s listing.

Invariants: pure functions of saved records (any commbench version's, any host's): a section that is
absent or missing shows as such, never as an error.
"""

from typing import Any

from commbench.core.untrusted import finite_number
from commbench.core.words import plural

GIB = 1024**3


def cpu_text(record: dict[str, Any]) -> str:
    cpu = record_part(record, "cpu")
    if not cpu:
        return "CPU unknown"
    return (f"{_text(cpu.get('model')) or 'CPU'} ({plural(_count(cpu.get('sockets')), 'socket')}, "
            f"{plural(_count(cpu.get('cores')), 'core')}, {_count(cpu.get('logical_cpus'))} CPUs)")


def memory_text(record: dict[str, Any]) -> str:
    total = finite_number(record_part(record, "memory").get("total_bytes"))
    return "memory unknown" if total is None else f"{total / GIB:.1f} GiB"


def gpu_text(record: dict[str, Any]) -> str:
    if not isinstance(record.get("gpus"), dict):
        return "GPUs unknown"
    devices = record_items(record_part(record, "gpus"), "devices")
    if not devices:
        return "no GPU"
    names = sorted({_text(device.get("name")) or "GPU" for device in devices})
    links = sorted({_count(device.get("nvlink_links")) for device in devices} - {0})
    nvlink = f", NVLink x{'/'.join(map(str, links))}" if links else ""
    return f"{len(devices)} x {'/'.join(names)}{nvlink}"


def network_text(record: dict[str, Any]) -> str:
    """Active InfiniBand/RoCE ports by rate, else the fastest physical interface that is up."""
    ports = [port for port in record_items(record, "infiniband") if port.get("state") == "ACTIVE"]
    if ports:
        rates = sorted({finite_number(port.get("rate_gbps")) or 0.0 for port in ports})
        layers = "/".join(sorted({_text(port.get("link_layer")) or "IB" for port in ports}))
        return f"{len(ports)} x {'/'.join(f'{rate:g}' for rate in rates)} Gb/s {layers}"
    interfaces = [item for item in record_items(record, "network")
                  if not item.get("virtual") and item.get("state") == "up"]
    if not interfaces:
        return "no network interface up" if "network" in record else "network unknown"
    fastest = max(interfaces, key=lambda i: finite_number(i.get("speed_mbps")) or 0.0)
    speed, name = finite_number(fastest.get("speed_mbps")), _text(fastest.get("name"), "?")
    return f"{name} {speed / 1000:g} Gb/s" if speed else f"{name} (speed unknown)"


def host_line(record: dict[str, Any]) -> str:
    parts = [cpu_text(record), memory_text(record), gpu_text(record), network_text(record)]
    missing = record_part(record, "missing")
    if missing:
        parts.append(f"not found: {', '.join(sorted(missing))}")
    return ", ".join(parts)


def hardware_summary(hardware: dict[str, dict[str, Any]]) -> str:
    """'hardware: HOST: CPU ..., 2 hosts alike: ...': one line for the console header."""
    by_line: dict[str, list[str]] = {}
    for host, record in hardware.items():
        by_line.setdefault(host_line(record), []).append(host)
    parts = [f"{hosts[0]}: {line}" if len(hosts) == 1 else f"{len(hosts)} hosts ({', '.join(hosts)}): {line}"
             for line, hosts in by_line.items()]
    return "hardware: " + ("; ".join(parts) if parts else "not recorded")


# A saved record's parts, read as untrusted: a part of another type than the writer gives reads as absent.
def record_part(record: Any, key: str) -> dict[str, Any]:
    """The mapping ``record[key]``; {} when absent or not a mapping."""
    value = record.get(key) if isinstance(record, dict) else None
    return value if isinstance(value, dict) else {}


def record_items(record: Any, key: str) -> list[dict[str, Any]]:
    """The mappings in the list ``record[key]``; [] when absent or not a list."""
    value = record.get(key) if isinstance(record, dict) else None
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _count(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def _section_lines(record: dict[str, Any]) -> list[str]:
    software = record.get("software") or {}
    os_info = record.get("os") or {}
    container = record.get("container") or {}
    lines = [f"cpu:        {cpu_text(record)}", f"memory:     {memory_text(record)}",
             f"numa:       {plural((record.get('numa') or {}).get('nodes', 0), 'node')}",
             f"gpus:       {gpu_text(record)} ({(record.get('gpus') or {}).get('source', 'not probed')})"]
    for interface in record.get("network") or []:
        speed = interface.get("speed_mbps")
        lines.append(f"interface:  {interface['name']} {interface.get('kind', '')} "
                     f"{interface.get('state', '')} "
                     f"{'speed unknown' if speed is None else f'{speed} Mb/s'}"
                     f"{' (virtual)' if interface.get('virtual') else ''}")
    for port in record.get("infiniband") or []:
        lines.append(f"rdma port:  {port['device']}/{port['port']} {port.get('rate', '')} "
                     f"{port.get('state', '')} "
                     f"{port.get('link_layer', '')}")
    lines += [f"kernel:     {os_info.get('kernel', 'unknown')} ({os_info.get('distribution', '')})",
              f"container:  {', '.join(container.get('hints') or []) or 'none seen'}",
              f"software:   python {software.get('python', '?')}, torch {software.get('torch', '?')}, "
              f"cuda {software.get('cuda') or '-'}, cudnn {software.get('cudnn') or '-'}, "
              f"nccl {software.get('nccl') or '-'}"]
    topology = (record.get("gpus") or {}).get("topology")
    if topology:
        lines += ["topology:", *(f"  {line}" for line in topology.splitlines())]
    return lines


def env_text(record: dict[str, Any]) -> str:
    """`commbench env`: the local host's record, a line per fact, and why anything is missing."""
    lines = [f"host:       {record.get('host', '?')} (probed in {record.get('probe_seconds', 0):g} s)",
             *_section_lines(record)]
    gpu_missing = (record.get("gpus") or {}).get("missing") or {}
    missing = {**record.get("missing", {}), **{f"gpus/{key}": why for key, why in gpu_missing.items()}}
    for name, why in missing.items():
        lines.append(f"missing:    {name}: {why}")
    return "\n".join(lines) + "\n"


def print_env(output_format: str = "text") -> None:
    """`commbench env`: probe this host and print its record."""
    import json

    from commbench.provenance.hardware import probe_host

    record = probe_host()
    print(json.dumps(record, indent=1) if output_format == "json" else env_text(record), end="\n" if
          output_format == "json" else "")
