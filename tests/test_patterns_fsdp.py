"""The FSDP pattern: layouts and reductions, the bucketer's schedule, bucketed == direct results on real
gloo groups (with padding at 3 ranks, AVG and pre/post-division equal to a plain average), the overlap
arithmetic, GPT-2 small's step, and the command end to end. tests/test_patterns_fsdp_torch.py compares the
schedule with torch's own FSDP."""

import json
import math
from pathlib import Path

import pytest
import torch

from commbench.backends.torch_dist import TorchDistBackend
from commbench.errors import RunError
from commbench.patterns.bucketing import BucketOptions, ReduceScatterBucketer
from commbench.patterns.fsdp import FsdpConfig, fsdp_schedule
from commbench.patterns.fsdp_check import FsdpChecker, grad_values, param_values, run_check
from commbench.patterns.fsdp_step import FsdpStep, ShardState, StepOptions
from commbench.patterns.measure import step_dry
from commbench.patterns.models import load_model
from commbench.patterns.overlap import calibrate_size, overlap_percent
from commbench.patterns.schedule import DRY, SYNC, Issuer
from commbench.patterns.sharding import (
    MIB,
    Reduction,
    default_divide_factors,
    divide_factors,
    fsdp_reduction,
    parse_buckets,
    shard_model,
)
from commbench.results.saved import load_run
from tests.dist_helpers import commbench, run_ranks

CPU = torch.device("cpu")


# --- pure arithmetic -----------------------------------------------------------------------------

def test_fsdp2_pads_dim_0_of_each_parameter_to_a_multiple_of_the_world_size():
    plan = shard_model(load_model("tiny"), 3)
    root, block0, _ = plan.units
    token, position, norm_weight, _ = root.params
    # [97, 16]: 33 rows per rank, so 99 rows with 2 of padding
    assert (token.numel, token.chunk, token.padding, token.offset) == (1552, 33 * 16, 2 * 16, 0)
    assert (position.numel, position.chunk, position.padding, position.offset) == (528, 176, 0, 528)
    assert (norm_weight.numel, norm_weight.chunk, norm_weight.padding) == (16, 6, 2)
    assert root.root and not block0.root and root.shard_numel == 716 and root.full_numel == 3 * 716
    assert block0.offset == 716 and block0.shard_numel == 917
    assert plan.shard_numel == sum(unit.shard_numel for unit in plan.units)
    # GPT-2's vocabulary of 50257 rows becomes 50258 at 2 ranks and 50264 at 8
    assert shard_model(load_model("gpt2-small"), 2).padding == 1 * 768
    assert shard_model(load_model("gpt2-small"), 8).padding == 7 * 768 + 12 * 0


def test_fsdp1_pads_each_unit_s_flat_parameter():
    root, block0, block1 = shard_model(load_model("tiny"), 3, version=1).units
    (flat,) = root.params
    assert (flat.name, flat.numel, flat.chunk, flat.padding) == ("flat_param", 2112, 704, 0)
    assert (block0.params[0].numel, block0.shard_numel, block0.padding) == (2587, 863, 2)
    assert block1.offset == 704 + 863


def test_fsdp2_averages_float32_and_bfloat16_and_divides_around_a_sum_otherwise():
    assert fsdp_reduction(2, "float32", 4) == Reduction("avg") == fsdp_reduction(2, "bfloat16", 4)
    assert fsdp_reduction(2, "float16", 4) == Reduction("sum", 2.0, 2.0)
    assert fsdp_reduction(2, "float16", 3) == Reduction("sum", 2.0, 1.5)
    assert fsdp_reduction(2, "float32", 1) == Reduction("sum")  # NCCL's AVG misbehaves on one rank
    assert fsdp_reduction(1, "float32", 8) == Reduction("sum", 4.0, 2.0)  # FSDP1 always divides
    assert fsdp_reduction(2, "float32", 8, (None, 8.0)) == Reduction("sum", 1.0, 8.0)  # given factors


