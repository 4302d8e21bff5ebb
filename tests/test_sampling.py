"""Adaptive iteration counts, the median's confidence interval, and what the timed loops include."""

import math
import random
import statistics
import time

import pytest
import torch

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import resolve, run_config
from commbench.measure.collectives import REGISTRY
from commbench.measure.sampling import SamplingPolicy, collect, next_batch, warm_up_for, warming_done
from commbench.measure.stats import ci95_rel, median_ci95, summarize
from commbench.measure.timing import BoundOp, time_async
from commbench.running.runner import run_sweep
from commbench.writers.output import NullOutput
from tests.dist_helpers import commbench, run_ranks


def _policy(**changes) -> SamplingPolicy:
    values = dict(fixed_iters=None, time_per_size=0.5, min_iters=5, max_iters=1000, precision=0.05)
    values.update(changes)
    return SamplingPolicy(**values)


def test_every_adaptive_row_gets_the_samples_a_95_percent_interval_needs():
    assert _policy().fewest() == 6  # --min-iters 5 is below the 6 the interval needs
    assert _policy(min_iters=30).fewest() == 30
    assert _policy(max_iters=4).fewest() == 4  # an explicit --max-iters below 6 wins
    # out of time after one sample, imprecise: the sixth still comes, however long ops take
    assert next_batch([2.0], taken=1, most=1000, ops_per_sample=1, policy=_policy()) == 5
    six = [2 * value for value in _spread(6, 0.5)]  # 12 s, ten times too wide
    assert next_batch(six, taken=6, most=1000, ops_per_sample=1, policy=_policy()) == 0


def _spread(count: int, relative: float) -> list[float]:
    """``count`` evenly spread samples with median 1.0 whose median interval is ``relative`` of it."""
    offsets = [2 * index / (count - 1) - 1 for index in range(count)]
    unit = ci95_rel([1.0 + 0.1 * offset for offset in offsets]) / 0.1
    return [1.0 + relative / unit * offset for offset in offsets]


def test_sampling_stops_once_the_median_is_known_to_the_precision_asked_for():
    policy = _policy(precision=0.05)
    precise = [1e-4] * 12
    assert next_batch(precise, taken=12, most=1000, ops_per_sample=1, policy=policy) == 0
    wide = [value * 1e-4 for value in _spread(12, 0.2)]
    assert next_batch(wide, taken=12, most=1000, ops_per_sample=1, policy=policy) == 12


def test_a_batch_asks_for_what_the_width_says_is_missing_within_the_time_left():
    policy = _policy(time_per_size=0.505, precision=0.05)
    wide = _spread(41, 0.3)  # six times too wide: wants 36 times the samples; at most doubles
    assert statistics.median(wide) == 1.0
    assert next_batch([value * 1e-4 for value in wide], 41, 1000, 1, policy) == 41
    # 41 ops of 10 ms (median and mean) took 0.41 s: time for 9.5 more
    assert next_batch([value * 1e-2 for value in wide], 41, 1000, 1, policy) == 9
    assert next_batch([value * 1.25e-2 for value in wide], 41, 1000, 1, policy) == 0  # the time is spent
    assert next_batch([value * 1e-4 for value in wide], 41, 50, 1, policy) == 9  # --max-iters
    # async windows of 10 ops of 1 ms: a sample costs ten ops' time
    assert next_batch([value * 1e-3 for value in wide], 41, 1000, 10, policy) == 9
    nearly = [1e-4 * value for value in _spread(401, 0.06)]  # 1.2x too wide: 1.44 times the samples
    assert ci95_rel(nearly) == pytest.approx(0.06)
    # (0.06 / 0.05)^2 = 1.44 times 401 samples: 577.44, so 578 in all, 177 more
    assert next_batch(nearly, 401, 10_000, 1, policy) == 177
    # barely too wide: a quarter of what was taken, not a trickle of batches
    assert next_batch([1e-4 * value for value in _spread(401, 0.0505)], 401, 10_000, 1, policy) == 101


def test_a_slow_size_takes_no_samples_from_another():
    # Each size is judged on its own samples and time: what one took is no input to the next
    # (a single slow probe at 1 KiB once capped every larger size at --min-iters, issue 35).
    policy = _policy()
    fast = [value * 1e-4 for value in _spread(6, 0.5)]
    assert next_batch(fast, 6, 1000, 1, policy) == 6  # whatever ran before at other sizes


