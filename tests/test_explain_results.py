"""The explain part of results.json as a run writes it (running/recording.py: a table's rows, their α-β
fit, then explain), every key and figure checked against values worked out by hand from docs/explain.md's
model and its published constants; and which of a run's rows explain reads at all. The hosts are
commbench's records (tests/explain_helpers.py); no process starts."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from commbench.config.launch import LaunchConfig
from commbench.provenance.explain.engine import explain_run
from commbench.results.model import SERIES_FIELDS, Row, RunMeta
from commbench.running.recording import Recording
from tests.explain_helpers import cpu_host, gpu_host, row, run_meta

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "gpus": 8, "nvlinks": 18, "pcie": [5, 16], "nvswitch": True}
SERIES_KEYS = {*SERIES_FIELDS, "benchmark", "where", "no_bound", "best", "bounds", "allowed", "regime",
               "reasons", "rows"}
ROW_KEYS = {"size_bytes", "mode", "busbw_gbps", "best_algorithm", "best_gbps", "pct_of_best",
            "allowed_algorithm", "ran_algorithm", "ran_known", "ran_protocol", "ran_gbps", "reasons"}


def recorded(tmp_path: Path, meta: dict, rows: list[Row], config: dict | None = None) -> dict | None:
    """results.json's explain part after a run records ``rows`` as one table and ends."""
    run = RunMeta(run_id="explained", started_at="2026-12-05T12:00:00Z", command=["commbench"],
                  commbench_version="0", torch_version="0", python_version="3.11", backend=meta["backend"],
                  device=meta["device"], world_size=meta["world_size"], launcher="torchrun",
                  hostnames=meta["hostnames"], versions={}, env=meta["env"], config=config or {},
                  hardware=meta.get("hardware", {}))
    recording = Recording(run, LaunchConfig(csv_path=str(tmp_path / "results.csv"),
                                            json_path=str(tmp_path / "results.json")))
    for each in rows:
        recording.row(each)
    recording.table_done(rows)
    recording.finish("complete")
    return json.loads((tmp_path / "results.json").read_text()).get("explain")


def rounded_to(value: float, expected: float, places: int) -> bool:
    """``value`` is written with ``places`` decimals and is ``expected`` at that precision."""
    return round(value, places) == value and abs(value - expected) <= 0.5 * 10**-places + 1e-9