def test_a_gpt2_small_fsdp2_step_is_38_collectives_and_1_335_742_464_bytes_at_2_ranks():
    labels = fsdp_schedule(FsdpConfig(model="gpt2-small"), 2)
    assert len(labels) == 38 and sum(label.size_bytes for label in labels) == 1_335_742_464
    # 12 blocks gathered twice and reduced once; the root gathered once (kept for backward), reduced once
    gathers = [label.unit for label in labels if label.collective == "all_gather_base"]
    assert gathers == ["root", *(f"block{i}" for i in range(12)), *(f"block{i}" for i in range(11, -1, -1))]
    assert [label.unit for label in labels][-1] == "root"
    assert {label.op for label in labels if label.collective == "reduce_scatter_base"} == {"avg"}
    root = next(label for label in labels if label.unit == "root")
    assert root.count_per_rank == (50258 * 768 + 1024 * 768 + 2 * 768) // 2  # 50257 rows padded to 50258
    mixed = fsdp_schedule(FsdpConfig(model="gpt2-small", param_dtype="bfloat16", reduce_dtype="float32"), 2)
    assert {(label.collective, label.dtype) for label in mixed} == {("all_gather_base", "bfloat16"),
                                                                    ("reduce_scatter_base", "float32")}
    assert [label.size_bytes for label in mixed] == [
        label.size_bytes // 2 if label.collective == "all_gather_base" else label.size_bytes
        for label in labels]
    assert len(fsdp_schedule(FsdpConfig(model="gpt2-small", fsdp_version=1), 2)) == 38


def test_divide_factors_split_the_world_size_as_fsdp_does():
    expected = {1: (1, 1), 2: (2, 1), 3: (2, 1.5), 4: (2, 2), 6: (4, 1.5), 8: (4, 2), 16: (4, 4), 32: (8, 4)}
    for world, factors in expected.items():
        assert default_divide_factors(world) == factors
    for world in range(1, 65):
        predivide, postdivide = default_divide_factors(world)
        assert predivide * postdivide == world and predivide <= math.sqrt(world) * 2
    assert divide_factors(8, 2.0, None) == (2.0, 4.0) and divide_factors(8, None, 8.0) == (1.0, 8.0)
    assert divide_factors(8, 3.0, 5.0) == (3.0, 5.0)


def test_bucket_sizes_parse_to_capacities():
    buckets = parse_buckets("unit, 0,1,25,1.0,2.5")
    assert [b.label for b in buckets] == ["unit", "0", "1", "25", "2.5"]
    assert [b.capacity_bytes for b in buckets] == [None, 0, MIB, 25 * MIB, int(2.5 * MIB)]
    plan = shard_model(load_model("gpt2-small"), 4)
    assert buckets[3].capacity_elements(plan, 4) == 25 * MIB // 16  # all ranks' chunks share the bytes
    assert buckets[0].capacity_elements(plan, 4) == plan.max_unit_shard == plan.units[0].shard_numel
    tiny = shard_model(load_model("tiny"), 4)
    assert buckets[3].capacity_elements(tiny, 4) == tiny.shard_numel  # never more than the whole model


def test_overlap_percent_is_osu_s_formula():
    # overlap = 100 * (1 - (t_both - t_compute) / t_comm), within [0, 100]
    assert overlap_percent(comm_us=100, compute_us=100, both_us=100) == 100  # fully hidden
    assert overlap_percent(comm_us=100, compute_us=100, both_us=200) == 0  # serialised
    assert overlap_percent(comm_us=100, compute_us=100, both_us=150) == 50
    assert overlap_percent(comm_us=80, compute_us=40, both_us=100) == 25  # 60 of the 80 µs stayed exposed
    assert overlap_percent(comm_us=100, compute_us=50, both_us=100) == 50  # only 50 µs of compute to hide in
    assert overlap_percent(comm_us=100, compute_us=100, both_us=260) == 0
    assert overlap_percent(comm_us=100, compute_us=100, both_us=90) == 100  # noise: capped
    assert overlap_percent(comm_us=0, compute_us=100, both_us=100) is None


