"""The GPUs of a host: model, memory, PCIe link (maximum and current) and bus id, NUMA node, active
NVLinks, and the topology matrix.

Sources, first that answers: NVML through pynvml (the nvidia-ml-py package) when it imports; nvidia-smi
when it is on PATH; the NVIDIA driver's /proc/driver/nvidia/gpus (models only). With no NVIDIA driver
at all the host has no GPUs: ``devices`` is empty, nothing is missing.

Invariants: as every probe (probing.py); NVML runs in a daemon thread joined with the tool timeout, since
a library call cannot be killed; why a richer source was not used is kept under ``missing`` in the
section. The NVLink generation is not read here (NVML's version numbers differ across drivers): peaks.py
takes it from the model (configs/baselines.yaml).
"""

import re
import threading
from typing import Any

from commbench.provenance.pci import device_link, normal_bus_id
from commbench.provenance.probing import (
    TOOL_TIMEOUT_S,
    ProbeBudget,
    ProbeMissing,
    Roots,
    read_optional,
    run_tool,
)

MIB = 1024 * 1024
QUERY = ("index,name,memory.total,pcie.link.gen.max,pcie.link.width.max,driver_version,pci.bus_id,"
         "pcie.link.gen.current,pcie.link.width.current")
_GPU_HEADER = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: [^)]*\)\s*$")
_LINK = re.compile(r"^\s*Link (?P<link>\d+): (?P<rate>[\d.]+) GB/s\s*$")


