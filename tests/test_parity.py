"""What nccl-tests 2.19 and rccl-tests measure, and contention, on real gloo ranks: --per-iteration
names a spike injected into one iteration of one rank; --buffers N runs on N buffers and --misalign
shifts them, seen from their addresses; --flush-cache and --memory account for what they hold; a
concurrent run's communicators race, interleaved in the Flight Recorder; --with-compute measures the
matmul with and without the collective beside it."""

import os
import pickle
from pathlib import Path

import pytest
import torch

from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import resolve, run_config
from commbench.measure.cache import cpu_cache_bytes
from commbench.results.iterations import Iterations, row_lines, spikes
from commbench.running.runner import run_sweep
from commbench.writers.output import NullOutput
from tests.dist_helpers import run_ranks
from tests.recording_backend import RecordingBackend

pytestmark = pytest.mark.processes

HOSTS = ["node-a", "node-b"]
DELAYED_OP, DELAY_S = 4, 0.5  # rank 1 sleeps after the 4th timed op: iteration 3 (from 0)
# Enough iterations that the row's spread is its steady state's: with ten, the first few timed ops
# (~10x slower than the rest on a loaded 2-core runner) widened the robust spread until 4 of its sigmas
# exceeded the spike's 400x and nothing was named (4 of 14 runs beside two busy loops; CI's newest leg
# once); with twenty, 0 of 28. One warm-up op keeps the delay at timed iteration 3. CI's pin leg then
# named nothing at all (its times were not kept: the message now prints them). The likely cause, shown
# in test_parity_rules: judged against one spread over both ranks, ranks whose steady times differ (the
# first to arrive waits) widened it past any single sample; spikes() now judges each rank on its own,
# and the delay is 0.5 s (over 1,000x a loaded runner's 4 KiB op) for more room against noise.
SPIKED_WARMUP, SPIKED_ITERS = 1, 20


def _sweep(backend, warmup=1, **values):
    config = resolve(run_config(collectives=["all_reduce"], backend="gloo", device="cpu", warmup=warmup,
                                **values))
    return run_sweep(config, backend, NullOutput())


def _cold_and_late(rank: int, world_size: int) -> dict:
    late = RecordingBackend(delay_rank=1, delay_op=DELAYED_OP, delay_s=DELAY_S)
    [spiked] = _sweep(late, sizes=[4096], iters=SPIKED_ITERS, warmup=SPIKED_WARMUP, per_iteration=True)
    rotating = RecordingBackend()
    [cold] = _sweep(rotating, sizes=[1 << 16], iters=9, buffer_sets=3, misalign=8, flush_cache=True,
                    memory=True)
    return {"spiked": spiked, "addresses": rotating.addresses, "cold": cold}


@pytest.fixture(scope="module")
def cold_and_late() -> list[dict]:
    return run_ranks(_cold_and_late, 2)


def test_a_spike_injected_into_one_iteration_of_one_rank_is_named(cold_and_late):
    row = cold_and_late[0]["spiked"]
    found = Iterations.of(row)
    assert found is not None and found.times.shape == found.arrivals.shape == (2, SPIKED_ITERS)
    named = {(spike.iteration, spike.rank, spike.waited_for) for spike in spikes(found)}
    # rank 1's own time at iteration 3; at iteration 4 rank 0 waited for it to arrive
    assert {(DELAYED_OP - 1, 1, None), (DELAYED_OP, 0, 1)} <= named, (
        f"named {sorted(named, key=str)} from times (µs) {found.times.round().tolist()}")
    lines = row_lines(found, HOSTS)
    assert any(f"spike at iteration {DELAYED_OP - 1}: rank 1 (node-b)" in line and "its own time" in line
               for line in lines)
    assert any(f"spike at iteration {DELAYED_OP}: rank 0 (node-a)" in line and "for rank 1 (node-b)" in line
               for line in lines)
    assert row.first_op_us is not None and row.first_op_us > 0
    assert row.measured_from < row.measured_to and row.measured_from.endswith("+00:00")  # UTC, ISO 8601


def test_buffers_rotate_through_n_distinct_sets_each_misaligned(cold_and_late):
    for result in cold_and_late:
        timed = result["addresses"][-9:]  # the timed ops come last
        assert len({address for address, _ in timed}) == 3
        # round robin: each op uses the set three ops before it, never the one just used
        assert all(timed[index][0] == timed[index - 3][0] != timed[index - 1][0] for index in range(3, 9))
        assert all(address - storage == 8 for address, storage in timed)  # 8 bytes past the allocation


def test_flush_and_memory_are_counted_in_the_row(cold_and_late):
    row = cold_and_late[0]["cold"]
    assert (row.buffer_sets, row.misalign, row.flush_bytes) == (3, 8, cpu_cache_bytes() or 64 << 20)
    buffers = 3 * ((1 << 16) + 8)  # three sets of one in-place buffer, each 8 bytes longer
    assert row.mem_user_bytes == buffers + row.flush_bytes
    assert row.mem_internal_bytes is not None and row.mem_internal_bytes >= 0
    assert row.mem_library_bytes is None  # CPU: no device memory outside torch's allocator


