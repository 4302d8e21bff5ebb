"""Every reason rule of explain twice: on a run's records that hold its cause, where it must fire with the
evidence it read, and on records without it (or where the cause costs nothing), where it must not. The
records are commbench's formats (tests/explain_helpers.py); the engine reads them as a saved run's."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.provenance.baselines import load_baselines
from commbench.provenance.explain.engine import explain_run
from commbench.provenance.explain.nccl_env import ALGORITHMS, PROTOCOLS, HcaFilter, NcclEnv
from commbench.provenance.explain.text import console_line, row_sentence
from commbench.results.fit import fit_rows
from tests.explain_helpers import cpu_host, gpu_host, row, run_meta

GIB = 1024**3
BASELINES = load_baselines()
H100 = {"gpu": "NVIDIA H100 80GB HBM3", "gpus": 8, "nvlinks": 18, "pcie": [5, 16], "nvswitch": True}
A100 = {"gpu": "NVIDIA A100-SXM4-80GB", "gpus": 8, "nvlinks": 12, "pcie": [4, 16], "nvswitch": True}
NDR = {"nics": 8, "nic_gbps": 400, "link_layer": "InfiniBand", "nic_pcie": [5, 16]}


def reasons(meta: dict, rows: list, fits: list | None = None) -> dict:
    """Rule id -> the reason at the largest size of the first series."""
    [series, *_] = explain_run(meta, rows, fits)
    return {reason.rule: reason for reason in series.headline().reasons}


def one_host(spec: dict, env: dict | None = None, ranks: int = 8, **extra) -> tuple[dict, list]:
    meta = run_meta({"node0": gpu_host(spec)}, {"node0": ranks}, env=env)
    return meta, [row("all_reduce", ranks, GIB, 300.0, **extra)]


def two_hosts(spec: dict, env: dict | None = None, ranks: tuple[int, int] = (8, 8),
              collective: str = "all_reduce", **extra) -> tuple[dict, list]:
    meta = run_meta({"node0": gpu_host(spec), "node1": gpu_host(spec)},
                    {"node0": ranks[0], "node1": ranks[1]}, env=env)
    return meta, [row(collective, sum(ranks), GIB, 100.0, **extra)]


# --- rank 0's NCCL variables ---------------------------------------------------------------------------

def test_nccl_algo_that_rules_out_nvls_is_a_reason_and_costs_what_nvls_allows_over_a_ring():
    found = reasons(*one_host(H100, {"NCCL_ALGO": "Ring"}))["nccl-algo"]
    assert found.evidence["NCCL_ALGO"] == "Ring" and found.evidence["best_without"] == "NVLS"
    # NVLS on 8 H100s: 275 GB/s algbw x all_reduce's busbw factor 2(n-1)/n = 1.75; a ring 370
    assert found.loss == pytest.approx(1 - 370 / 481.25, abs=0.01)
    assert "nccl-algo" not in reasons(*one_host(H100))
    assert "nccl-algo" not in reasons(*one_host(A100, {"NCCL_ALGO": "Ring"}))  # no NVLS to lose on A100


def test_nccl_proto_without_simple_halves_the_bound_with_ll():
    found = reasons(*one_host(H100, {"NCCL_PROTO": "LL"}))["nccl-proto"]
    assert found.loss == pytest.approx(0.5)
    assert "nccl-proto" not in reasons(*one_host(H100, {"NCCL_PROTO": "Simple,LL128"}))


def test_nvls_disabled_on_nvswitch_hopper_is_a_reason_and_not_on_ampere():
    meta, rows = one_host(H100, {"NCCL_NVLS_ENABLE": "0"}, nccl_algo="RING", nccl_proto="SIMPLE")
    found = reasons(meta, rows)["nvls-disabled"]
    assert found.evidence["NCCL_NVLS_ENABLE"] == "0"
    assert found.loss == pytest.approx(1 - 370 / 481.25, abs=0.01)
    [series] = explain_run(meta, rows)
    assert row_sentence(series.headline()) == ("at 1 GiB: 300 GB/s, 62% of what NVLS allows here (481); "
                                               "NCCL used RING/SIMPLE (370): NCCL_NVLS_ENABLE=0 is set")
    assert "nvls-disabled" not in reasons(*one_host(A100, {"NCCL_NVLS_ENABLE": "0"}))
    assert "nvls-disabled" not in reasons(*one_host(H100))


def test_p2p_disabled_sends_gpu_traffic_through_host_memory():
    found = reasons(*one_host(A100, {"NCCL_P2P_DISABLE": "1"}))["p2p-disabled"]
    assert found.evidence["bound_with"] == pytest.approx(31.5 * 370 / 450, abs=0.1)  # PCIe 4 x16 at 82%
    assert "p2p-disabled" not in reasons(*one_host(A100))


def test_shm_disabled_matters_only_when_p2p_is_off_too():
    spec = {**A100, "nics": 1, "nic_gbps": 100, "link_layer": "InfiniBand", "nic_pcie": [4, 16]}
    both = reasons(*one_host(spec, {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}))
    assert both["shm-disabled"].evidence["bound_with"] == pytest.approx(12.0, abs=0.1)  # its 100 Gb/s NIC
    assert "shm-disabled" not in reasons(*one_host(spec, {"NCCL_SHM_DISABLE": "1"}))


def test_ib_disabled_falls_back_to_the_ethernet_interface():
    spec = {**A100, "nics": 8, "nic_gbps": 200, "link_layer": "InfiniBand", "nic_pcie": [4, 16],
            "eth_mbps": 100000}
    found = reasons(*two_hosts(spec, {"NCCL_IB_DISABLE": "1"}, nccl_algo="RING"))["ib-disabled"]
    # 100 Gb/s at 96% per host; on 2 hosts a tree sends each byte across once: busbw 12 x 2(n-1)/n
    assert found.evidence["bound_with"] == pytest.approx(12.0 * 2 * 15 / 16, abs=0.01)
    assert found.evidence["best_without"] == "TREE"
    assert "ib-disabled" not in reasons(*two_hosts(spec, nccl_algo="RING"))


def test_ib_hca_naming_one_of_eight_nics_is_a_reason_and_naming_all_is_not():
    spec = {**A100, "nics": 8, "nic_gbps": 200, "link_layer": "InfiniBand", "nic_pcie": [4, 16]}
    found = reasons(*two_hosts(spec, {"NCCL_IB_HCA": "=mlx5_0"}, nccl_algo="RING"))["ib-hca"]
    assert "names 1 of node0's 8 active ports" in found.text and found.loss == pytest.approx(7 / 8, abs=0.01)
    assert "ib-hca" not in reasons(*two_hosts(spec, {"NCCL_IB_HCA": "mlx5"}, nccl_algo="RING"))


def test_gdr_level_loc_turns_gpudirect_rdma_off_and_sys_does_not():
    spec = {**A100, "nics": 8, "nic_gbps": 200, "link_layer": "InfiniBand", "nic_pcie": [4, 16]}
    found = reasons(*two_hosts(spec, {"NCCL_NET_GDR_LEVEL": "LOC"}, nccl_algo="RING"))["gdr-disabled"]
    assert found.loss == pytest.approx(1 / 3, abs=0.01)
    assert "gdr-disabled" not in reasons(*two_hosts(spec, {"NCCL_NET_GDR_LEVEL": "SYS"}, nccl_algo="RING"))


def test_a_channel_limit_below_sixteen_is_a_reason():
    found = reasons(*one_host(H100, {"NCCL_MAX_NCHANNELS": "4"}))["channels"]
    assert found.loss == pytest.approx(0.75) and found.evidence == {"NCCL_MAX_NCHANNELS": 4}
    assert "channels" not in reasons(*one_host(H100, {"NCCL_MAX_NCHANNELS": "32"}))


def test_a_buffer_below_ncclss_default_is_named_without_a_price():
    found = reasons(*one_host(H100, {"NCCL_BUFFSIZE": "1048576"}))["buffsize"]
    assert found.loss is None
    assert "buffsize" not in reasons(*one_host(H100, {"NCCL_BUFFSIZE": "8388608"}))


# --- the hosts -----------------------------------------------------------------------------------------

def test_a_gpu_with_nvlinks_down_is_a_reason_when_its_links_bound_the_ring():
    found = reasons(*one_host({**A100, "nvlinks_of": {3: 10}}, nccl_algo="RING"))["nvlinks-inactive"]
    assert found.evidence == {"node0 GPU 3": "10 of 12 NVLinks active"}
    assert found.loss == pytest.approx(2 / 12, abs=0.01)
    assert "nvlinks-inactive" not in reasons(*one_host(A100, nccl_algo="RING"))


def test_nvlinks_down_where_a_nic_bounds_the_ring_cost_nothing_and_are_no_reason():
    # one 100 Gb/s NIC per host: 12 GB/s across (nccl-tests#119), far below 10 NVLinks' 206 GB/s
    spec = {**A100, "nvlinks_of": {3: 10}, "nics": 1, "nic_gbps": 100, "link_layer": "InfiniBand",
            "nic_pcie": [4, 16]}
    assert "nvlinks-inactive" not in reasons(*two_hosts(spec, nccl_algo="RING"))
    assert "nvlinks-inactive" in reasons(*one_host(spec, nccl_algo="RING"))  # in one host they bound it


def test_a_pcie_link_below_its_maximum_is_a_reason_where_traffic_crosses_it():
    nics = {"nics": 4, "nic_gbps": 400, "link_layer": "InfiniBand", "nic_pcie": [5, 16]}
    slow = {**H100, "gpus": 1, **nics, "pcie_now": [4, 8]}
    found = reasons(*two_hosts(slow, ranks=(1, 1), nccl_algo="RING"))["pcie-below-max"]
    assert found.evidence["node0 GPU 0"] == "PCIe 4 x8 of PCIe 5 x16" and found.loss > 0.5
    assert "pcie-below-max" not in reasons(*two_hosts({**H100, "gpus": 1, **nics}, ranks=(1, 1),
                                                      nccl_algo="RING"))
    # inside one host the ring runs on NVLink: an idle GPU's slow PCIe link costs nothing there
    assert "pcie-below-max" not in reasons(*one_host({**H100, "pcie_now": [1, 16]}, nccl_algo="RING"))


def test_gpus_on_another_numa_node_than_every_nic_are_a_reason_across_hosts():
    spec = {**H100, **NDR, "gpu_numa": 1, "nic_numa": 0}
    found = reasons(*two_hosts(spec, nccl_algo="RING"))["numa-split"]
    assert found.loss == 0.5 and "NUMA node 1" in found.text and "347" in found.basis
    assert "numa-split" not in reasons(*two_hosts({**spec, "gpu_numa": 0}, nccl_algo="RING"))


def test_uneven_ranks_per_host_are_a_reason():
    found = reasons(*two_hosts({**H100, **NDR}, ranks=(8, 4), nccl_algo="RING"))["uneven-ranks"]
    assert found.evidence == {"ranks on node0": 8, "ranks on node1": 4}
    assert "uneven-ranks" not in reasons(*two_hosts({**H100, **NDR}, nccl_algo="RING"))


def test_more_gloo_ranks_than_cpus_lower_the_bound_and_are_a_reason():
    meta = run_meta({"vm": cpu_host(cpus=2)}, {"vm": 4}, backend="gloo")
    found = reasons(meta, [row("all_reduce", 4, 64 << 20, 0.5, backend="gloo")])["oversubscribed"]
    assert found.text == "vm: 4 ranks on 2 usable CPUs" and found.loss == pytest.approx(0.5)
    meta = run_meta({"vm": cpu_host(cpus=2)}, {"vm": 2}, backend="gloo")
    assert "oversubscribed" not in reasons(meta, [row("all_reduce", 2, 64 << 20, 0.5, backend="gloo")])


def test_cpus_busy_with_other_work_are_a_reason():
    meta = run_meta({"vm": cpu_host(cpus=2, load=9.0)}, {"vm": 2}, backend="gloo")
    found = reasons(meta, [row("all_reduce", 2, 64 << 20, 0.5, backend="gloo")])["cores-shared"]
    assert "load average 9 on 2 usable CPUs" in found.text and found.loss == pytest.approx(1 - 2 / 9)
    meta = run_meta({"vm": cpu_host(cpus=2, load=1.5)}, {"vm": 2}, backend="gloo")
    assert "cores-shared" not in reasons(meta, [row("all_reduce", 2, 64 << 20, 0.5, backend="gloo")])


# --- the row -------------------------------------------------------------------------------------------

def test_a_straggler_past_the_skew_threshold_is_a_reason():
    meta, rows = one_host(H100, nccl_algo="NVLS")
    rows[0].skew_us_max, rows[0].slowest_rank = 0.4 * rows[0].time_us_p50, 5
    found = reasons(meta, rows)["straggler"]
    assert found.evidence["slowest_rank"] == 5 and found.evidence["host"] == "node0"
    assert found.loss == pytest.approx(0.4)
    rows[0].skew_us_max = 0.05 * rows[0].time_us_p50
    assert "straggler" not in reasons(meta, rows)


def test_a_size_below_the_bandwidth_regime_is_latency_bound_by_the_fit():
    meta = run_meta({"node0": gpu_host(H100)}, {"node0": 8})
    alpha_us, beta = 20.0, 250.0  # algbw β; t = α + s / β
    rows = [row("all_reduce", 8, size, size / (alpha_us + size / beta / 1e3) / 1e3 * 1.75, nccl_algo="NVLS")
            for size in (1 << 16, 1 << 20, 1 << 24, 1 << 28, GIB)]
    [series] = explain_run(meta, rows, fit_rows(rows))
    small = {reason.rule: reason for reason in series.rows[0].reasons}["small-size"]
    assert small.evidence["half_bandwidth_bytes"] == pytest.approx(alpha_us * beta * 1e3, rel=0.01)
    assert "small-size" not in {reason.rule for reason in series.rows[-1].reasons}


def test_nccl_choosing_less_than_the_best_allowed_is_a_reason():
    found = reasons(*one_host(H100, nccl_algo="RING", nccl_proto="LL"))["algorithm-choice"]
    assert found.evidence["bound_ran"] == pytest.approx(370 / 2, abs=0.1) and "RING/LL" in found.text
    assert "algorithm-choice" not in reasons(*one_host(H100, nccl_algo="NVLS", nccl_proto="SIMPLE"))


# --- ranking, the line, and what the records cannot say --------------------------------------------------

def test_reasons_are_ranked_by_their_estimated_cost_unpriced_last():
    env = {"NCCL_NVLS_ENABLE": "0", "NCCL_BUFFSIZE": "65536", "NCCL_MAX_NCHANNELS": "2"}
    meta, rows = one_host(H100, env, nccl_algo="RING")
    [series] = explain_run(meta, rows)
    found = series.headline().reasons
    assert [reason.rule for reason in found] == ["channels", "nvls-disabled", "buffsize"]


def test_a_run_without_hardware_is_explained_without_a_bound_and_says_why():
    meta = {"hostnames": ["a", "a"], "world_size": 2, "device": "cpu", "backend": "gloo", "env": {}}
    [series] = explain_run(meta, [row("all_reduce", 2, 1 << 20, 0.5, backend="gloo")])
    assert series.best is None and "recorded no hardware" in series.no_bound
    assert "no bound" in console_line(series)


def test_nvswitch_is_read_from_a_real_topology_matrix_of_a_direct_mesh():
    from pathlib import Path

    from commbench.provenance.baselines import load_baselines
    from commbench.provenance.explain.hosts import host_of

    matrix = (Path(__file__).parent / "data" / "nvidia-smi" / "topo-m-h100-nv6.txt").read_text()
    record = {"gpus": {"devices": [{"index": index, "name": "NVIDIA H100 80GB HBM3", "nvlink_links": 18}
                                   for index in range(4)], "topology": matrix}}
    host = host_of("h", record, load_baselines())
    assert host.nvswitch is False and "direct mesh" in host.nvswitch_basis


# --- the NCCL variables' reader ------------------------------------------------------------------------

def test_nccl_algo_and_proto_lists_exclusions_and_per_function_forms():
    env = NcclEnv({"NCCL_ALGO": "^NVLS,CollNet", "NCCL_PROTO": "allreduce:LL128;allgather:Simple"})
    assert env.algorithms("AllReduce") == frozenset(ALGORITHMS) - {"NVLS", "COLLNET_DIRECT", "COLLNET_CHAIN"}
    assert env.protocols("AllReduce") == {"LL128"} and env.protocols("AllGather") == {"SIMPLE"}
    assert env.protocols("Broadcast") is None
    assert HcaFilter("^=mlx5_1").allows("mlx5_0", 1) and not HcaFilter("^=mlx5_1").allows("mlx5_1", 1)
    assert HcaFilter("mlx5_0:1").allows("mlx5_0", 1) and not HcaFilter("mlx5_0:1").allows("mlx5_0", 2)


@given(st.dictionaries(st.sampled_from(["NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_HCA", "NCCL_MAX_NCHANNELS",
                                        "NCCL_BUFFSIZE", "NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL"]),
                       st.text(max_size=30)))
def test_reading_any_nccl_variables_never_raises_and_names_only_known_algorithms(variables):
    env = NcclEnv(variables)
    for function in ("AllReduce", "AllGather", "Bogus"):
        assert (env.algorithms(function) or frozenset()) <= frozenset(ALGORITHMS)
        assert (env.protocols(function) or frozenset()) <= frozenset(PROTOCOLS)
    assert env.max_channels is None or env.max_channels[1] > 0
    if env.hca is not None:
        env.hca.allows("mlx5_0", 1)


@given(st.sets(st.sampled_from(["Ring", "Tree", "NVLS", "NVLSTree", "PAT", "CollNetDirect"]), min_size=1))
def test_an_exclusion_is_the_complement_of_its_list(names):
    listed = NcclEnv({"NCCL_ALGO": ",".join(sorted(names))}).algorithms("AllReduce")
    excluded = NcclEnv({"NCCL_ALGO": "^" + ",".join(sorted(names))}).algorithms("AllReduce")
    assert listed is not None and excluded is not None
    assert listed | excluded == frozenset(ALGORITHMS) and not listed & excluded


# --- untrusted records -----------------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                 max_size=3), max_leaves=8)
GPU_KEYS = ("index", "name", "nvlink_links", "pcie_gen", "pcie_width", "pcie_gen_current",
            "pcie_width_current", "numa_node")
PORT_KEYS = ("device", "port", "rate_gbps", "state", "link_layer", "pcie_gen", "pcie_width", "numa_node")
RECORDS = st.fixed_dictionaries({}, optional={
    "gpus": st.fixed_dictionaries({}, optional={
        "devices": st.lists(st.dictionaries(st.sampled_from(GPU_KEYS), JSON | st.sampled_from(
            ["NVIDIA H100 80GB HBM3", 18, 5, 16])), max_size=9) | JSON, "topology": JSON}) | JSON,
    "infiniband": st.lists(st.dictionaries(st.sampled_from(PORT_KEYS), JSON | st.just("ACTIVE")), max_size=3),
    "network": JSON, "load": JSON, "cpu": JSON, "memory_copy": JSON, "container": JSON, "software": JSON})


@given(records=st.dictionaries(st.sampled_from(["a", "b"]), RECORDS, max_size=2),
       hostnames=st.lists(st.sampled_from(["a", "b", "c"]), max_size=4) | JSON,
       env=st.dictionaries(st.sampled_from(["NCCL_ALGO", "NCCL_IB_HCA", "NCCL_P2P_DISABLE", "OTHER"]),
                           st.text(max_size=8)) | JSON,
       groups=JSON, backend=st.sampled_from(["nccl", "gloo", "mpi", ""]))
@settings(deadline=None, max_examples=60)
def test_any_saved_records_are_explained_without_raising(records, hostnames, env, groups, backend):
    meta = {"hostnames": hostnames, "hardware": records, "world_size": 2, "device": "cuda",
            "backend": backend, "env": env, "groups": groups}
    for explained in explain_run(meta, [row("all_reduce", 2, 1 << 20, 1.0, nccl_algo="RING")], [], BASELINES):
        assert console_line(explained) is not None
        explained.to_dict()


@given(gpus=st.integers(1, 9), nvlinks=st.integers(0, 20), gen=st.integers(0, 7), nics=st.integers(0, 3),
       hosts=st.integers(1, 3), per_host=st.integers(2, 9), collective=st.sampled_from(
           ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]),
       env=st.dictionaries(st.sampled_from(["NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE",
                                            "NCCL_SHM_DISABLE", "NCCL_IB_HCA", "NCCL_NET_GDR_LEVEL"]),
                           st.sampled_from(["0", "1", "Ring", "^NVLS", "LL", "=mlx5_1", "LOC", ""])),
       algorithm=st.sampled_from(["", "RING", "TREE", "NVLS", "NVLS_TREE", "COLLNET_DIRECT", "PAT", "7"]))
@settings(deadline=None, max_examples=60)
def test_any_plausible_gpu_cluster_gets_finite_bounds_and_reasons(gpus, nvlinks, gen, nics, hosts, per_host,
                                                                   collective, env, algorithm):
    spec = {"gpu": "NVIDIA H100 80GB HBM3", "gpus": gpus, "nvlinks": nvlinks, "pcie": [gen, 16],
            "nvswitch": gpus >= 3, "nics": nics, "nic_gbps": 400, "link_layer": "InfiniBand",
            "nic_pcie": [5, 16]}
    names = [f"h{index}" for index in range(hosts)]
    meta = run_meta({name: gpu_host(spec) for name in names}, dict.fromkeys(names, per_host), env=env)
    rows = [row(collective, hosts * per_host, GIB, 10.0, nccl_algo=algorithm)]
    for explained in explain_run(meta, rows, [], BASELINES):
        for bound in (*explained.hardware, *explained.allowed):
            assert bound.gbps is None or 0 < bound.gbps < 10_000
        assert all(reason.loss is None or 0 <= reason.loss <= 1 for reason in explained.reasons())
        assert console_line(explained)
