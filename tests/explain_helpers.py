"""Hardware records and rows for explain's tests, in the formats commbench writes (provenance/hardware.py's
host records, results.json's meta, Row): a host's short description expanded as its probes would record
it, and a measured row at a size."""

from typing import Any

from commbench.measure.collectives import REGISTRY
from commbench.results.model import Row


def topology(gpus: int, links: int) -> str:
    """`nvidia-smi topo -m`'s GPU rows as NVSwitch shows them: every pair NV<all links>."""
    header = "\t" + "\t".join(f"GPU{index}" for index in range(gpus))
    rows = ["\t".join([f"GPU{index}", *(" X " if peer == index else f"NV{links}" for peer in range(gpus))])
            for index in range(gpus)]
    return "\n".join([header, *rows])


def gpu_host(spec: dict[str, Any]) -> dict[str, Any]:
    """A GPU host's record from a short form: gpu, gpus, nvlinks, pcie [gen, width], nvswitch, and
    optionally nics, ports_per_nic, nic_gbps, link_layer, nic_pcie, numa nodes and current links."""
    gen, width = spec["pcie"]
    now_gen, now_width = spec.get("pcie_now", spec["pcie"])
    links = spec.get("nvlinks_of", {})  # GPU index -> its active links, where fewer than nvlinks
    devices = [{"index": index, "name": spec["gpu"], "nvlink_links": links.get(index, spec["nvlinks"]),
                "pcie_gen": gen, "pcie_width": width, "pcie_gen_current": now_gen,
                "pcie_width_current": now_width, "numa_node": spec.get("gpu_numa", 0)}
               for index in range(spec["gpus"])]
    gpus: dict[str, Any] = {"source": "nvidia-smi", "devices": devices, "missing": {}}
    if spec.get("nvswitch"):
        gpus["topology"] = topology(spec["gpus"], spec["nvlinks"])
    ports = []
    for nic in range(spec.get("nics", 0)):
        nic_gen, nic_width = spec["nic_pcie"]
        for port in range(1, spec.get("ports_per_nic", 1) + 1):
            ports.append({"device": f"mlx5_{nic}", "port": port, "rate": f"{spec['nic_gbps']} Gb/sec",
                          "rate_gbps": float(spec["nic_gbps"]), "state": "ACTIVE",
                          "link_layer": spec["link_layer"], "pcie_gen": nic_gen, "pcie_width": nic_width,
                          "pcie_gen_current": nic_gen, "pcie_width_current": nic_width,
                          "numa_node": spec.get("nic_numa", 0)})
    network = [{"name": "eth0", "kind": "ethernet", "state": "up", "speed_mbps": spec["eth_mbps"],
                "virtual": False}] if spec.get("eth_mbps") else []
    return {"gpus": gpus, "infiniband": ports, "network": network, "missing": {},
            "cpu": {"logical_cpus": 128}, "load": {"usable_cpus": 128, "load_1min": 1.0}}


def cpu_host(cpus: int = 2, load: float = 0.5, copy_gbps: float = 8.0) -> dict[str, Any]:
    return {"cpu": {"logical_cpus": cpus},
            "load": {"usable_cpus": cpus, "load_1min": load, "load_5min": load},
            "memory_copy": {"gbps": copy_gbps, "bytes": 64 << 20, "repeats": 5}, "network": [],
            "gpus": {"devices": []}, "infiniband": [], "missing": {}}


def run_meta(records: dict[str, dict[str, Any]], ranks: dict[str, int], backend: str = "nccl",
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """results.json's meta for ranks on hosts (hostnames in rank order), as a run writes it."""
    hostnames = [host for host, count in ranks.items() for _ in range(count)]
    return {"hostnames": hostnames, "hardware": records, "world_size": len(hostnames),
            "device": "cuda" if backend == "nccl" else "cpu", "backend": backend, "env": env or {}}


def row(collective: str, world: int, size: int, busbw: float, backend: str = "nccl", **extra: Any) -> Row:
    """A measured row whose busbw is ``busbw`` at ``size`` (its time follows from the factor)."""
    factor = REGISTRY[collective].busbw_factor(world)
    algbw = busbw / factor
    time_us = size / algbw / 1e3
    return Row(collective=collective, backend=backend, device="cuda" if backend == "nccl" else "cpu",
               world_size=world, dtype="float32", mode="sync", op="sum" if collective == "all_reduce" else "",
               size_bytes=size, requested_bytes=size, count_per_rank=size // 4, iters=20, warmup=5,
               time_us_p50=time_us, time_us_p95=time_us, time_us_min=time_us, time_us_max=time_us,
               time_us_mean=time_us, algbw_gbps=algbw, busbw_gbps=busbw, busbw_factor=factor, **extra)