def test_a_run_writes_every_key_and_figure_of_its_explanation_into_results_json(tmp_path, capsys):
    # 8 H100 on NVSwitch, GPU 3 with 17 of its 18 NVLinks up, NCCL_ALGO=Ring, NCCL's log saying RING/LL128;
    # the times follow t = α + s/β exactly (α 100 µs, β 80 GB/s), so the fit is exact; ranks 1, 2 and 5
    # arrive last by 25%, 50% and 50% of p50 where --skew-threshold is 20%
    spec = {**H100, "nvlinks_of": {3: 17}}
    meta = run_meta({"node0": gpu_host(spec)}, {"node0": 8}, env={"NCCL_ALGO": "Ring"})
    alpha_us, beta = 100.0, 80.0
    sizes = (1 << 16, 1 << 20, 1 << 24, 1 << 28)
    factor = 2 * 7 / 8  # all_reduce's busbw factor on 8 ranks
    busbw = {size: size / (alpha_us + size / beta / 1e3) / 1e3 * factor for size in sizes}
    rows = [row("all_reduce", 8, size, busbw[size], nccl_algo="RING", nccl_proto="LL128") for size in sizes]
    for each, (share, rank) in zip(rows, [(0.25, 1), (0.5, 2), (0.5, 5)], strict=False):
        each.skew_us_max, each.slowest_rank = share * each.time_us_p50, rank
    explained = recorded(tmp_path, meta, rows, {"skew_threshold_percent": 20.0})

    assert explained is not None and explained["model"] == 1
    [series] = explained["series"]
    assert set(series) == SERIES_KEYS
    basic = ("collective", "dtype", "op", "mode", "world_size", "backend")
    assert {name: series[name] for name in basic} == {
        "collective": "all_reduce", "dtype": "float32", "op": "sum", "mode": "sync", "world_size": 8,
        "backend": "nccl"}
    assert series["benchmark"] == "" and series["no_bound"] == ""
    assert series["where"] == "8 ranks on 1 host (8 per host), nccl on cuda, NVIDIA H100 80GB HBM3"

    # a link carries 25 GB/s per direction: 17 links 425; NCCL gets 370 of 450 (nccl-tests#212), and NVLS
    # peaks at algbw 275 on 18 links, busbw 275 x 1.75; both scale with the links up
    ring, nvls = 425 * 370 / 450, 275 * 17 / 18 * factor
    assert series["best"]["algorithm"] == "NVLS" and rounded_to(series["best"]["gbps"], nvls, 4)
    assert series["best"]["peak_gbps"] == 425.0 and series["best"]["limit"] == "NVLink"
    bounds = {bound["algorithm"]: bound["gbps"] for bound in series["bounds"]}
    assert rounded_to(bounds.pop("RING"), ring, 4) and rounded_to(bounds.pop("NVLS"), nvls, 4)
    assert set(bounds) == {"TREE", "NVLS_TREE", "COLLNET_DIRECT", "COLLNET_CHAIN"}
    assert set(bounds.values()) == {None}  # one host: no trees; no InfiniBand: no CollNet
    allowed = {bound["algorithm"]: bound["gbps"] for bound in series["allowed"]}
    assert rounded_to(allowed.pop("RING"), ring, 4) and set(allowed.values()) == {None}  # NCCL_ALGO=Ring

    assert series["regime"] == {"alpha_us": pytest.approx(100.0), "beta_gbps": pytest.approx(80.0),
                                "beta_bus_gbps": pytest.approx(140.0),
                                "latency_bound_below_bytes": 8_000_000,  # n½ = α β
                                "near_peak_from_bytes": 72_000_000, "reliability": "ok"}

    # each rule once, at its largest cost: small-size at 64 KiB, 1 - s/(s + n½); of the two stragglers
    # of 50% the first (the smaller size's, rank 2); NVLS lost to NCCL_ALGO 1 - 370/481.25; LL128 moves
    # 120 data bytes of 128; one of 18 links down
    costs = [(reason["rule"], reason["loss"]) for reason in series["reasons"]]
    assert costs == [("small-size", round(1 - (1 << 16) / ((1 << 16) + 8e6), 4)), ("straggler", 0.5),
                     ("nccl-algo", round(1 - 370 / 481.25, 4)), ("algorithm-choice", 0.0625),
                     ("nvlinks-inactive", round(1 / 18, 4))]
    straggler = series["reasons"][1]
    assert straggler["evidence"]["slowest_rank"] == 2
    assert straggler["evidence"]["skew_threshold_percent"] == 20  # the run's, not the default 25
    assert series["reasons"][0]["evidence"]["size_bytes"] == 1 << 16

    assert [explained_row["size_bytes"] for explained_row in series["rows"]] == list(sizes)
    for size, explained_row in zip(sizes, series["rows"], strict=True):
        assert set(explained_row) == ROW_KEYS
        assert explained_row["mode"] == "sync" and explained_row["busbw_gbps"] == pytest.approx(busbw[size])
        assert explained_row["best_algorithm"] == "NVLS" and rounded_to(explained_row["best_gbps"], nvls, 4)
        assert rounded_to(explained_row["pct_of_best"], 100 * busbw[size] / nvls, 2)
        assert explained_row["allowed_algorithm"] == "RING" and explained_row["ran_algorithm"] == "RING"
        assert explained_row["ran_known"] is True and explained_row["ran_protocol"] == "LL128"
        assert rounded_to(explained_row["ran_gbps"], ring * 120 / 128, 4)
    assert [explained_row["reasons"] for explained_row in series["rows"]] == [
        ["small-size", "straggler", "nccl-algo", "algorithm-choice", "nvlinks-inactive"],  # 99%, 25%
        ["small-size", "straggler", "nccl-algo", "algorithm-choice", "nvlinks-inactive"],  # 88%, 50%
        ["straggler", "small-size", "nccl-algo", "algorithm-choice", "nvlinks-inactive"],  # 50%, 32%
        ["nccl-algo", "algorithm-choice", "nvlinks-inactive"]]  # 97% of β: not latency-bound
    [line] = [line for line in capsys.readouterr().out.splitlines() if "explain:" in line]
    assert "at 256 MiB: 136 GB/s, 30% of what NVLS allows here (455)" in line


def test_a_gloo_run_without_hardware_records_why_there_is_no_bound(tmp_path):
    meta = {"hostnames": ["vm", "vm"], "world_size": 2, "device": "cpu", "backend": "gloo", "env": {}}
    explained = recorded(tmp_path, meta, [row("all_reduce", 2, 1 << 20, 0.5, backend="gloo")])
    assert explained is not None
    [series] = explained["series"]
    assert series["where"] == "" and series["best"] is None and series["bounds"] == series["allowed"] == []
    assert series["no_bound"] == "the run recorded no hardware (a run saved before commbench recorded it)"
    assert series["regime"] is None and series["reasons"] == []  # one size: no fit
    assert series["rows"] == [{"size_bytes": 1 << 20, "mode": "sync", "busbw_gbps": 0.5,
                               "best_algorithm": None, "best_gbps": None, "pct_of_best": None,
                               "allowed_algorithm": None, "ran_algorithm": None, "ran_known": True,
                               "ran_protocol": "", "ran_gbps": None, "reasons": []}]  # gloo has one path


