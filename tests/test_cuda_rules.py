"""Rules of the CUDA path that are arithmetic or validation: graphs, the launch-hiding spin, and the
memory torch allocates beside the buffers (so --max-memory and the async window count it). Warm-up's
rule is tested with the sampling (tests/test_sampling.py).
"""

import json
from dataclasses import asdict

import pytest

from commbench.config.sweep import resolve, run_config
from commbench.core.devices import MemoryBudget, explicit_budget
from commbench.errors import UsageError
from commbench.measure.collectives import REGISTRY
from commbench.measure.cuda_timing import spin_cycles, spin_target_us
from commbench.measure.planning import PlannedSize, SizeLimits, memory_need, plan_sizes, plan_tables
from commbench.results.rows import make_row
from commbench.results.saved import load_run

MiB = 1024**2


# --- CUDA graphs ------------------------------------------------------------------------------------

def test_graphs_with_async_mode_are_refused_before_anything_starts():
    with pytest.raises(UsageError, match="--cuda-graph 4 captures one sync sequence of ops: it cannot time "
                                         "--mode async"):
        resolve(run_config(cuda_graph=4, modes=["async"], sizes=[1024]))
    with pytest.raises(UsageError, match="cannot time --mode async"):
        resolve(run_config(cuda_graph=4, modes=["both"], sizes=[1024]))


def test_only_host_blocking_collectives_are_not_capturable():
    assert [name for name, collective in REGISTRY.items() if not collective.capturable] == ["barrier"]


# --- device time with the launch hidden --------------------------------------------------------------

def test_the_spin_covers_twice_the_issue_time_within_bounds():
    assert spin_target_us(15e-6) == pytest.approx(30.0)
    assert spin_target_us(1e-6) == 20.0  # at least 20 µs
    assert spin_target_us(1.0) == 2000.0  # at most 2 ms
    assert spin_cycles(50.0, cycles_per_us=1410.0) == 70500
    assert spin_cycles(0.0, 1410.0) == 1


# --- memory beside the buffers ------------------------------------------------------------------------

def _need(name: str, device: str, world_size: int = 2, size: int = MiB):
    collective = REGISTRY[name]
    count, used = collective.plan(size, world_size, 4)
    return memory_need(collective, PlannedSize(size, used, count), SizeLimits(world_size, "float32",
                                                                             device=device))


def test_list_forms_count_their_flat_temporary_on_every_device():
    # 1 MiB all-gathered over 2 ranks: 512 KiB in, 1 MiB out, and torch's flat copy of the output
    for device in ("cpu", "cuda"):
        need = _need("all_gather", device)
        assert (need.buffers, need.temporary) == (MiB + MiB // 2, MiB)
    assert _need("reduce_scatter", "cuda").temporary == MiB  # NCCL flattens the whole input list
    assert _need("reduce_scatter", "cpu").temporary == MiB // 2  # gloo copies every chunk but its own


def test_flat_forms_copy_through_a_temporary_on_gloo_only():
    assert _need("all_gather_base", "cpu").temporary == MiB
    assert _need("all_gather_base", "cuda").temporary == 0
    assert _need("all_to_all_single", "cpu").temporary == 0
    assert _need("all_to_all", "cpu").temporary == 2 * MiB  # gloo flattens both lists


def test_an_async_window_holds_only_as_many_ops_as_the_budget_has_temporaries_for():
    # 1 GiB all_gather on 2 ranks: 1.5 GiB of buffers and 1 GiB per op in flight; at 100 ops in a
    # window that would be 101.5 GiB
    budget = MemoryBudget(int(5.5 * 1024**3), "a 5.5 GiB device")
    limits = SizeLimits(2, "float32", budget=budget, device="cuda")
    (planned,), notes = plan_sizes(REGISTRY["all_gather"], [1024**3], limits)
    assert planned.window == 4  # (5.5 - 1.5) / 1
    assert notes == []
    (flat,), _ = plan_sizes(REGISTRY["all_gather_base"], [1024**3], limits)
    assert flat.window is None  # NCCL's flat form allocates nothing per op


def test_a_size_whose_buffers_and_one_temporary_exceed_the_budget_is_refused_naming_both():
    planned, notes = plan_sizes(REGISTRY["all_gather"], [MiB, 4 * MiB],
                                SizeLimits(2, "float32", budget=MemoryBudget(3 * MiB, "test budget")))
    assert [size.used for size in planned] == [MiB]
    (note,) = notes
    assert "all_gather float32 at 2 ranks: refused, not enough memory (3 MiB per rank, test budget; " \
           "--max-memory sets another budget): 4 MiB needs 10 MiB per rank (6 MiB of buffers + 4 MiB of " \
           "torch temporaries)" == note


def test_the_window_cap_is_noted_for_async_tables_only():
    config = resolve(run_config(collectives=["all_gather"], sizes=[MiB], modes=["async"], iters=100,
                                max_memory=4 * MiB))
    _, notes = plan_tables(config, 2)
    assert any("async windows hold at most this many ops" in note and "1 MiB: 2" in note
               and "--max-memory 4 MiB" in note for note in notes), notes
    _, sync_notes = plan_tables(resolve(run_config(collectives=["all_gather"], sizes=[MiB], iters=100,
                                                   max_memory=4 * MiB)), 2)
    assert not any("async windows" in note for note in sync_notes)


def test_max_memory_comes_before_the_default_budget():
    config = resolve(run_config(collectives=["all_reduce"], sizes=[MiB, 8 * MiB], max_memory=2 * MiB))
    tables, notes = plan_tables(config, 2, available=MemoryBudget(100 * MiB, "plenty"))
    assert [size.used for size in tables[0].sizes] == [MiB]
    assert "--max-memory 2 MiB" in notes[0] and "--max-memory sets another budget" not in notes[0]
    assert explicit_budget(2 * MiB).describe() == "--max-memory 2 MiB"


def test_files_written_before_the_host_time_column_still_load(tmp_path):
    row = asdict(make_row(None, collective="all_reduce", backend="gloo", device="cpu", world_size=2,
                          dtype="float32", mode="sync", op="sum", size_bytes=1024, requested_bytes=1024,
                          count_per_rank=256, warmup=5, busbw_factor=1.0))
    del row["host_time_us_p50"]
    (tmp_path / "old.json").write_text(json.dumps({"schema": 1, "meta": {}, "rows": [row]}))
    (loaded,) = load_run(tmp_path / "old.json").rows
    assert loaded.host_time_us_p50 is None and loaded.collective == "all_reduce"
