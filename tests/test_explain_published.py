"""explain's bound model against published bus bandwidths: each case of tests/data/explain/published.yaml
is written as commbench's hardware records and a row of what ran, explained by the engine as a saved run
would be, and its bound for the algorithm that ran is held within 10% of the figure as published (never
recomputed). Cases a model constant was read from are marked calibration; known misses must stay above
the published figure (a bound, not a prediction)."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from commbench.measure.collectives import REGISTRY
from commbench.provenance.explain.engine import explain_run
from commbench.results.model import Row
from tests.explain_helpers import gpu_host

CASES = yaml.safe_load((Path(__file__).parent / "data" / "explain" / "published.yaml").read_text())["cases"]
TOLERANCE = 0.10
SIZE = 8 * 1024**3  # the published figures are large-size peaks


def case_run(case: dict[str, Any]) -> tuple[dict[str, Any], Row]:
    """The run's metadata (hosts, their records) and one row of the collective at a large size, with the
    algorithm NCCL ran as --nccl-debug records it."""
    run = case["run"]
    hosts = [f"node{index}" for index in range(run["hosts"])]
    world = run["hosts"] * run["ranks_per_host"]
    meta = {"hostnames": [host for host in hosts for _ in range(run["ranks_per_host"])],
            "hardware": {host: gpu_host(case["host"]) for host in hosts}, "world_size": world,
            "device": "cuda", "backend": "nccl", "env": {}}
    factor = REGISTRY[run["collective"]].busbw_factor(world)
    time_us = 1000.0
    algbw = SIZE / time_us / 1e3
    row = Row(collective=run["collective"], backend="nccl", device="cuda", world_size=world, dtype="float32",
              mode="sync", op="sum" if run["collective"] == "all_reduce" else "", size_bytes=SIZE,
              requested_bytes=SIZE, count_per_rank=SIZE // 4, iters=20, warmup=5, time_us_p50=time_us,
              time_us_p95=time_us, time_us_min=time_us, time_us_max=time_us, time_us_mean=time_us,
              algbw_gbps=algbw, busbw_gbps=algbw * factor, busbw_factor=factor,
              nccl_algo="" if run["algorithm"] == "P2P" else run["algorithm"], nccl_proto="SIMPLE")
    return meta, row


def model_bound(case: dict[str, Any]) -> float:
    meta, row = case_run(case)
    [series] = explain_run(meta, [row])
    [explained] = series.rows
    assert explained.ran is not None and explained.ran.algorithm == case["run"]["algorithm"]
    assert explained.ran.gbps is not None, explained.ran.why_not
    return explained.ran.gbps


def test_the_table_covers_nvlink_generations_nvls_ib_roce_and_pcie():
    tested = [case for case in CASES if "calibration" not in case and "known_miss" not in case]
    assert len(tested) >= 8
    generations = {case["host"]["nvlinks"] for case in tested}  # 6: NVLink 2, 12: 3, 18: 4 (8: H800, A800)
    assert {6, 12, 18} <= generations
    assert any(case["run"]["algorithm"].startswith("NVLS") for case in tested)
    assert {case["host"].get("link_layer") for case in tested} >= {"InfiniBand", "Ethernet"}
    assert any(case["host"].get("nic_pcie", [0])[0] == 4 for case in tested)  # a PCIe-bound case
    assert all(case["source"].startswith("https://github.com/") for case in CASES)


@pytest.mark.parametrize("case", [case for case in CASES if "known_miss" not in case],
                         ids=lambda case: case["id"])
def test_the_bound_is_within_ten_percent_of_the_published_figure(case):
    bound = model_bound(case)
    assert abs(bound - case["published_gbps"]) <= TOLERANCE * case["published_gbps"], (
        f"{case['id']}: model {bound:.1f} GB/s, published {case['published_gbps']} ({case['source']})")


@pytest.mark.parametrize("case", [case for case in CASES if "known_miss" in case],
                         ids=lambda case: case["id"])
def test_a_known_miss_stays_an_upper_bound(case):
    assert model_bound(case) > case["published_gbps"]