def test_a_gloo_row_of_one_byte_is_explained_against_half_the_memory_copy_rate(tmp_path):
    meta = run_meta({"vm": cpu_host(cpus=2, copy_gbps=8.0)}, {"vm": 2}, backend="gloo")
    rows = [replace(row("all_reduce", 2, size, 0.5, backend="gloo"), dtype="uint8", count_per_rank=size)
            for size in (1, 1024)]
    explained = recorded(tmp_path, meta, rows)
    assert explained is not None
    [series] = explained["series"]
    # every byte is copied into a socket buffer and out of one: 8 / 2 GB/s, a CPU per rank
    assert series["where"] == "2 ranks on 1 host (2 per host), gloo on cpu"
    assert series["best"]["algorithm"] == "GLOO" and series["best"]["gbps"] == 4.0
    assert [(each["size_bytes"], each["ran_algorithm"], each["ran_known"], each["ran_gbps"],
             each["pct_of_best"]) for each in series["rows"]] == [(1, "GLOO", True, 4.0, 12.5),
                                                                  (1024, "GLOO", True, 4.0, 12.5)]


def test_nccl_without_its_log_is_assumed_to_run_the_best_allowed_and_send_recv_is_known():
    meta = run_meta({"node0": gpu_host(H100)}, {"node0": 8})
    all_to_all, all_reduce = explain_run(meta, [row("all_to_all", 8, 1 << 30, 100.0),
                                                row("all_reduce", 8, 1 << 30, 100.0)])
    # all_to_all is Send/Recv whatever NCCL logs: one rank's NVLink at 370 of 450
    assert [(each["ran_algorithm"], each["ran_known"], each["ran_gbps"]) for each in
            all_to_all.to_dict()["rows"]] == [("P2P", True, 370.0)]
    # all_reduce without --nccl-debug: NVLS, the best left, as NCCL's likely choice, not known
    assert [(each["ran_algorithm"], each["ran_known"], each["ran_gbps"]) for each in
            all_reduce.to_dict()["rows"]] == [("NVLS", False, 481.25)]


def test_a_backend_without_a_bandwidth_model_says_which():
    meta = run_meta({"vm": cpu_host()}, {"vm": 2}, backend="mpi")
    [series] = explain_run(meta, [row("all_reduce", 2, 1 << 20, 0.5, backend="mpi")])
    assert series.no_bound == "no bandwidth model for backend mpi on cpu" and series.best is None
    assert series.where == "2 ranks on 1 host (2 per host), mpi on cpu"


def test_only_measured_sweep_rows_of_some_bytes_are_explained_each_series_apart():
    meta = run_meta({"vm": cpu_host()}, {"vm": 2}, backend="gloo")
    measured = [row("all_reduce", 2, 1 << 20, 0.5, backend="gloo"), row("all_gather", 2, 1 << 20, 0.25,
                                                                         backend="gloo")]
    failed = replace(row("all_reduce", 2, 1 << 22, 0.5, backend="gloo"), error="RuntimeError: timed out",
                     busbw_gbps=None, algbw_gbps=None)
    timed_out_but_timed = replace(row("all_reduce", 2, 1 << 24, 0.5, backend="gloo"), error="timed out")
    fabric = replace(row("all_reduce", 2, 1 << 20, 0.5, backend="gloo"), pattern="fabric")
    empty = replace(row("all_reduce", 2, 1 << 20, 0.5, backend="gloo"), size_bytes=0)  # as a file may hold
    explained = explain_run(meta, [measured[0], failed, timed_out_but_timed, fabric, empty, measured[1]])
    assert [(series.series["collective"], [each.size_bytes for each in series.rows])
            for series in explained] == [("all_reduce", [1 << 20]), ("all_gather", [1 << 20])]
    assert explain_run(meta, [fabric]) == [] and explain_run(meta, [failed]) == []


def test_a_row_a_file_gives_no_bandwidth_is_explained_at_none_of_the_bound():
    meta = run_meta({"vm": cpu_host(copy_gbps=8.0)}, {"vm": 2}, backend="gloo")
    zero = replace(row("all_reduce", 2, 1 << 20, 0.5, backend="gloo"), busbw_gbps=0.0)
    [series] = explain_run(meta, [zero])
    [explained] = series.to_dict()["rows"]
    assert explained["busbw_gbps"] == 0.0 and explained["pct_of_best"] == 0.0


def test_the_runs_own_fits_are_used_and_no_fit_means_no_regime():
    meta = run_meta({"node0": gpu_host(H100)}, {"node0": 8})
    rows = [row("all_reduce", 8, size, size / (20.0 + size / 250.0 / 1e3) / 1e3 * 1.75, nccl_algo="NVLS")
            for size in (1 << 16, 1 << 20, 1 << 24, 1 << 28)]
    [series] = explain_run(meta, rows, [])  # a run that saved no fits for these rows
    assert series.regime is None and not any(reason.rule == "small-size" for reason in series.reasons())
    [refitted] = explain_run(meta, rows)  # none given: fitted from the rows
    assert refitted.regime is not None and refitted.regime.alpha_us == pytest.approx(20.0)
