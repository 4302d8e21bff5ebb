"""The host probes: on this real machine, checked against what other sources say about it, and on
directory trees laid out as /proc and /sys are, for hardware this machine lacks (sockets, InfiniBand,
GPUs through a stand-in nvidia-smi printing real nvidia-smi output)."""

import json
import os
import platform
import socket
import sys
from pathlib import Path

import pytest

from commbench.cli import main
from commbench.provenance.describe import env_text, hardware_summary, host_line
from commbench.provenance.gpus import parse_nvlink_status, topology_matrix
from commbench.provenance.hardware import PROBES, probe_host
from commbench.provenance.probing import ProbeMissing, Roots
from tests.dist_helpers import commbench

SMI_DATA = Path(__file__).parent / "data" / "nvidia-smi"


@pytest.fixture(scope="module")
def here() -> dict:
    """This machine, without the GPU probe: it may start nvidia-smi, which only marked tests may."""
    return probe_host(probes=[(name, probe) for name, probe in PROBES if name != "gpus"])


def test_this_machine_cpus_match_what_python_counts(here):
    cpu = here["cpu"]
    assert cpu["logical_cpus"] == os.cpu_count()
    assert 1 <= cpu["sockets"] <= cpu["cores"] <= cpu["logical_cpus"]
    assert cpu["model"] and cpu["model"] in Path("/proc/cpuinfo").read_text()


def test_this_machine_memory_matches_the_page_count(here):
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert here["memory"]["total_bytes"] == pytest.approx(physical, rel=0.05)
    assert 0 < here["memory"]["available_bytes"] <= here["memory"]["total_bytes"]


def test_this_machine_interfaces_are_the_kernels(here):
    names = {interface["name"] for interface in here["network"]}
    assert names == {name for _, name in socket.if_nameindex()}
    loopback = next(interface for interface in here["network"] if interface["name"] == "lo")
    assert loopback["kind"] == "loopback" and loopback["virtual"] and loopback["speed_mbps"] is None


def test_this_machine_kernel_software_and_container(here):
    import torch

    assert here["os"]["kernel"] == platform.release()
    assert here["software"]["torch"] == torch.__version__
    assert here["software"]["python"] == platform.python_version()
    assert ("/.dockerenv" in here["container"]["hints"]) == Path("/.dockerenv").exists()
    assert here["numa"]["nodes"] >= 1
    assert here["missing"] == {}