def _integer(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse_query(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits` lines -> devices."""
    devices = []
    for line in filter(str.strip, text.splitlines()):
        fields = [part.strip() for part in line.split(",")]
        if len(fields) < 6 or not fields[0].isdigit():
            continue
        memory = _integer(fields[2])
        extra = [*fields[6:9], "", "", ""]  # bus id and current link: absent from older captures
        devices.append({"index": int(fields[0]), "name": fields[1],
                        "memory_bytes": None if memory is None else memory * MIB,
                        "pcie_gen": _integer(fields[3]), "pcie_width": _integer(fields[4]),
                        "driver": fields[5], "pci_bus_id": normal_bus_id(extra[0]),
                        "pcie_gen_current": _integer(extra[1]), "pcie_width_current": _integer(extra[2])})
    return devices


def parse_nvlink_status(text: str) -> dict[int, list[float]]:
    """`nvidia-smi nvlink --status` -> GPU index: the GB/s of each active link (inactive links left out)."""
    links: dict[int, list[float]] = {}
    current: int | None = None
    for line in text.splitlines():
        header = _GPU_HEADER.match(line)
        if header:
            current = int(header["index"])
            links[current] = []
            continue
        link = _LINK.match(line)
        if link and current is not None:
            links[current].append(float(link["rate"]))
    return links


def topology_matrix(text: str) -> str:
    """`nvidia-smi topo -m` without its legend."""
    kept = []
    for line in text.splitlines():
        if line.strip().startswith("Legend"):
            break
        kept.append(line.rstrip())
    return "\n".join(kept).strip("\n")


def _from_nvidia_smi(budget: ProbeBudget) -> dict[str, Any]:
    devices = parse_query(run_tool(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                                   budget))
    missing: dict[str, str] = {}
    try:
        links = parse_nvlink_status(run_tool(["nvidia-smi", "nvlink", "--status"], budget))
        for device in devices:
            rates = links.get(device["index"], [])
            device["nvlink_links"] = len(rates)
            device["nvlink_link_gbps"] = max(rates) if rates else None
    except ProbeMissing as exc:
        missing["nvlink"] = str(exc)
    section: dict[str, Any] = {"source": "nvidia-smi", "devices": devices}
    try:
        section["topology"] = topology_matrix(run_tool(["nvidia-smi", "topo", "-m"], budget))
    except ProbeMissing as exc:
        missing["topology"] = str(exc)
    section["missing"] = missing
    return section


def _nvml_devices(nvml: Any) -> dict[str, Any]:
    nvml.nvmlInit()
    try:
        driver = nvml.nvmlSystemGetDriverVersion()
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            active = 0
            for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                try:
                    active += bool(nvml.nvmlDeviceGetNvLinkState(handle, link))
                except nvml.NVMLError:
                    break  # past the device's links, or no NVLink at all
            bus_id = nvml.nvmlDeviceGetPciInfo(handle).busId
            devices.append({"index": index, "name": str(nvml.nvmlDeviceGetName(handle)),
                            "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                            "pcie_gen": int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
                            "pcie_width": int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
                            "pcie_gen_current": int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
                            "pcie_width_current": int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
                            "pci_bus_id": normal_bus_id(bus_id.decode() if isinstance(bus_id, bytes)
                                                        else str(bus_id)),
                            "driver": str(driver), "nvlink_links": active})
        return {"source": "nvml", "devices": devices}
    finally:
        nvml.nvmlShutdown()


def _from_nvml(budget: ProbeBudget) -> dict[str, Any]:
    try:
        import pynvml
    except ImportError:
        raise ProbeMissing("pynvml (package nvidia-ml-py) is not installed") from None
    answer: dict[str, Any] = {}

    def ask() -> None:
        try:
            answer["section"] = _nvml_devices(pynvml)
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            answer["error"] = f"NVML: {type(exc).__name__}: {exc}"

    thread = threading.Thread(target=ask, name="commbench-nvml", daemon=True)
    thread.start()
    limit = max(0.0, min(TOOL_TIMEOUT_S, budget.left()))
    thread.join(limit)
    if thread.is_alive():
        raise ProbeMissing(f"NVML did not answer within {limit:.3g} s")
    if "error" in answer:
        raise ProbeMissing(answer["error"])
    return answer["section"]


def _from_driver(roots: Roots) -> list[dict[str, Any]]:
    """The driver's own list: /proc/driver/nvidia/gpus/<bus id>/information ('Model: ...')."""
    devices = []
    base = roots.proc / "driver" / "nvidia" / "gpus"
    for index, path in enumerate(sorted(base.iterdir(), key=lambda entry: entry.name)):
        info = read_optional(path / "information") or ""
        model = next((line.partition(":")[2].strip() for line in info.splitlines()
                      if line.startswith("Model")), "")
        devices.append({"index": index, "name": model, "bus_id": path.name})
    return devices


def _with_links(section: dict[str, Any], roots: Roots, budget: ProbeBudget) -> dict[str, Any]:
    """Each device's NUMA node and PCIe link from sysfs (a tool's own current link, where it gave one,
    is kept), and the topology matrix where NVML gave none (it says whether NVSwitch joins the GPUs)."""
    for device in section["devices"]:
        link = device_link(roots, device.get("pci_bus_id"))
        device.setdefault("numa_node", link.get("numa_node"))
        for field in ("pcie_gen", "pcie_width", "pcie_gen_current", "pcie_width_current"):
            if device.get(field) is None:
                device[field] = link.get(field)
    if "topology" not in section and "topology" not in section.get("missing", {}) and section["devices"]:
        try:
            section["topology"] = topology_matrix(run_tool(["nvidia-smi", "topo", "-m"], budget))
        except ProbeMissing as exc:
            section.setdefault("missing", {})["topology"] = str(exc)
    return section


def probe_gpus(roots: Roots, budget: ProbeBudget) -> dict[str, Any]:
    reasons: dict[str, str] = {}
    for source, probe in (("nvml", _from_nvml), ("nvidia-smi", _from_nvidia_smi)):
        try:
            section = _with_links(probe(budget), roots, budget)
            section["missing"] = {**reasons, **section.get("missing", {})}
            return section
        except ProbeMissing as exc:
            reasons[source] = str(exc)
    if not (roots.proc / "driver" / "nvidia" / "gpus").is_dir():
        return {"source": "no NVIDIA driver (/proc/driver/nvidia)", "devices": [], "missing": {}}
    return {"source": "/proc/driver/nvidia", "devices": _from_driver(roots), "missing": reasons}
