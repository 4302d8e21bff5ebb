"""What explain needs recorded about each host: the PCIe link (now and at most) and NUMA node of GPUs and
NICs from sysfs (real captures in tests/data/sysfs), the CPUs a process may use and their load, and one
thread's memory copy rate, measured on this machine."""

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commbench.provenance.cpu_probes import probe_load, probe_memory_copy
from commbench.provenance.gpus import _with_links, parse_query
from commbench.provenance.hardware import probe_infiniband
from commbench.provenance.pci import generation, normal_bus_id
from commbench.provenance.probing import ProbeBudget, ProbeMissing, Roots

SYSFS_DATA = Path(__file__).parent / "data" / "sysfs" / "pci"


@pytest.fixture
def roots(tmp_path: Path) -> Roots:
    """/sys with the two captured PCI devices, one on NUMA node 1, and an RDMA device whose 'device' link
    points at the slower of them; /proc with a real loadavg line."""
    devices = tmp_path / "sys" / "bus" / "pci" / "devices"
    for captured in SYSFS_DATA.iterdir():
        shutil.copytree(captured, devices / captured.name)
    (devices / "0000:01:00.0" / "numa_node").write_text("1\n")
    (devices / "0000:03:00.0" / "numa_node").write_text("-1\n")
    port = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "state").write_text("4: ACTIVE\n")
    (port / "link_layer").write_text("Ethernet\n")
    (port.parent.parent / "device").symlink_to(devices / "0000:01:00.0")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "loadavg").write_text("8.99 5.20 2.91 9/186 21400\n")
    return Roots(proc=tmp_path / "proc", sys=tmp_path / "sys", root=tmp_path, environ={})


def test_a_gpus_link_below_its_maximum_and_its_numa_node_come_from_sysfs(roots):
    query = ("0, NVIDIA H100 80GB HBM3, 81559, 5, 16, 550.54.15, 00000000:01:00.0, , \n"
             "1, NVIDIA H100 80GB HBM3, 81559, 5, 16, 550.54.15, 00000000:03:00.0, 5, 16\n")
    section = _with_links({"source": "nvidia-smi", "devices": parse_query(query), "topology": "GPU0 X"},
                          roots, ProbeBudget(5.0))
    slow, full = section["devices"]
    assert slow["pci_bus_id"] == "0000:01:00.0" and slow["numa_node"] == 1
    assert (slow["pcie_gen"], slow["pcie_width"], slow["pcie_gen_current"], slow["pcie_width_current"]) \
        == (5, 16, 4, 8)
    assert full["numa_node"] is None  # -1: the platform gives no NUMA information
    assert (full["pcie_gen_current"], full["pcie_width_current"]) == (5, 16)


def test_a_query_without_bus_ids_still_parses_as_before():
    device = parse_query("0, NVIDIA A100-SXM4-80GB, 81920, 4, 16, 535.104.05\n")[0]
    assert device["pcie_gen"] == 4 and device["pci_bus_id"] is None and device["pcie_gen_current"] is None


def test_a_nics_link_and_numa_node_follow_its_device_link(roots):
    port = probe_infiniband(roots)[0]
    assert port["link_layer"] == "Ethernet" and port["rate_gbps"] == 400.0
    assert (port["pci_bus_id"], port["numa_node"]) == ("0000:01:00.0", 1)
    assert (port["pcie_gen"], port["pcie_width"], port["pcie_gen_current"], port["pcie_width_current"]) \
        == (5, 16, 4, 8)


def test_load_names_the_usable_cpus_and_the_load_average(roots):
    load = probe_load(roots)
    assert load == {"usable_cpus": len(os.sched_getaffinity(0)), "load_1min": 8.99, "load_5min": 5.2}


def test_the_memory_copy_probe_measures_this_machine_and_respects_the_budget():
    copy = probe_memory_copy(ProbeBudget(5.0))
    # a copy of 64 MiB cannot take longer than the probe's whole budget, nor be faster than light
    assert 64 * 1024 * 1024 / 5.0 / 1e9 < copy["gbps"] < 10_000
    assert copy["bytes"] == 64 * 1024 * 1024 and copy["threads"] == 1
    with pytest.raises(ProbeMissing, match="budget"):
        probe_memory_copy(ProbeBudget(0.5))


@given(st.text(max_size=40))
def test_link_speed_and_bus_id_readers_never_raise(text):
    assert generation(text) in (None, 1, 2, 3, 4, 5, 6)
    normal = normal_bus_id(text)
    assert normal is None or normal_bus_id(normal) == normal


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_every_bus_id_form_reads_as_sysfs_names_it(domain, bus, device, function):
    expected = f"{domain:04x}:{bus:02x}:{device:02x}.{function}"
    assert normal_bus_id(f"{domain:08X}:{bus:02X}:{device:02X}.{function}") == expected
    if domain == 0:
        assert normal_bus_id(f"{bus:02x}:{device:02x}.{function}") == expected
