"""The sampler's rules (measure/sampling.py's docstring) on a real gloo group of one rank in this process:
no process starts, so each rule is judged in milliseconds, and every call still goes through
torch.distributed as on any rank (rank 0 decides and broadcasts). What only several ranks show (rank 0
deciding for the others) is tests/test_sampling.py's, on real groups of two."""

import math
import time

import pytest
import torch
import torch.distributed as dist

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend
from commbench.measure.collectives import REGISTRY
from commbench.measure.sampling import (
    ASYNC_WINDOWS,
    Interlude,
    Sampled,
    SamplingPolicy,
    Split,
    collect,
    warm_up_for,
    window_ops,
)
from commbench.measure.timing import BoundOp

NO_LIMIT = 1 << 62


@pytest.fixture(scope="module")
def one_rank():
    """A gloo group of one rank in this process, closed after the module's tests."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield TorchDistBackend("gloo", torch.device("cpu"))
    finally:
        dist.destroy_process_group()


def _op(backend: TorchDistBackend, delay: float = 0.0) -> BoundOp:
    """An all_reduce of 64 floats, each op ``delay`` seconds longer."""
    buffer = torch.zeros(64)
    issue = REGISTRY["all_reduce"].issue

    def slowed(backend: TorchDistBackend, args: CollectiveArgs) -> None:
        if delay:
            time.sleep(delay)
        issue(backend, args)

    return BoundOp(backend, CollectiveArgs(input=buffer, output=buffer), slowed)


# Precise at once: any interval is within it. A finite bound, even 10x the median, failed under load, when
# one of a row's six microsecond samples was descheduled for milliseconds and more samples were taken.
ANY_WIDTH = math.inf


def _policy(**changes) -> SamplingPolicy:
    values = dict(fixed_iters=None, time_per_size=60.0, min_iters=5, max_iters=1000, precision=0.05, warmup=5)
    values.update(changes)
    return SamplingPolicy(**values)


def _samples(sampled: Sampled) -> int:
    (seconds,) = sampled.per_rank_seconds  # one rank
    assert len(sampled.per_rank_arrivals[0]) == len(seconds) == len(sampled.per_rank_host_seconds[0])
    return len(seconds)


def test_fixed_iters_time_exactly_that_many_ops_one_sample_each_in_sync_one_window_in_async(one_rank):
    policy = _policy(fixed_iters=7, warmup=2)
    op = _op(one_rank)
    assert warm_up_for(op, policy, 0.25) == (2, 0.25)  # fixed: --warmup ops, the probe's time kept
    sync = collect(op, "sync", policy, 0.25)
    assert (sync.ops, _samples(sync)) == (7, 7)
    op.args.async_op = True
    window = collect(op, "async", policy, 0.25)
    assert (window.ops, _samples(window)) == (7, 1)
    assert all(value > 0 for value in sync.slowest + window.slowest)


def test_an_interlude_cuts_the_timed_ops_into_regions_and_runs_between_them(one_rank):
    op = _op(one_rank)
    ran = []
    interlude = Interlude(3, lambda: ran.append(len(ran)))
    sync = collect(op, "sync", _policy(fixed_iters=7), 0.0, interlude=interlude)
    assert (sync.ops, _samples(sync)) == (7, 7) and len(ran) == 2 and interlude.since == 1
    interlude = Interlude(3, lambda: ran.append(len(ran)))
    windows = collect(op, "async", _policy(fixed_iters=7), 0.0, interlude=interlude)
    assert (windows.ops, _samples(windows)) == (7, 3)  # windows of 3, 3 and 1 ops
    assert len(ran) == 4 and interlude.since == 1


def test_the_memory_budget_caps_async_windows_only(one_rank):
    op = _op(one_rank)
    capped = collect(op, "async", _policy(fixed_iters=10), 0.0, max_window=4)
    assert (capped.ops, _samples(capped)) == (10, 3)  # 4, 4 and 2 ops
    sync = collect(op, "sync", _policy(fixed_iters=10), 0.0, max_window=4)
    assert (sync.ops, _samples(sync)) == (10, 10)


@pytest.mark.parametrize("changes, samples", [
    (dict(), 6),  # the fewest with a median interval
    (dict(min_iters=9), 9),  # --min-iters above that
    (dict(max_iters=4), 4),  # an explicit --max-iters below it wins
])
def test_precise_enough_at_once_an_adaptive_row_takes_its_fewest_samples(one_rank, changes, samples):
    sampled = collect(_op(one_rank), "sync", _policy(precision=ANY_WIDTH, **changes), 0.0)
    assert (sampled.ops, _samples(sampled)) == (samples, samples)


def test_never_precise_enough_an_adaptive_row_stops_at_max_iters(one_rank):
    sampled = collect(_op(one_rank), "sync", _policy(precision=1e-12, max_iters=40), 0.0)
    assert (sampled.ops, _samples(sampled)) == (40, 40)


def test_never_precise_enough_an_adaptive_row_stops_when_its_time_is_spent(one_rank):
    """2 ms ops and 0.1 s: no more than about 50 ops, and never fewer than the six an interval needs."""
    sampled = collect(_op(one_rank, delay=0.002), "sync", _policy(precision=1e-12, time_per_size=0.1), 0.0)
    assert 6 <= sampled.ops == _samples(sampled) <= 50
    assert sum(sampled.slowest) <= 0.1 + 0.05  # at most one sample past the budget


def test_adaptive_async_windows_hold_a_tenth_of_the_affordable_ops(one_rank):
    op = _op(one_rank)
    # 1 ms ops and 0.5 s afford 500: windows of 50, six of them (precise at once)
    sampled = collect(op, "async", _policy(precision=ANY_WIDTH, time_per_size=0.5), 0.001)
    assert (sampled.ops, _samples(sampled)) == (300, 6)
    # never precise: --max-iters 60 is windows of 6, ten of them
    sampled = collect(op, "async", _policy(precision=1e-12, max_iters=60), 0.0)
    assert (sampled.ops, _samples(sampled)) == (60, 10)
    capped = collect(op, "async", _policy(precision=ANY_WIDTH, time_per_size=0.5), 0.001, max_window=7)
    assert (capped.ops, _samples(capped)) == (42, 6)
    ran = []
    checked = collect(op, "async", _policy(precision=ANY_WIDTH, time_per_size=0.5), 0.001,
                      interlude=Interlude(5, lambda: ran.append(1)))
    assert (checked.ops, _samples(checked)) == (30, 6) and len(ran) == 6


def test_adaptive_warm_up_stops_at_once_for_a_slow_probe_and_after_a_steady_op(one_rank):
    op = _op(one_rank, delay=0.001)
    assert warm_up_for(op, _policy(time_per_size=0.5), 1.0) == (0, 1.0)  # the probe was warm-up enough
    assert warm_up_for(op, _policy(warmup=0), 1e-6) == (0, 1e-6)
    ran, latest = warm_up_for(op, _policy(warmup=3), 1e-6)
    # an op of a millisecond or more is no faster than the probe's microsecond: steady after one
    assert ran == 1 and latest >= 0.001


def test_a_window_is_a_tenth_of_the_ops_the_time_affords_within_its_caps():
    policy = _policy(time_per_size=0.5, max_iters=1000)
    assert ASYNC_WINDOWS == 10
    assert window_ops(policy, 0.001, NO_LIMIT) == 50
    assert window_ops(policy, 0.0015, NO_LIMIT) == 34  # 333 affordable: a tenth, rounded up
    assert window_ops(policy, 0.0, NO_LIMIT) == 100  # no time known: --max-iters affords
    assert window_ops(policy, 0.0001, NO_LIMIT) == 100  # 5,000 affordable, --max-iters 1,000
    assert window_ops(policy, 10.0, NO_LIMIT) == 1  # not one op affordable: still one
    assert window_ops(policy, 0.001, 7) == 7


def test_a_region_is_capped_by_the_interlude_and_in_async_by_the_memory_budget():
    policy = _policy()
    assert Split("sync", policy).largest() == NO_LIMIT
    assert Split("sync", policy, Interlude(5, print)).largest() == 5
    assert Split("sync", policy, None, 3).largest() == NO_LIMIT
    assert Split("async", policy, None, 3).largest() == 3
    assert Split("async", policy, Interlude(5, print), 8).largest() == 5
    assert Split("async", policy, Interlude(5, print), 2).largest() == 2


def test_a_sample_of_several_ranks_lasts_as_long_as_its_slowest():
    sampled = Sampled([[1.0, 5.0], [3.0, 2.0]], 2)
    assert sampled.slowest == [3.0, 5.0]


# --- the rules at their edges, and what collect hands on ---------------------------------------------

def test_warm_up_may_take_exactly_its_share_and_ends_when_the_latest_op_stopped_falling():
    from commbench.measure.sampling import warming_done

    # --time-per-size 10: the share is 2 s; a probe of 1 s and an op of 0.5 s, one more at 0.5 s makes
    # exactly 2 s (not past it), and the op fell by half: warm-up goes on
    assert warming_done([1.0, 0.5], _policy(time_per_size=10.0)) is False
    assert warming_done([1.0, 0.5, 0.5], _policy(time_per_size=10.0)) is True  # 2.5 s: past the share
    roomy = _policy(time_per_size=100.0)
    assert warming_done([1.0, 0.9], roomy) is True  # exactly 10% faster than the op before: steady
    assert warming_done([1.0, 0.89], roomy) is False
    assert warming_done([1.0, 0.9, 0.5], roomy) is False  # the latest op, not the first after the probe


def test_adaptive_warm_up_reports_the_latest_op_s_own_time(one_rank):
    ran, latest = warm_up_for(_op(one_rank, delay=0.001), _policy(warmup=3), 1e-6)
    assert 1 <= ran <= 3 and 0.001 <= latest < 1.0  # the op's seconds, not a clock reading


def test_on_cpu_a_sample_s_host_seconds_are_the_sample_and_arrivals_are_apart(one_rank):
    sampled = collect(_op(one_rank, delay=0.001), "sync", _policy(fixed_iters=5), 0.0)
    (seconds,), (host,), (arrivals,) = (sampled.per_rank_seconds, sampled.per_rank_host_seconds,
                                        sampled.per_rank_arrivals)
    assert list(host) == list(seconds)
    # each op arrives after the ones before it have taken their milliseconds
    assert all(later - earlier >= 0.001 for earlier, later in zip(arrivals, arrivals[1:], strict=False))


def test_a_fixed_barrier_opens_every_op_only_when_the_policy_asks(one_rank):
    class CountingBarriers(TorchDistBackend):
        barriers = 0

        def barrier(self) -> None:
            CountingBarriers.barriers += 1
            super().barrier()

    backend = CountingBarriers("gloo", torch.device("cpu"))
    for per_iter, barriers in ((False, 1), (True, 1 + 4)):
        CountingBarriers.barriers = 0
        collect(_op(backend), "sync", _policy(fixed_iters=4, barrier_per_iter=per_iter), 0.0)
        assert CountingBarriers.barriers == barriers


def test_adaptive_sync_samples_are_single_synchronous_ops_judged_on_their_seconds(one_rank, monkeypatch):
    from commbench.measure import sampling

    asked, answers = [], [1, 0]  # after the fewest samples: one more, then stop

    def next_batch(samples, taken, most, ops_per_sample, policy):
        asked.append((list(samples), taken, ops_per_sample))
        return answers.pop(0)

    monkeypatch.setattr(sampling, "next_batch", next_batch)
    op = _op(one_rank)
    issued = []
    issue = op.issue

    def recording(backend, args):
        issued.append(args.async_op)
        issue(backend, args)

    op = BoundOp(one_rank, op.args, recording)
    sampled = collect(op, "sync", _policy(), 0.0)
    (seconds,) = sampled.per_rank_seconds
    assert (sampled.ops, len(seconds)) == (7, 7)  # 6, then the batch of one
    assert issued == [False] * 7  # each op synchronous, none in an async window
    assert [(taken, ops) for _, taken, ops in asked] == [(6, 1), (7, 1)]
    assert asked[0][0] == list(seconds[:6]) and asked[1][0] == list(seconds)  # the seconds, not arrivals


def test_a_cuda_graph_row_is_the_replays_of_its_graph(one_rank, monkeypatch):
    """The graph's timing needs a GPU; what collect makes of it does not."""
    from commbench.measure import sampling
    from commbench.measure.timing import TimedRegion

    graphs = []

    def time_cuda_graph(op, ops, replays):
        graphs.append((op, ops, replays))
        return TimedRegion([0.5 * (k + 1) for k in range(replays)], [0.25] * replays, [0.75] * replays)

    monkeypatch.setattr(sampling, "time_cuda_graph", time_cuda_graph)
    op = _op(one_rank)
    for fixed, ops in ((None, 20), (8, 8)):
        graphs.clear()
        sampled = collect(op, "sync", _policy(fixed_iters=fixed, cuda_graph_replays=3), 0.0)
        assert graphs == [(op, ops, 3)]
        assert sampled.ops == ops * 3
        assert [list(values[0]) for values in (sampled.per_rank_seconds, sampled.per_rank_arrivals,
                                               sampled.per_rank_host_seconds)] == [
            [0.5, 1.0, 1.5], [0.25] * 3, [0.75] * 3]


def test_a_batch_stops_when_the_interval_is_exactly_the_precision_and_counts_on_without_a_median():
    from commbench.measure.sampling import next_batch

    # six samples: the median's 95% interval is the smallest to the largest (P(Bin(6, 1/2) = 0) = 1/64
    # <= 2.5% < P(<= 1) = 7/64), here [1, 3] about a median of 1: a half-width of exactly 1.0 x the median
    samples = [1.0, 1.0, 1.0, 1.0, 1.0, 3.0]
    assert next_batch(samples, 6, 1000, 1, _policy(precision=1.0, time_per_size=1e6)) == 0
    assert next_batch(samples, 6, 1000, 1, _policy(precision=0.99, time_per_size=1e6)) > 0
    # times of 0 (a clock too coarse for the op) have no relative interval and cost no time: as many
    # again as were taken
    assert next_batch([0.0] * 6, 6, 1000, 1, _policy()) == 6