def test_compute_size_calibration_finds_the_target_time():
    def seconds_at(size: int) -> float:  # a cubic matmul plus a fixed launch cost
        return 2e-10 * size**3 + 2e-5

    size = calibrate_size(seconds_at, target_seconds=0.05)
    assert abs(seconds_at(size) - 0.05) / 0.05 < 0.1
    assert calibrate_size(seconds_at, target_seconds=1e-9) == 16  # the smallest size
    assert calibrate_size(seconds_at, target_seconds=0.0) == 128


def test_the_bucketer_flushes_on_overflow_and_reduces_big_gradients_directly():
    backend = TorchDistBackend("gloo", CPU)  # a dry issuer never calls torch.distributed
    bucketer = ReduceScatterBucketer(backend, 2, torch.float32, CPU, BucketOptions(10, direct_numel=24))
    issuer = Issuer(backend, DRY, "test")
    bucketer.issuer = issuer
    delivered = []
    for chunk in (4, 4, 4, 12, 3):
        bucketer.reduce_scatter(torch.ones(2 * chunk), lambda result: delivered.append(result.numel()),
                                output=torch.empty(chunk), predivide=2.0, unit=f"u{chunk}")
    bucketer.flush_all(unit="", phase="flush")
    bucketer.complete_all()
    assert [(label.count_per_rank, label.unit, label.phase) for label in issuer.labels] == [
        (8, "u4", "backward"),  # the third 4 would overflow 10: the first two go
        (12, "u12", "backward"),  # larger than the whole bucket: on its own
        (7, "", "flush"),  # what is left at the end of the backward pass
    ]
    assert [label.size_bytes for label in issuer.labels] == [64, 96, 56]
    assert delivered == [4, 4, 12, 4, 3]


# --- real gloo groups -----------------------------------------------------------------------------

def _reduce_with_each_bucketing(rank: int, world_size: int, buckets: str, version: int, list_api: bool,
                                dtype_name: str) -> dict:
    dtype = getattr(torch, dtype_name)
    backend = TorchDistBackend("gloo", CPU)
    plan = shard_model(load_model("tiny"), world_size, version)
    # FSDP2's float32 AVG at 3 ranks; FSDP1's sum divided by 1 and then 2 at 2 ranks
    reduction = fsdp_reduction(version, dtype_name, world_size, (None, None) if version == 2 else (1.0, None))
    state = ShardState(plan, (dtype, dtype), CPU)
    checker = FsdpChecker(state, reduction, rank)  # its deterministic parameters and gradients
    gathered_buffers = [torch.zeros(plan.max_unit_shard * world_size, dtype=dtype)]
    gathered: dict[str, list[float]] = {}

    class Hooks:
        def gathered(self, unit, rows):
            gathered[unit.name] = rows.to(torch.float64).flatten().tolist()

        def backward(self, unit):
            checker.backward(unit)

    results = {}
    for bucketing in parse_buckets(buckets):
        step = FsdpStep(backend, state, bucketing, gathered_buffers,
                        StepOptions(reduction, gather_list=list_api, scatter_list=list_api))
        step_dry(backend, step, "test")
        state.grad_shards.fill_(float("nan"))  # a result no callback delivered stays NaN
        step.run(Issuer(backend, SYNC, "test"), hooks=Hooks())
        results[bucketing.label] = state.grad_shards.to(torch.float64).tolist()
    checker.verify(parse_buckets(buckets)[-1])
    clean = list(checker.mismatches)
    good = state.grad_shards.clone()
    state.grad_shards[3] += 1  # a wrong result must not pass --check
    checker.verify(parse_buckets(buckets)[-1])
    corrupted = list(checker.mismatches)
    # a mismatch on one rank fails the check on every rank (none is left waiting in a collective)
    checker.mismatches, checker.reference = [], good
    if rank == world_size - 1:
        checker.reference[0] = -1.0
    try:
        run_check(backend, checker, step, "fsdp tiny, bucket test")
        failure = ""
    except RunError as exc:
        failure = str(exc)
    return {"results": results, "gathered": gathered, "reduction": reduction, "clean": clean,
            "corrupted": corrupted, "failure": failure}


