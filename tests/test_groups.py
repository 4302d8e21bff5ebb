"""Sub-communicators (layouts, host presets, real groups on 4 gloo ranks) and the per-rank report."""

import json
import time

import pytest
import torch

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import resolve, run_config
from commbench.core.groups import Membership, split_by_hosts, split_world
from commbench.core.sizes import parse_sizes
from commbench.errors import UsageError
from commbench.measure.stats import arrival_skews, last_to_arrive
from commbench.running.runner import Session, run_sweep
from commbench.writers.console import straggler_line
from commbench.writers.output import NullOutput
from tests.dist_helpers import commbench, run_ranks

# --- plans ------------------------------------------------------------------------------------

def test_contiguous_and_strided_layouts():
    assert split_world(8, 4, "contiguous").members == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert split_world(8, 4, "strided").members == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert split_world(6, 2, "strided").members == ((0, 3), (1, 4), (2, 5))
    plan = split_world(8, 2, "strided")
    assert (plan.size, plan.count) == (2, 4)
    assert (plan.group_of(5), plan.group_rank(5)) == (1, 1)
    assert split_world(4, 4, "strided").is_world


@pytest.mark.parametrize("world, size, message", [
    (6, 4, "--group-size 4 does not divide the world of 6 ranks: choose one of 2, 3, 6"),
    (4, 1, "a group needs at least 2 ranks"),
])
def test_group_sizes_that_cannot_work(world, size, message):
    with pytest.raises(UsageError, match=message):
        split_world(world, size)


def test_host_presets():
    hosts = ["a", "a", "b", "b", "c", "c"]
    assert split_by_hosts(hosts, "intra-node").members == ((0, 1), (2, 3), (4, 5))
    assert split_by_hosts(hosts, "inter-node").members == ((0, 2, 4), (1, 3, 5))
    # ranks of a host need not be consecutive
    assert split_by_hosts(["a", "b", "a", "b"], "intra-node").members == ((0, 2), (1, 3))
    assert split_by_hosts(["a", "b", "a", "b"], "inter-node").members == ((0, 1), (2, 3))
    assert split_by_hosts(["a", "a"], "intra-node").is_world  # one host: the world is the group


def test_group_ranks_are_numbered_as_torch_numbers_them():
    # torch's new_group sorts the ranks it is given: group rank 0 is the lowest global rank, so a root
    # or a send_recv partner named by group rank must be counted the same way
    plan = split_by_hosts(["a", "b", "b", "a"], "inter-node")  # a: 0, 3; b: 1, 2
    assert plan.members == ((0, 1), (2, 3))
    assert (plan.group_rank(3), plan.group_rank(2)) == (1, 0)
    assert all(list(ranks) == sorted(ranks) for ranks in split_world(12, 4, "strided").members)


@pytest.mark.parametrize("hosts, preset, message", [
    (["a", "a", "b"], "intra-node", r"different numbers of ranks \(a: 2, b: 1\)"),
    (["a", "b"], "intra-node", "every host runs one rank"),
    (["a", "a"], "inter-node", "all 2 ranks run on one host"),
])
def test_inconsistent_presets_are_named(hosts, preset, message):
    with pytest.raises(UsageError, match=message):
        split_by_hosts(hosts, preset)


@pytest.mark.parametrize("changes, message", [
    ({"group_layout": "strided"}, "--group-layout strided needs --group-size"),
    ({"group_layout": "diagonal", "group_size": 2}, "unknown --group-layout 'diagonal'"),
    ({"groups": "intra-node", "group_size": 2}, "drop --group-size"),
    ({"groups": "per-socket"}, "unknown --groups 'per-socket'"),
    ({"skew_threshold_percent": -1.0}, "--skew-threshold -1 must not be negative"),
])
def test_group_options_are_checked_before_anything_starts(changes, message):
    with pytest.raises(UsageError, match=message):
        resolve(run_config(sizes=[1024], **changes))


# --- statistics -------------------------------------------------------------------------------

def test_arrival_skew_is_taken_within_each_group():
    arrivals = [[0.0, 10.0], [4.0, 12.0], [100.0, 200.0], [101.0, 203.0]]
    assert arrival_skews(arrivals) == [147.0, 144.0, 2.0, 0.0]
    grouped = arrival_skews(arrivals, [[0, 1], [2, 3]])
    assert grouped == [3.0, 0.0, 2.0, 0.0]
    assert last_to_arrive(grouped, [[0, 1], [2, 3]]) == 1  # its group waited longest


# --- real groups ------------------------------------------------------------------------------

def _all_reduce_in_groups(rank: int, world_size: int) -> dict[str, list[float]]:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    sums = {}
    for layout in ("contiguous", "strided"):  # both sets of groups, on one world
        plan = split_world(world_size, 2, layout)
        group = backend.new_groups([list(ranks) for ranks in plan.members])
        value = torch.tensor([float(rank)])
        backend.all_reduce(CollectiveArgs(input=value, output=value, process_group=group))
        sums[layout] = value.tolist()
    return sums


