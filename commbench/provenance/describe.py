"""Hardware records as text: one line per host for the console header, and `commbench env`'s listing.

Invariants: pure functions of saved records (any commbench version's, any host's): a section that is
absent or missing shows as such, never as an error.
"""

from typing import Any

from commbench.core.words import plural

GIB = 1024**3


def cpu_text(record: dict[str, Any]) -> str:
    cpu = record.get("cpu")
    if not cpu:
        return "CPU unknown"
    return (f"{cpu.get('model') or 'CPU'} ({plural(cpu.get('sockets', 0), 'socket')}, "
            f"{plural(cpu.get('cores', 0), 'core')}, {cpu.get('logical_cpus', 0)} CPUs)")


def memory_text(record: dict[str, Any]) -> str:
    total = (record.get("memory") or {}).get("total_bytes")
    return "memory unknown" if total is None else f"{total / GIB:.1f} GiB"


def gpu_text(record: dict[str, Any]) -> str:
    gpus = record.get("gpus")
    if gpus is None:
        return "GPUs unknown"
    devices = gpus.get("devices") or []
    if not devices:
        return "no GPU"
    names = sorted({device.get("name") or "GPU" for device in devices})
    links = sorted({device.get("nvlink_links") for device in devices if device.get("nvlink_links")})
    nvlink = f", NVLink x{'/'.join(map(str, links))}" if links else ""
    return f"{len(devices)} x {'/'.join(names)}{nvlink}"


def network_text(record: dict[str, Any]) -> str:
    """Active InfiniBand/RoCE ports by rate, else the fastest physical interface that is up."""
    ports = [port for port in record.get("infiniband") or [] if port.get("state") == "ACTIVE"]
    if ports:
        rates = sorted({port.get("rate_gbps") or 0 for port in ports})
        layers = "/".join(sorted({port.get("link_layer") or "IB" for port in ports}))
        return f"{len(ports)} x {'/'.join(f'{rate:g}' for rate in rates)} Gb/s {layers}"
    interfaces = [i for i in record.get("network") or [] if not i.get("virtual") and i.get("state") == "up"]
    if not interfaces:
        return "no network interface up" if "network" in record else "network unknown"
    fastest = max(interfaces, key=lambda i: i.get("speed_mbps") or 0)
    speed = fastest.get("speed_mbps")
    return f"{fastest['name']} {speed / 1000:g} Gb/s" if speed else f"{fastest['name']} (speed unknown)"


def host_line(record: dict[str, Any]) -> str:
    parts = [cpu_text(record), memory_text(record), gpu_text(record), network_text(record)]
    missing = record.get("missing") or {}
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