def _assert_reduced_and_gathered(outcome: list[dict], world_size: int, dtype: torch.dtype, version: int
                                 ) -> None:
    plan = shard_model(load_model("tiny"), world_size, version)
    reference = [rank["results"]["0"] for rank in outcome]
    for label in outcome[0]["results"]:
        # bucketed results equal the unbucketed (one reduce-scatter per parameter) ones, element for element
        assert [rank["results"][label] for rank in outcome] == reference, label
    for unit in plan.units:
        for param in unit.params:
            start = unit.offset + param.offset
            reduced = [value for rank in range(world_size)
                       for value in reference[rank][start: start + param.chunk]]
            # the plain average of every rank's gradient, computed here in float64
            ranks = torch.stack([grad_values(param, rank, torch.float64, CPU) for rank in range(world_size)])
            average = (ranks.sum(0) / world_size).tolist()
            assert reduced[: param.numel] == average[: param.numel], param.name
            assert reduced[param.numel:] == [0.0] * param.padding  # the padding reduces to zero
            # every rank gathered the whole parameter, padding included, exactly
            rows = torch.tensor(outcome[0]["gathered"][unit.name]).view(world_size, unit.shard_numel)
            full = rows[:, param.offset: param.offset + param.chunk].flatten()
            assert torch.equal(full, param_values(param, dtype, CPU).to(torch.float64))
    for rank in outcome:
        assert rank["clean"] == []
    assert any("reduced gradient" in message for rank in outcome for message in rank["corrupted"])
    last = world_size - 1
    for rank in outcome:
        first = plan.units[0].params[0].name
        assert rank["failure"].startswith(f"fsdp tiny, bucket test: check failed on rank {last}: reduced "
                                          f"gradient root.{first}")
        assert "against the unbucketed result" in rank["failure"] and "expected -1" in rank["failure"]


@pytest.mark.processes
def test_fsdp2_bucketed_equals_direct_with_padding_and_avg_at_3_ranks():
    buckets = "0,unit,0.0001,0.0005,1"  # per parameter, per unit, 13 and 65 elements per rank, everything
    outcome = run_ranks(_reduce_with_each_bucketing, 3, buckets, 2, False, "float32")
    assert outcome[0]["reduction"] == Reduction("avg")
    assert shard_model(load_model("tiny"), 3).padding > 0
    _assert_reduced_and_gathered(outcome, 3, torch.float32, 2)


@pytest.mark.processes
def test_fsdp1_list_fallback_and_given_factors_in_bfloat16_at_2_ranks():
    outcome = run_ranks(_reduce_with_each_bucketing, 2, "0,unit,0.0002", 1, True, "bfloat16")
    assert outcome[0]["reduction"] == Reduction("sum", 1.0, 2.0)
    _assert_reduced_and_gathered(outcome, 2, torch.bfloat16, 1)


# --- the command ----------------------------------------------------------------------------------