@pytest.mark.processes
def test_groups_reduce_among_their_members_only():
    results = run_ranks(_all_reduce_in_groups, 4)
    assert [result["contiguous"] for result in results] == [[1.0], [1.0], [5.0], [5.0]]  # 0+1, 2+3
    assert [result["strided"] for result in results] == [[2.0], [4.0], [2.0], [4.0]]  # 0+2, 1+3


LATE_S = 0.015  # 3 ms lost to stalls of the other ranks on a loaded CI runner (rank 0 came out last)


class SlowToFinishBackend(TorchDistBackend):
    """Rank 1 takes LATE_S longer to finish each op, so it arrives late at every next one."""

    def wait(self, args: CollectiveArgs) -> None:
        super().wait(args)
        if self.rank == 1:
            time.sleep(LATE_S)


def _sweep_with_a_straggler(rank: int, world_size: int) -> list:
    backend = SlowToFinishBackend("gloo", torch.device("cpu"))
    config = resolve(run_config(sizes=parse_sizes("1K,2K,4K"), iters=8, warmup=1))  # 3: a pattern
    plan = split_world(world_size, world_size)
    return run_sweep(config, backend, NullOutput(), Session(Membership(plan, None, rank)))


@pytest.mark.processes
def test_a_slow_rank_is_found_by_its_arrival_skew():
    rows = run_ranks(_sweep_with_a_straggler, 3)[0]
    for row in rows:
        assert row.slowest_rank == 1
        assert row.rank_skew_us[1] < row.rank_skew_us[0] and row.rank_skew_us[1] < row.rank_skew_us[2]
        assert row.skew_us_max > LATE_S * 1e6 / 2  # LATE_S late on all but the first of 8 ops
        assert len(row.rank_mean_us) == 3
    line = straggler_line(rows, ["h0", "h1", "h2"], threshold_percent=10)
    assert line is not None and "rank 1 (h1) arrived last" in line
    assert straggler_line(rows, ["h0", "h1", "h2"], threshold_percent=1e6) is None


# --- the CLI ----------------------------------------------------------------------------------

@pytest.mark.processes
def test_strided_groups_end_to_end(tmp_path):
    json_path = tmp_path / "r.json"
    result = commbench("--collective", "all_reduce,broadcast,send_recv,reduce_scatter_base",
                       "--sizes", "4K", "--iters", "3", "--warmup", "1", "--nproc", "4",
                       "--group-size", "2", "--group-layout", "strided", "--root", "1", "--per-rank",
                       "--json", str(json_path), "--csv", str(tmp_path / "r.csv"))
    assert result.returncode == 0, result.stderr
    assert "world size 4 · 2 groups of 2 (strided)" in result.stdout
    assert "per rank · all_reduce · float32 · op sum" in result.stdout
    payload = json.loads(json_path.read_text())
    assert payload["meta"]["groups"] == {"layout": "strided", "size": 2, "count": 2,
                                         "members": [[0, 2], [1, 3]]}
    factors = {"all_reduce": 1.0, "broadcast": 1.0, "send_recv": 1.0, "reduce_scatter_base": 0.5}
    for row in payload["rows"]:
        assert (row["group_size"], row["group_layout"], row["group_count"]) == (2, "strided", 2)
        assert row["world_size"] == 4
        assert row["busbw_factor"] == factors[row["collective"]]  # n is the group size
        assert len(row["rank_mean_us"]) == len(row["rank_skew_us"]) == 4
        assert 0 <= row["slowest_rank"] < 4 and row["skew_us_max"] == max(row["rank_skew_us"])
    scatter = next(row for row in payload["rows"] if row["collective"] == "reduce_scatter_base")
    assert scatter["count_per_rank"] == 512  # 4 KiB split over a group of 2, not the world of 4


@pytest.mark.processes
def test_host_preset_that_does_not_fit_is_one_line(tmp_path):
    # Presets need every rank's host name, so this is found after the start; still one line, exit 2.
    result = commbench("--groups", "inter-node", "--sizes", "1K", "--output-dir", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--groups inter-node: all 2 ranks run on one host" in lines[0]
    assert not list(tmp_path.iterdir())


@pytest.mark.processes
@pytest.mark.parametrize("args, message", [
    (["--nproc", "3", "--group-size", "2"], "--group-size 2 does not divide the world of 3 ranks"),
    (["--nproc", "4", "--group-size", "2", "--root", "2"], "--root 2 is outside a group of 2 ranks"),
    (["--group-size", "1"], "--group-size 1: a group needs at least 2 ranks"),
])
def test_bad_groups_exit_2_before_any_rank_starts(args, message):
    result = commbench("--sizes", "1K", *args, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"commbench: error: {message}" or message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
