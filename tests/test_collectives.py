"""The registry: buffer shapes for a size and world size, and nccl-tests' bus-bandwidth factors."""

import pytest
import torch

from commbench.collectives import REGISTRY, Layout, resolve_collectives
from commbench.errors import UsageError
from commbench.runner import plan_sizes

NCCL_TESTS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "reduce_scatter_base": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_gather_base": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "all_to_all_single": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


def test_every_collective_the_issue_names_is_registered():
    assert set(REGISTRY) == {*NCCL_TESTS_FACTORS, "barrier"}


@pytest.mark.parametrize("name", sorted(NCCL_TESTS_FACTORS))
@pytest.mark.parametrize("n", range(2, 9))
def test_busbw_factor_matches_nccl_tests(name, n):
    assert REGISTRY[name].busbw_factor(n) == pytest.approx(NCCL_TESTS_FACTORS[name](n))


def _numel(part):
    if part is None:
        return 0
    if isinstance(part, list):
        return sum(t.numel() for t in part)
    return part.numel()


@pytest.mark.parametrize("name", sorted(NCCL_TESTS_FACTORS))
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_size_is_the_larger_buffer(name, world_size):
    collective = REGISTRY[name]
    count, used = collective.plan(64 * 1024, world_size, 4)
    root_buffers = collective.build(Layout(count, world_size, 0, 0, torch.float32, torch.device("cpu")))
    larger = max(_numel(root_buffers.input), _numel(root_buffers.output))
    assert larger * 4 == used
    assert used <= 64 * 1024 and 64 * 1024 - used < 4 * collective.shards(world_size)


def test_flat_and_list_layouts():
    layout = Layout(5, 3, 1, 0, torch.float32, torch.device("cpu"))
    rs = REGISTRY["reduce_scatter_base"].build(layout)
    assert rs.input.shape == (15,) and rs.output.shape == (5,)
    ag = REGISTRY["all_gather_base"].build(layout)
    assert ag.input.shape == (5,) and ag.output.shape == (15,)
    lists = REGISTRY["all_gather"].build(layout)
    assert len(lists.output) == 3 and all(t.shape == (5,) for t in lists.output)
    gather = REGISTRY["gather"].build(layout)
    assert gather.output is None  # only the root holds the gathered chunks
    scatter = REGISTRY["scatter"].build(layout)
    assert scatter.input is None


def test_send_recv_pairs_ranks_and_leaves_an_odd_rank_out():
    peers = [REGISTRY["send_recv"].build(Layout(1, 3, rank, 0, torch.float32, torch.device("cpu"))).peer
             for rank in range(3)]
    assert peers == [1, 0, None]


def test_plan_rounds_down_and_says_so():
    planned, notes = plan_sizes(REGISTRY["reduce_scatter_base"], [1000, 1024, 4, 1001], 3, "float32")
    assert [(p.requested, p.used, p.count_per_rank) for p in planned] == [(1000, 996, 83), (1024, 1020, 85)]
    text = " ".join(notes)
    assert "1000 B -> 996 B" in text and "multiple of 12 B" in text
    assert "skipped sizes below 12 B: 4 B" in text
    assert "1001 B rounded onto a size already measured" in text


def test_plan_leaves_valid_sizes_alone():
    planned, notes = plan_sizes(REGISTRY["all_reduce"], [1024, 2048], 3, "bfloat16")
    assert [(p.used, p.count_per_rank) for p in planned] == [(1024, 512), (2048, 1024)]
    assert notes == []


def test_resolve_collectives():
    assert resolve_collectives("all_reduce, broadcast,all_reduce") == ["all_reduce", "broadcast"]
    assert resolve_collectives("all") == list(REGISTRY)
    with pytest.raises(UsageError, match="did you mean reduce_scatter_base"):
        resolve_collectives("reduce_scater_base")