@pytest.mark.processes
def test_the_command_prints_the_breakdown_the_best_bucketing_and_the_overlap(tmp_path):
    result = commbench("pattern", "fsdp", "--model", "tiny", "--bucket-mb", "unit,0,0.001", "--check",
                       "--overlap", "--compute-size", "32", "--iters", "2", "--nproc", "2",
                       "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "fsdp2 · tiny · float32 · 2 ranks · avg · per unit, p50 ms per step" in out
    assert "step p50 ms" in out and "µs per step" not in out  # steps take ms to s: never in µs
    assert "time per step" in out and "best bucketing: " in out and "overlap %" in out
    assert "reduce-scatter 0.001 MiB" in out and "(end of backward)" in out
    assert out.count("checked") == 3
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    saved = load_run(run_dir / "results.json")
    rows = saved.rows
    assert saved.meta["status"] == "complete" and saved.meta["config"]["pattern"] == "fsdp"
    assert {row.bucket_mb for row in rows} == {"unit", "0", "0.001"}
    best = min((row for row in rows if row.phase == "step"), key=lambda row: row.time_us_p50)
    assert f"({best.time_us_p50 / 1e3:.2f} ms per step, p50)" in out
    assert all(row.pattern == "fsdp" and row.variant == "fsdp2" and row.model == "tiny" for row in rows)
    assert {row.op for row in rows if row.collective == "reduce_scatter_base"} == {"avg"}
    assert len({row.key() for row in rows}) == len(rows)  # every row is its own measurement
    units = [row.unit for row in rows if row.bucket_mb == "0" and row.phase == "forward"]
    assert units == ["root", "block0", "block1"]
    direct = [row for row in rows if row.bucket_mb == "0" and row.collective == "reduce_scatter_base"]
    assert sum(row.calls_per_step for row in direct) == 4 + 2 * 12  # one per parameter
    for bucket in ("unit", "0", "0.001"):
        step = next(r for r in rows if r.bucket_mb == bucket and r.phase == "step")
        parts = [r for r in rows if r.bucket_mb == bucket and r.phase in ("forward", "backward", "flush")]
        assert step.size_bytes == sum(r.size_bytes for r in parts)  # bytes moved add up
        assert step.calls_per_step == sum(r.calls_per_step for r in parts)
        comm, compute, both = (next(r for r in rows if r.bucket_mb == bucket and r.phase == phase)
                               for phase in ("comm", "compute", "comm+compute"))
        assert both.compute_size == 32 and comm.mode == "async"
        # OSU's Overlap(%): the share of the communication's time hidden under compute, within 0..100
        hidden = 1 - (both.time_us_p50 - compute.time_us_p50) / comm.time_us_p50
        assert both.overlap_pct == pytest.approx(min(100.0, max(0.0, 100 * hidden)))
        assert 0 <= both.overlap_pct <= 100
    header = (run_dir / "results.csv").read_text().splitlines()[0].split(",")
    assert {"pattern", "model", "unit", "phase", "bucket_mb", "predivide", "postdivide"} <= set(header)
    assert json.loads((run_dir / "results.json").read_text())["rows"][0]["unit"] == "root"


@pytest.mark.processes
def test_no_launcher_spawns_three_ranks_and_cuts_layers(tmp_path):
    json_path = Path(tmp_path) / "r.json"
    result = commbench("pattern", "fsdp", "--model", "tiny", "--layers", "1", "--no-reshard", "--iters", "1",
                       "--fsdp-version", "1", "--nproc", "3", "--json", str(json_path), "--output-dir",
                       str(tmp_path), "--quiet")
    assert result.returncode == 0, result.stderr
    saved = load_run(json_path)
    assert saved.meta["world_size"] == 3 and saved.meta["launcher"] == "local"
    assert {row.model for row in saved.rows} == {"tiny/layers=1"}
    assert {row.unit for row in saved.rows if row.phase == "forward"} == {"root", "block0"}
    assert not any(row.phase == "backward" and row.collective.startswith("all_gather") for row in saved.rows)
    assert {(row.variant, row.predivide, row.postdivide) for row in saved.rows} == {("fsdp1", 2.0, 1.5)}
    # FSDP1 on CPU gathers its flat parameters with the list all_gather
    assert {row.collective for row in saved.rows if row.phase == "forward"} == {"all_gather"}
    # pattern rows carry the run's peak like sweep rows (commbench.provenance): a loopback host here
    assert all(row.peak_gbps and row.pct_of_peak is not None for row in saved.rows if row.busbw_gbps)
