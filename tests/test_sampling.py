"""Adaptive iteration counts, the median's confidence interval, and what the timed loops include."""

import math
import random
import time

import pytest
import torch

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend
from commbench.measure.collectives import REGISTRY
from commbench.measure.sampling import IterationBudget, SamplingPolicy, collect, sync_samples
from commbench.measure.stats import median_ci95, summarize
from commbench.measure.timing import BoundOp, time_async
from tests.dist_helpers import commbench, run_ranks


def _policy(**changes) -> SamplingPolicy:
    values = dict(fixed_iters=None, time_per_size=0.5, min_iters=5, max_iters=1000, precision=0.05)
    values.update(changes)
    return SamplingPolicy(**values)


def test_count_fits_the_budget_between_the_bounds():
    budget = IterationBudget(_policy())
    assert budget.choose(1024, 0.001) == 500  # 0.5 s / 1 ms
    assert IterationBudget(_policy()).choose(1024, 1e-6) == 1000  # capped by --max-iters
    assert IterationBudget(_policy()).choose(1024, 2.0) == 5  # --min-iters even when over budget


def test_sync_counts_give_an_interval_from_20_samples_or_none():
    policy = _policy()  # 0.5 s per size, --min-iters 5
    assert sync_samples(500, 0.001, policy) == 500
    assert sync_samples(5, 0.1, policy) == 5  # too few for an interval: as budgeted
    assert sync_samples(25, 0.02, policy) == 40  # 40 x 20 ms fit in twice the budget
    assert sync_samples(30, 0.03, policy) == 30  # 40 x 30 ms would not; 30 are more than 20
    assert sync_samples(12, 0.04, policy) == 20  # 20 x 40 ms fit in twice the budget
    assert sync_samples(8, 0.06, policy) == 5  # 20 x 60 ms would not: no interval
    assert sync_samples(12, 0.01, _policy(max_iters=15)) == 15


def test_count_never_rises_with_size():
    budget = IterationBudget(_policy())
    probes = {1024: 0.004, 4096: 0.001, 16384: 0.0005, 65536: 0.01}  # noisy: 4K probed faster than 1K
    counts = [budget.choose(size, probe) for size, probe in probes.items()]
    assert counts == [125, 125, 125, 50]
    # sizes given out of order still give a non-increasing count over size
    shuffled = IterationBudget(_policy())
    counts = {size: shuffled.choose(size, probe) for size, probe in
              [(65536, 0.01), (1024, 0.004), (16384, 0.0005)]}
    ordered = [counts[size] for size in sorted(counts)]
    assert ordered == sorted(ordered, reverse=True)


def test_median_interval_covers_the_true_median_95_percent_of_the_time():
    rng = random.Random(7)
    true_median = math.log(2)  # exponential(1)
    for n in (6, 11, 40, 200):
        trials, covered = 2000, 0
        for _ in range(trials):
            low, high = median_ci95(sorted(rng.expovariate(1.0) for _ in range(n)))
            covered += low <= true_median <= high
        assert 0.94 <= covered / trials <= 0.995, (n, covered / trials)


def test_median_interval_matches_the_binomial_tables():
    # For n = 10 and n = 100 the classic distribution-free 95% intervals are (x2, x9) and (x40, x61).
    assert median_ci95([float(i) for i in range(1, 11)]) == (2.0, 9.0)
    assert median_ci95([float(i) for i in range(1, 101)]) == (40.0, 61.0)
    assert median_ci95([1.0, 2.0, 3.0, 4.0, 5.0]) is None


def test_summary_spread_statistics():
    summary = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert summary.mean == 5.0
    assert summary.stdev == pytest.approx(math.sqrt(32 / 7))
    assert summary.cv == pytest.approx(summary.stdev / 5.0)
    assert summary.p99 == pytest.approx(9.0 - 0.07 * 2.0)
    assert summarize([3.0]).stdev == 0.0 and summarize([3.0]).ci95_rel is None