def _racing(rank: int, world_size: int) -> dict:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "4000"
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    rows = _sweep(backend, sizes=[1 << 16], iters=6, concurrent=2, check=True)
    trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())  # this process's own dump
    names = [entry["process_group"][1] for entry in trace["entries"]
             if entry["process_group"][1].startswith("commbench concurrent")]
    # every thread of this rank on one CPU, the other rank's too: the matmul and the collective share it
    cpu = min(os.sched_getaffinity(0))
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), {cpu})
    beside = _sweep(backend, sizes=[16 << 20], iters=5, with_compute=160)
    return {"rows": rows, "names": names, "beside": beside}


@pytest.fixture(scope="module")
def racing() -> list[dict]:
    return run_ranks(_racing, 2)


def _longest_alternation(names: list[str]) -> int:
    longest = run = 1
    for before, after in zip(names, names[1:], strict=False):
        run = run + 1 if before != after else 1
        longest = max(longest, run)
    return longest


def test_concurrent_communicators_race_interleaved_in_the_flight_recorder(racing):
    for result in racing:
        names = result["names"]
        assert set(names) == {"commbench concurrent 0", "commbench concurrent 1"}
        # alone each runs its 6 iterations in a row; together one op of each per iteration, alternating
        assert _longest_alternation(names) >= 2 * 6
    rows = racing[0]["rows"]
    assert [(row.concurrent, row.communicator, row.wrong) for row in rows] == [(2, 0, 0), (2, 1, 0)]
    for row in rows:
        assert row.alone_us_p50 and row.slowdown == round(row.time_us_p50 / row.alone_us_p50, 4)


def test_with_compute_measures_the_matmul_with_and_without_the_collective(racing):
    [row] = racing[0]["beside"]
    assert (row.compute_size, row.phase, row.concurrent) == (160, "comm+compute", None)
    assert row.compute_alone_us > 0 and row.compute_us > 0 and row.alone_us_p50 > 0
    assert row.compute_slowdown == round(row.compute_us / row.compute_alone_us, 4)
    assert row.slowdown == round(row.time_us_p50 / row.alone_us_p50, 4)
    # on one CPU shared with two ranks' gloo threads moving 16 MiB, the matmul and the collective cannot
    # both keep their pace: which one the scheduler slows varies (idle, the matmul 2-8x and the collective
    # not; beside another pytest worker, the collective 2.4x and the matmul 1.2x)
    assert max(row.compute_slowdown, row.slowdown) > 1.2


def test_the_console_and_commbench_iterations_name_what_the_iterations_show(tmp_path):
    from tests.dist_helpers import commbench

    result = commbench("--sizes", "4K", "--iters", "8", "--warmup", "1", "--nproc", "2", "--per-iteration",
                       "--memory", "--output-dir", str(tmp_path), timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "CV" in result.stdout and "buffers" in result.stdout
    assert "iterations: all_reduce (float32, sum, in-place, sync) at 4 KiB, 8 samples: first op" in \
        result.stdout
    run_dir = next(Path(tmp_path).glob("*/"))
    assert "iteration_us" not in (run_dir / "results.csv").read_text().splitlines()[0].split(",")
    saved = commbench("iterations", str(run_dir), "--size", "4K")
    assert saved.returncode == 0, saved.stderr
    assert "8 samples: CV " in saved.stdout
    wrong_size = commbench("iterations", str(run_dir), "--size", "8K")
    assert wrong_size.returncode == 2 and "no per-iteration row of that size" in wrong_size.stderr


def _disjoint(rank: int, world_size: int) -> dict:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "4000"
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    rows = _sweep(backend, sizes=[4096], iters=4, concurrent=2, concurrent_groups="disjoint", check=True,
                  per_iteration=True)
    trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    names = {entry["process_group"][1] for entry in trace["entries"]
             if entry["process_group"][1].startswith("commbench concurrent")}
    return {"rows": rows, "names": names}


def test_disjoint_groups_each_run_their_own_communicator_and_rows():
    results = run_ranks(_disjoint, 4)
    for rank, result in enumerate(results):
        assert result["names"] == {f"commbench concurrent {rank // 2}"}  # a rank is in its group only
    rows = results[0]["rows"]
    assert [(row.communicator, row.group_size, row.group_count, row.wrong) for row in rows] == \
        [(0, 2, 2, 0), (1, 2, 2, 0)]
    assert [Iterations.of(row).ranks for row in rows] == [(0, 1), (2, 3)]  # each row holds its members
    assert all(row.slowdown == round(row.time_us_p50 / row.alone_us_p50, 4) for row in rows)
