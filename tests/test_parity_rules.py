"""The parity options' rules without ranks: per-iteration blocks read back (and damaged ones refused),
misaligned and rotating buffers, the cache a flush writes over, memory accounts, what planning counts,
and the combinations refused before anything starts (exit 2)."""

import base64

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.backends.base import CollectiveArgs
from commbench.config.sweep import resolve, run_config
from commbench.core.devices import MemoryBudget
from commbench.errors import UsageError
from commbench.measure.cache import CacheFlush, Rotation, cpu_cache_bytes, misaligned, parse_cache_size
from commbench.measure.collectives import Buffers
from commbench.measure.memory import SizeMemory, Snapshot, StartMemory
from commbench.measure.planning import plan_tables
from commbench.results.iterations import BadIterations, Iterations, by_host, decode, encode, row_ranks, spikes
from commbench.results.model import CSV_COLUMNS, Row
from commbench.results.saved import REQUIRED_FIELDS, row_from_saved

MiB = 1 << 20


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 6), samples=st.integers(1, 12), data=st.data())
def test_a_block_reads_back_as_float32_of_what_was_kept(ranks, samples, data):
    values = np.array(data.draw(st.lists(st.floats(0, 1e3, allow_nan=False), min_size=ranks * samples,
                                         max_size=ranks * samples))).reshape(ranks, samples)
    back = decode(encode(values), samples)
    assert back.shape == (ranks, samples)
    assert np.array_equal(back, (values * 1e6).astype(np.float32).astype(np.float64))


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=40), samples=st.integers(0, 5))
def test_any_text_as_a_block_decodes_to_its_shape_or_is_refused_in_a_line(text, samples):
    try:
        values = decode(text, samples)
    except BadIterations as exc:
        assert "\n" not in str(exc) and "iteration_us" in str(exc)
        return
    assert values.ndim == 2 and values.shape[1] == samples and np.isfinite(values).all()


def _row(**values) -> Row:
    fields = dict(collective="all_reduce", backend="gloo", device="cpu", world_size=4, dtype="float32",
                  mode="sync", op="sum", size_bytes=4096, requested_bytes=4096, count_per_rank=1024, iters=3,
                  warmup=1, time_us_p50=1.0, time_us_p95=1.0, time_us_min=1.0, time_us_max=1.0,
                  time_us_mean=1.0, algbw_gbps=None, busbw_gbps=None, busbw_factor=1.5, samples=3)
    return Row(**{**fields, **values})


def test_a_bad_block_in_a_saved_row_is_named_with_its_row():
    nan = base64.b64encode(np.full(12, np.nan, dtype="<f4").tobytes()).decode()
    with pytest.raises(BadIterations, match=r"at 4 KiB: iteration_us holds a value that is not a finite"):
        Iterations.of(_row(iteration_us=nan))
    short = encode(np.ones((4, 2)))  # 8 values where 3 samples a rank were kept
    with pytest.raises(BadIterations, match="not 3 samples of float32 per rank"):
        Iterations.of(_row(iteration_us=short))
    five_ranks = encode(np.ones((5, 3)))
    with pytest.raises(BadIterations, match="hold 5 ranks, the row 4 ranks"):
        Iterations.of(_row(iteration_us=five_ranks))


def test_a_disjoint_communicators_blocks_are_its_members_and_hosts_group_them():
    row = _row(iteration_us=encode(np.array([[1e-3] * 3, [3e-3] * 3])), communicator=1, group_size=2,
               group_count=2, concurrent=2)
    assert row_ranks(row, 2) == (2, 3) and row_ranks(row, 4) == (0, 1, 2, 3)
    found = Iterations.of(row)
    hosts = by_host(found, ["a", "a", "b", "c"])
    assert [(host.host, host.ranks, round(host.p50_us)) for host in hosts] == [("c", (3,), 3000),
                                                                               ("b", (2,), 1000)]


@settings(max_examples=60, deadline=None)
@given(levels=st.lists(st.floats(1e-5, 1e-2), min_size=2, max_size=4), samples=st.integers(8, 30),
       data=st.data())