@pytest.mark.processes  # where nvidia-smi is on PATH, the probe runs it
def test_this_machines_gpus_are_the_drivers():
    record = probe_host()
    if not Path("/proc/driver/nvidia").exists():
        assert record["gpus"]["devices"] == [] and "no NVIDIA driver" in record["gpus"]["source"]
        assert "no GPU" in host_line(record)
    else:
        driver = sorted(Path("/proc/driver/nvidia/gpus").iterdir())
        assert len(record["gpus"]["devices"]) == len(driver)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def tree(tmp_path: Path) -> Roots:
    """A two-socket host: 2 sockets x 2 cores x 2 threads, two NUMA nodes, a 25 Gb/s NIC, two RDMA
    ports (one active NDR, one down), an IPoIB interface, and an NVIDIA driver with one GPU."""
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    blocks = [f"processor\t: {cpu}\nmodel name\t: Example CPU 9000\nphysical id\t: {cpu // 4}\n"
              f"core id\t\t: {(cpu // 2) % 2}\n" for cpu in range(8)]
    _write(proc / "cpuinfo", "\n".join(blocks))
    _write(proc / "meminfo", "MemTotal:       16384 kB\nMemFree:  1 kB\nMemAvailable:    8192 kB\n")
    _write(proc / "sys" / "kernel" / "osrelease", "6.1.0-test")
    cpu_dir = sys_root / "devices" / "system" / "cpu"
    _write(cpu_dir / "online", "0-7")
    for cpu in range(8):
        _write(cpu_dir / f"cpu{cpu}" / "topology" / "physical_package_id", str(cpu // 4))
        _write(cpu_dir / f"cpu{cpu}" / "topology" / "core_id", str((cpu // 2) % 2))
    for node in (0, 1):
        node_dir = sys_root / "devices" / "system" / "node" / f"node{node}"
        _write(node_dir / "cpulist", f"{node * 4}-{node * 4 + 3}")
        _write(node_dir / "meminfo", f"Node {node} MemTotal:       8192 kB\n")
    for name, kind, speed in (("eth0", "1", "25000"), ("ib0", "32", "400000"), ("lo", "772", None)):
        net = sys_root / "class" / "net" / name
        _write(net / "type", kind)
        _write(net / "operstate", "up")
        if speed:
            _write(net / "speed", speed)
    for device, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "1: DOWN")):
        port = sys_root / "class" / "infiniband" / device / "ports" / "1"
        _write(port / "rate", "400 Gb/sec (4X NDR)")
        _write(port / "state", state)
        _write(port / "link_layer", "InfiniBand")
    _write(proc / "driver" / "nvidia" / "gpus" / "0000:18:00.0" / "information",
           "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   17\n")
    return Roots(proc=proc, sys=sys_root, root=tmp_path, environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})


@pytest.fixture
def no_gpu_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH without nvidia-smi (a directory a test may put a stand-in into), and no pynvml."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    return bin_dir


def test_a_two_socket_host_with_infiniband_from_its_tree(tree, no_gpu_tools):
    record = probe_host(tree)
    assert record["cpu"] == {"model": "Example CPU 9000", "sockets": 2, "cores": 4, "logical_cpus": 8,
                             "threads_per_core": 2.0}
    assert record["memory"] == {"total_bytes": 16384 * 1024, "available_bytes": 8192 * 1024}
    assert record["numa"]["nodes"] == 2 and record["numa"]["per_node"][1]["cpus"] == "4-7"
    by_name = {interface["name"]: interface for interface in record["network"]}
    assert by_name["eth0"]["speed_mbps"] == 25000 and by_name["ib0"]["kind"] == "infiniband"
    assert by_name["lo"]["speed_mbps"] is None and by_name["lo"]["virtual"]
    ports = {port["device"]: port for port in record["infiniband"]}
    assert ports["mlx5_0"]["state"] == "ACTIVE" and ports["mlx5_0"]["rate_gbps"] == 400.0
    assert ports["mlx5_1"]["state"] == "DOWN"
    assert record["os"]["kernel"] == "6.1.0-test"
    assert "KUBERNETES_SERVICE_HOST" in record["container"]["hints"]
    gpus = record["gpus"]  # no NVML, no nvidia-smi: the driver's own list, and why it is all there is
    assert gpus["source"] == "/proc/driver/nvidia" and gpus["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert "not installed" in gpus["missing"]["nvml"] and "not on PATH" in gpus["missing"]["nvidia-smi"]
    assert "1 x 400 Gb/s InfiniBand" in host_line(record)


def _stand_in(bin_dir: Path, body: str) -> None:
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!{sys.executable}\nimport sys, time\nfrom pathlib import Path\n"
                    f"DATA = Path({str(SMI_DATA)!r})\nargs = sys.argv[1:]\n{body}")
    tool.chmod(0o755)


@pytest.mark.processes
def test_gpus_through_nvidia_smi_output(tree, no_gpu_tools):
    _stand_in(no_gpu_tools,
              "if args[0].startswith('--query-gpu'): print((DATA / 'query-a100.csv').read_text())\n"
              "elif args[0] == 'nvlink': print((DATA / 'nvlink-status-a100.txt').read_text())\n"
              "elif args[0] == 'topo': print((DATA / 'topo-m-h100-nv6.txt').read_text())\n"
              "else: sys.exit(3)\n")
    gpus = probe_host(tree)["gpus"]
    assert gpus["source"] == "nvidia-smi" and len(gpus["devices"]) == 2
    first = gpus["devices"][0]
    assert first["name"] == "NVIDIA A100-SXM4-80GB" and first["memory_bytes"] == 81920 * 1024**2
    links = (first["pcie_gen"], first["pcie_width"], first["nvlink_links"], first["nvlink_link_gbps"])
    assert links == (4, 16, 12, 25.0)
    assert gpus["topology"].splitlines()[1].startswith("GPU0") and "Legend" not in gpus["topology"]
    assert "not installed" in gpus["missing"]["nvml"]


@pytest.mark.processes
def test_a_tool_that_hangs_is_stopped_and_named(tree, no_gpu_tools):
    _stand_in(no_gpu_tools, "time.sleep(60)\n")
    record = probe_host(tree, budget_s=1.0)
    assert "did not answer within" in record["gpus"]["missing"]["nvidia-smi"]
    assert record["gpus"]["source"] == "/proc/driver/nvidia"  # what could still be said


def test_nvlink_status_counts_only_active_links():
    text = (SMI_DATA / "nvlink-status-a100.txt").read_text()
    text = text.replace("Link 11: 25 GB/s", "Link 11: <inactive>", 1)
    assert {gpu: len(rates) for gpu, rates in parse_nvlink_status(text).items()} == {0: 11, 1: 12}
    assert topology_matrix("GPU0 X\n\nLegend:\n X = Self") == "GPU0 X"


def test_a_spent_budget_and_a_failing_probe_are_recorded_not_raised(tree):
    record = probe_host(tree, budget_s=0)
    assert set(record["missing"]) == {name for name, _ in PROBES}
    assert all("budget of 0 s" in why for why in record["missing"].values())

    def broken(roots, budget):
        raise ZeroDivisionError("a bug")

    def absent(roots, budget):
        raise ProbeMissing("tool x is not on PATH")

    record = probe_host(tree, probes=[("cpu", PROBES[0][1]), ("broken", broken), ("absent", absent)])
    assert record["cpu"]["logical_cpus"] == 8
    assert record["missing"] == {"broken": "probe failed: ZeroDivisionError: a bug",
                                 "absent": "tool x is not on PATH"}


def test_host_summaries_group_alike_hosts(here):
    other = {**here, "memory": {"total_bytes": 2 * 1024**3}}
    line = hardware_summary({"a": here, "b": here, "c": other})
    assert line.startswith("hardware: 2 hosts (a, b): ") and "c: " in line and "2.0 GiB" in line
    assert hardware_summary({}) == "hardware: not recorded"
    assert "lo loopback" in env_text(here)


@pytest.mark.processes  # the GPU probe may run nvidia-smi
def test_env_json_is_this_hosts_record(capsys):
    assert main(["env", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["cpu"]["logical_cpus"] == os.cpu_count() and record["host"] == socket.gethostname()
    assert "lo" in {interface["name"] for interface in record["network"]}


@pytest.mark.processes
def test_env_prints_cpu_memory_and_interfaces():
    result = commbench("env")
    assert result.returncode == 0, result.stderr
    model = next(line.partition(":")[2].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name"))
    assert f"cpu:        {model}" in result.stdout
    assert "memory:" in result.stdout and " GiB" in result.stdout
    assert "interface:  lo loopback" in result.stdout