def _adaptive_counts(rank: int, world_size: int) -> dict:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    # Each rank is given a different policy: only rank 0's may decide, so all must still agree.
    policy = _policy(time_per_size=0.05, max_iters=60 if rank == 0 else 7, min_iters=3, precision=0.001)
    budget = IterationBudget(policy)
    found = {}
    for size in (256, 4096, 65536, 1 << 20):
        buffer = torch.zeros(size // 4)
        args = CollectiveArgs(input=buffer, output=buffer)
        for mode in ("sync", "async"):
            sampled = collect(BoundOp(backend, args, REGISTRY["all_reduce"].issue), mode,
                              budget if mode == "sync" else IterationBudget(policy), size)
            found[(size, mode)] = (sampled.ops, len(sampled.per_rank_seconds[0]))
    found["chosen"] = dict(budget._counts) if rank == 0 else None
    return found


@pytest.mark.processes
def test_adaptive_counts_are_decided_once_for_all_ranks():
    results = run_ranks(_adaptive_counts, 2)
    chosen = results[0].pop("chosen")
    results[1].pop("chosen")
    assert results[0] == results[1]  # same number of ops and samples on every rank
    counts = [chosen[size] for size in sorted(chosen)]
    assert counts == sorted(counts, reverse=True) and max(counts) <= 60 and min(counts) >= 3
    for (size, mode), (ops, samples) in results[0].items():
        assert ops <= 60  # rank 0's --max-iters; rank 1's 7 played no part...
        if mode == "sync":  # the count chosen, or 20 or 40 when it was below 40 (sync_samples)
            assert ops == samples <= max(chosen[size], 40)
    assert any(ops > 7 for ops, _ in results[0].values())  # ...as this shows


class _SlowWork:
    """A work handle whose completion takes ``delay`` seconds longer than the collective."""

    def __init__(self, work, delay: float) -> None:
        self.work, self.delay = work, delay

    def wait(self, timeout=None) -> bool:
        time.sleep(self.delay)
        return self.work.wait()

    def is_completed(self) -> bool:
        return self.work.is_completed()


class _SlowCompletionBackend(TorchDistBackend):
    def all_reduce(self, args: CollectiveArgs) -> None:
        super().all_reduce(args)
        if args.async_op:
            args.wait_list[-1] = _SlowWork(args.wait_list[-1], 0.02)


def _async_window(rank: int, world_size: int) -> float:
    backend = _SlowCompletionBackend("gloo", torch.device("cpu"))
    buffer = torch.zeros(16)
    op = BoundOp(backend, CollectiveArgs(input=buffer, output=buffer), REGISTRY["all_reduce"].issue)
    return time_async(op, 5).seconds[0]


@pytest.mark.processes
def test_async_window_ends_after_every_wait():
    # Each of the 5 handles takes at least 20 ms to complete: a clock stopped before the waits would
    # report microseconds per op; one stopped after them reports at least 20 ms per op.
    for per_op in run_ranks(_async_window, 2):
        assert per_op >= 0.02


@pytest.mark.processes
def test_fixed_iters_turns_adaptation_off(tmp_path):
    result = commbench("--collective", "all_reduce", "--sizes", "1K,64K", "--iters", "7", "--mode", "both",
                       "--barrier", "per-iter", "--json", str(tmp_path / "r.json"), "--output-dir",
                       str(tmp_path))
    assert result.returncode == 0, result.stderr
    import json

    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert [(r["mode"], r["iters"], r["samples"]) for r in rows] == [
        ("sync", 7, 7), ("async", 7, 1), ("sync", 7, 7), ("async", 7, 1)]
    sync = rows[0]
    assert sync["ci95_rel"] is not None and sync["time_us_p99"] >= sync["time_us_p95"]
    # on CPU the host's clock is the only clock: the host-observed time is the time
    assert all(row["host_time_us_p50"] == row["time_us_p50"] for row in rows)
    assert len(sync["rank_mean_us"]) == 2 and len(sync["samples_us"]) == 7


@pytest.mark.processes
def test_memory_guard_refuses_before_allocating(tmp_path):
    result = commbench("--collective", "all_gather_base", "--sizes", "1K,1M", "--max-memory", "256K",
                       "--iters", "2", "--json", str(tmp_path / "r.json"), "--output-dir", str(tmp_path))
    # the size that fits is measured; the one refused was asked for and not measured: exit 1, naming it
    assert result.returncode == 1, result.stderr
    # 1 MiB all-gathered over 2 ranks: 512 KiB input + 1 MiB output per rank, and gloo's 1 MiB copy
    assert "refused, not enough memory (--max-memory 256 KiB): 1 MiB needs 2.5 MiB per rank (1.5 MiB of " \
           "buffers + 1 MiB of torch temporaries)" in " ".join(result.stdout.split())
    assert "asked for but not measured: 1 point (first: all_gather_base float32 at 2 ranks: 1 MiB needs" \
        in result.stderr
    import json

    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert [row["size_bytes"] for row in rows] == [1024]


@pytest.mark.processes
def test_a_size_beyond_the_available_memory_is_refused_naming_need_and_memory(tmp_path):
    result = commbench("--sizes", "99999G", "--iters", "2", "--output-dir", str(tmp_path))
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert "nothing to measure at 2 ranks: all_reduce float32 at 2 ranks: refused, not enough memory (" \
        in line
    assert "available (MemAvailable) shared by 2 ranks" in line and "--max-memory sets another budget" in line
    assert "99999 GiB needs 97.7 TiB per rank" in line
    assert "err == 0" not in result.stdout + result.stderr and "Traceback" not in result.stderr


@pytest.mark.processes
def test_an_allocation_that_fails_names_size_need_budget_and_max_memory(tmp_path):
    # --max-memory above what the machine has: the size passes the plan, and its allocation fails
    result = commbench("--sizes", "99999G", "--max-memory", "999999G", "--iters", "2",
                       "--output-dir", str(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "out of memory allocating size 99999 GiB: it needs 97.7 TiB per rank (97.7 TiB of buffers); " \
           "within --max-memory 999999 GiB (RuntimeError) (on every rank)" in " ".join(result.stderr.split())
    assert "err == 0" not in result.stderr


@pytest.mark.processes
def test_async_windows_hold_no_more_ops_than_memory_has_room_for(tmp_path):
    result = commbench("--collective", "all_gather", "--sizes", "1M", "--mode", "async", "--iters", "8",
                       "--max-memory", "4M", "--json", str(tmp_path / "r.json"),
                       "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    # 1.5 MiB of buffers and 1 MiB per op in flight within 4 MiB: windows of 2 ops
    assert "async windows hold at most this many ops" in " ".join(result.stdout.split())
    import json

    (row,) = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert (row["iters"], row["samples"]) == (8, 4)


@pytest.mark.processes
@pytest.mark.parametrize("args, message", [
    (["--cuda-graph", "4"], "--cuda-graph captures NCCL collectives in a CUDA graph: it needs --device cuda"),
    (["--min-iters", "50", "--max-iters", "10"], "--min-iters 50 is above --max-iters 10"),
    (["--precision", "5"], "--precision 5 must be a fraction between 0 and 1"),
    (["--time-per-size", "0"], "--time-per-size 0 must be above 0"),
    (["--barrier", "always"], "Invalid value for '--barrier'"),
    (["--max-memory", "lots"], "malformed size 'lots'"),
])
def test_measurement_options_reject_bad_values(args, message):
    result = commbench(*args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.processes
def test_progress_bar_on_a_terminal_only(tmp_path):
    import os
    import pty
    import subprocess
    import sys

    from tests.dist_helpers import ROOT

    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "--collective", "all_reduce", "--sizes",
                             "1K:64K", "--time-per-size", "0.05", "--output-dir", str(tmp_path)],
                            stdout=follower, stderr=follower, stdin=subprocess.DEVNULL, cwd=ROOT, env=env)
    os.close(follower)
    captured = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        captured += chunk
    assert proc.wait(timeout=120) == 0
    text = captured.decode(errors="replace")
    assert "ETA" in text and "all_reduce float32" in text
    # the same run off a terminal prints the tables and no bar
    result = commbench("--collective", "all_reduce", "--sizes", "1K:64K", "--time-per-size", "0.05",
                       "--output-dir", str(tmp_path))
    assert result.returncode == 0 and "ETA" not in result.stdout and "all_reduce · float32" in result.stdout


def test_an_interlude_runs_every_n_ops_and_once_after_the_last():
    from commbench.measure.sampling import Interlude

    runs = []
    interlude = Interlude(3, lambda: runs.append(interlude.since))
    for ops in (2, 1, 3, 1):  # regions of these many ops
        interlude.after(ops)
    assert len(runs) == 2  # after 3 and after 6 ops
    interlude.finish()
    assert len(runs) == 3  # the seventh op was not checked yet
    interlude.finish()
    assert len(runs) == 3  # it just ran
    idle = Interlude(1 << 62, lambda: runs.append(0))
    idle.finish()
    assert len(runs) == 4  # no region ever reached it: the check after timing still runs