def test_warm_up_runs_until_the_time_stops_falling_or_its_share_is_spent():
    policy = _policy(time_per_size=0.5, warmup=5)  # a share of 0.1 s
    assert not warming_done([0.004], policy)  # the probe alone: warm up
    assert not warming_done([0.004, 0.002], policy)  # still falling by more than a tenth
    assert warming_done([0.004, 0.002, 0.0019], policy)  # within a tenth: steady
    assert warming_done([0.004, 0.002, 0.003], policy)  # slower: steady (noise, not warm-up)
    assert warming_done([0.6], policy)  # a 0.6 s op: the probe was warm-up enough
    assert warming_done([0.04, 0.03, 0.02], policy)  # still falling, but one more would pass 0.1 s
    assert warming_done([0.005, 0.004, 0.003, 0.002, 0.0015, 0.001], policy)  # --warmup 5 ran
    assert warming_done([0.004], _policy(warmup=0))


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
    assert summary.cv == pytest.approx(math.sqrt(32 / 7) / 5.0)
    assert summary.p99 == pytest.approx(9.0 - 0.07 * 2.0)
    assert summarize([3.0]).stdev == 0.0 and summarize([3.0]).ci95_rel is None


def _adaptive_counts(rank: int, world_size: int) -> dict:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    # Each rank is given a different policy: only rank 0's may decide, so all must still agree.
    policy = _policy(time_per_size=0.05, max_iters=60 if rank == 0 else 7, min_iters=3, precision=0.001,
                     warmup=3 if rank == 0 else 0)
    found = {}
    for size in (256, 4096, 65536, 1 << 20):
        buffer = torch.zeros(size // 4)
        args = CollectiveArgs(input=buffer, output=buffer)
        op = BoundOp(backend, args, REGISTRY["all_reduce"].issue)
        for mode in ("sync", "async"):
            args.async_op = mode == "async"
            # ranks whose own clocks and policies differ: the gathered times decide warm-up alike
            warmed, per_op = warm_up_for(op, policy, 0.001 * (rank + 1))
            sampled = collect(op, mode, policy, per_op)
            found[(size, mode)] = (warmed, sampled.ops, len(sampled.per_rank_seconds[0]))
    return found


@pytest.mark.processes
def test_adaptive_counts_are_decided_once_for_all_ranks():
    results = run_ranks(_adaptive_counts, 2)
    assert results[0] == results[1]  # same number of warm-up ops, ops and samples on every rank
    for (_, mode), (_, ops, samples) in results[0].items():
        assert ops <= 60  # rank 0's --max-iters; rank 1's 7 played no part...
        assert samples >= 6  # every row: the interval's samples, whatever rank 1's --max-iters says
        if mode == "sync":
            assert ops == samples
    assert any(ops > 7 for _, ops, _ in results[0].values())  # ...as this shows


class _OneSlowSizeBackend(TorchDistBackend):
    """gloo, except that every op at 1 KiB (256 float32 elements in) takes 150 ms longer on rank 1."""

    def wait(self, args: CollectiveArgs) -> None:
        super().wait(args)  # every completion, sync ops too, passes through wait()
        if self.rank == 1 and args.input is not None and args.input.numel() == 256:
            time.sleep(0.15)


def _sweep_after_a_slow_size(rank: int, world_size: int) -> list[tuple]:
    backend = _OneSlowSizeBackend("gloo", torch.device("cpu"))
    config = resolve(run_config(collectives=["all_reduce"], sizes=[1024, 4096, 16384], time_per_size=0.1,
                                backend="gloo", device="cpu"))
    return [(row.size_bytes, row.samples, row.ci95_rel) for row in run_sweep(config, backend, NullOutput())]


@pytest.mark.processes
def test_a_size_that_overruns_its_budget_starves_none_after_it():
    # Issue 35: one slow size once capped every larger size at --min-iters (5 samples, no interval).
    slow, *fast = run_ranks(_sweep_after_a_slow_size, 2)[0]
    assert slow[0] == 1024 and slow[1] == 6 and slow[2] is not None  # the fewest with an interval
    for size, samples, interval in fast:
        # 0.1 s at well under 10 ms per op, unless the interval was within 5% sooner
        assert samples > 6 or interval <= 0.05, (size, samples, interval)
        assert interval is not None


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
    (["--barrier", "per-iteration"], "unknown --barrier 'per-iteration' (did you mean per-iter?)"),
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