def test_a_spike_is_judged_against_its_own_ranks_times_not_the_rows(levels, samples, data):
    """Ranks at steady levels up to 1,000x apart, each jittering within 10%: a rank slow at every sample
    holds no spike, and one sample 20x its rank's level is the only one named, with that rank's median."""
    jitter = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).uniform(1.0, 1.1, (len(levels),
                                                                                           samples))
    seconds = np.array(levels)[:, None] * jitter
    rank, sample = data.draw(st.integers(0, len(levels) - 1)), data.draw(st.integers(0, samples - 1))
    seconds[rank, sample] *= 20
    row = _row(iteration_us=encode(seconds), world_size=len(levels), samples=samples)
    found = Iterations.of(row)
    named = spikes(found)
    assert [(spike.iteration, spike.rank) for spike in named] == [(sample, rank)]
    assert named[0].median_us == pytest.approx(float(np.median(found.times[rank])))


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 4), samples=st.integers(6, 30), data=st.data())
def test_a_spike_among_samples_in_two_modes_is_named(ranks, samples, data):
    """Half of each rank's samples (or one more) 8-12x the rest, so 4 scaled MADs span a factor past
    1,000, and one sample 200x the lower mode: that sample is the only one named."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    seconds = np.full((ranks, samples), 300e-6) * rng.uniform(1.0, 1.1, (ranks, samples))
    rank, sample = data.draw(st.integers(0, ranks - 1)), data.draw(st.integers(0, samples - 1))
    for index, mine in enumerate(seconds):  # the spike takes a lower-mode sample's place
        others = [position for position in rng.permutation(samples) if (index, position) != (rank, sample)]
        mine[others[:(samples + 1) // 2]] *= rng.uniform(8, 12)
    seconds[rank, sample] = 200 * 300e-6
    row = _row(iteration_us=encode(seconds), world_size=ranks, samples=samples)
    assert [(spike.iteration, spike.rank) for spike in spikes(Iterations.of(row))] == [(sample, rank)]


def test_the_blocks_stay_out_of_the_csv_and_load_from_json():
    assert "iteration_us" not in CSV_COLUMNS and "iteration_arrival_us" not in CSV_COLUMNS
    assert "measured_from" in CSV_COLUMNS and "slowdown" in CSV_COLUMNS
    kept = _row()
    saved = {**{name: getattr(kept, name) for name in REQUIRED_FIELDS}, "samples": 3,
             "iteration_us": encode(np.ones((4, 3))), "concurrent": 2, "communicator": 0}
    row = row_from_saved(saved)
    assert (row.concurrent, row.communicator, Iterations.of(row).times.shape) == (2, 0, (4, 3))
    with pytest.raises(ValueError, match="iteration_us is 7"):
        row_from_saved({**saved, "iteration_us": 7})


def test_misaligned_buffers_start_the_offset_past_their_allocation():
    allocate = misaligned(None, 12)
    tensor = allocate(100, torch.float32, torch.device("cpu"))
    assert tensor.numel() == 100
    assert tensor.data_ptr() - tensor.untyped_storage().data_ptr() == 12
    assert misaligned(None, 0) is None  # no offset: torch.empty as before


def test_a_rotation_issues_each_op_on_the_next_set_and_check_pins_the_first():
    sets = [Buffers(torch.zeros(1), torch.zeros(1)) for _ in range(3)]
    seen = []
    rotation = Rotation(sets, lambda backend, args: seen.append(args.output))
    args = CollectiveArgs(input=None, output=None)
    for _ in range(7):
        rotation(None, args)
    used = [next(index for index, buffers in enumerate(sets) if buffers.output is output) for output in seen]
    assert used == [0, 1, 2, 0, 1, 2, 0]
    pinned = rotation.pinned(0)
    pinned(None, args)
    pinned(None, args)
    assert seen[-1] is sets[0].output and seen[-2] is sets[0].output


def test_the_cache_size_comes_from_sysfs_and_a_flush_writes_all_of_it(tmp_path):
    for index, (level_type, size) in enumerate([("Data", "32K"), ("Instruction", "32K"), ("Unified", "1024K"),
                                                ("Unified", "32M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "type").write_text(level_type + "\n")
        (folder / "size").write_text(size + "\n")
    assert cpu_cache_bytes(tmp_path) == 32 * MiB
    assert cpu_cache_bytes(tmp_path / "missing") is None
    assert parse_cache_size("1024K") == MiB and parse_cache_size("512") == 512
    flush = CacheFlush(torch.zeros(4096, dtype=torch.uint8), "test")
    flush()
    first = flush.buffer.clone()
    flush()
    assert bool((first != 0).all()) and bool((flush.buffer != first).all()) and flush.nbytes == 4096


def test_a_size_account_on_cpu_counts_what_was_made_beside_the_buffers():
    # 64 MiB each: past glibc's largest mmap threshold (32 MiB), so each is fresh pages that the process's
    # resident size grows by; 16 MiB could reuse pages an earlier test freed (it did, in the fast loop)
    memory = SizeMemory(torch.device("cpu"))
    buffers = torch.ones(64 * MiB // 4)
    beside = buffers * 2  # a temporary as large as the buffers, alive at the end
    account = memory.finish(buffers.nbytes)
    assert account.user == 64 * MiB and account.library is None
    assert account.internal is not None and account.internal >= beside.nbytes * 0.9
    start = StartMemory(Snapshot.now(torch.device("cpu")), Snapshot.now(torch.device("cpu")))
    assert start.as_dict()["host_rss_before_bytes"] > 0 and start.as_dict()["device_used_after_bytes"] is None


@pytest.mark.cuda
def test_a_size_account_on_cuda_splits_torch_and_memory_outside_its_allocator():
    device = torch.device("cuda", 0)
    memory = SizeMemory(device)
    buffers = torch.ones(8 * MiB // 4, device=device)
    temporary = buffers * 2
    del temporary  # gone by the end, but its peak counts
    account = memory.finish(buffers.nbytes)
    assert account.user == 8 * MiB and account.library is not None and account.library >= 0
    assert account.internal is not None and account.internal >= 8 * MiB  # the temporary's peak


def test_planning_counts_every_set_and_the_matmul():
    budget = MemoryBudget(5 * MiB, "test")
    one = resolve(run_config(collectives=["all_reduce"], sizes=[MiB, 2 * MiB], backend="gloo", device="cpu"))
    tables, _ = plan_tables(one, 2, budget)
    assert [size.used for size in tables[0].sizes] == [MiB, 2 * MiB]
    three = resolve(run_config(collectives=["all_reduce"], sizes=[MiB, 2 * MiB], buffer_sets=3,
                               backend="gloo", device="cpu"))
    tables, notes = plan_tables(three, 2, budget)
    assert [size.used for size in tables[0].sizes] == [MiB] and "2 MiB needs 6 MiB per rank" in notes[-1]
    beside = resolve(run_config(collectives=["all_reduce"], sizes=[MiB], with_compute=512, backend="gloo",
                                device="cpu"))
    tables, notes = plan_tables(beside, 2, budget)  # 1 MiB + three 512 x 512 float32 matrices (3 MiB)
    assert [size.used for size in tables[0].sizes] == [MiB]
    tables, notes = plan_tables(beside, 2, MemoryBudget(3 * MiB, "test"))
    assert tables[0].sizes == [] and "needs 4 MiB per rank" in notes[-1]


@pytest.mark.parametrize("values, message", [
    (dict(misalign=6), "--misalign 6 is not a whole number of float32 elements (4 bytes)"),
    (dict(concurrent=2, modes=["sync", "async"]), "--concurrent times one op per communicator"),
    (dict(with_compute=64, cuda_graph=2, device="cuda", backend="nccl"), "cannot run with --cuda-graph"),
    (dict(concurrent=2, concurrent_groups="disjoint", group_size=2),
     "cuts the world into its own groups: drop --group-size"),
    (dict(buffer_sets=2, impls=["nccl-ubr"]), "--buffers runs on buffers commbench allocates itself"),
    (dict(concurrent_groups="apart"), "unknown --concurrent-groups 'apart'"),
    (dict(buffer_sets=0), "--buffers 0 must be at least 1"),
])
def test_combinations_that_cannot_run_are_refused_in_one_line(values, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve(run_config(collectives=["all_reduce"], **{"backend": "gloo", "device": "cpu", **values}))


def test_disjoint_groups_need_a_world_they_cut_evenly():
    config = resolve(run_config(collectives=["all_reduce"], concurrent=2, concurrent_groups="disjoint",
                                backend="gloo", device="cpu"))
    config.check_world(4)
    assert config.buffer_copies() == 1
    with pytest.raises(UsageError, match="needs a world of 2 x K ranks, K at least 2: 3 ranks cannot be cut"):
        config.check_world(3)
    same = resolve(run_config(collectives=["all_reduce"], concurrent=3, buffer_sets=2, backend="gloo",
                              device="cpu"))
    assert same.buffer_copies() == 6
