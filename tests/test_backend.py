"""The torch.distributed backend on a real 2- and 3-rank gloo group, including its older-torch fallbacks."""

import pytest
import torch

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend
from tests.dist_helpers import run_ranks

pytestmark = pytest.mark.processes


def _flat_paths(rank: int, world_size: int, use_fallback: bool) -> tuple[list[float], list[float]]:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    if use_fallback:  # what a torch without the flat APIs gets
        backend._reduce_scatter_flat = None
        backend._all_gather_flat = None
    source = torch.arange(world_size * 2, dtype=torch.float32) + rank
    shard = torch.empty(2)
    backend.reduce_scatter_base(CollectiveArgs(input=source, output=shard))
    gathered = torch.empty(world_size * 2)
    args = CollectiveArgs(input=torch.full((2,), float(rank)), output=gathered, async_op=True)
    backend.all_gather_base(args)
    assert len(args.wait_list) == 1
    backend.complete(args)
    assert args.wait_list == []
    return shard.tolist(), gathered.tolist()


@pytest.mark.parametrize("use_fallback", [False, True], ids=["flat", "list-fallback"])
def test_flat_collectives_and_their_fallbacks(use_fallback):
    world_size = 3
    results = run_ranks(_flat_paths, world_size, use_fallback)
    rank_sum = sum(range(world_size))
    for rank, (shard, gathered) in enumerate(results):
        expected_shard = [world_size * (2 * rank + i) + rank_sum for i in range(2)]
        assert shard == expected_shard
        assert gathered == [float(r) for r in range(world_size) for _ in range(2)]


def _control_plane(rank: int, world_size: int) -> tuple:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    floats = backend.all_gather_floats([rank * 1.5, -rank])
    objects = backend.all_gather_object({"rank": rank})
    chosen = backend.broadcast_object(f"from {rank}", root=1)
    return floats, objects, chosen


def test_control_plane_helpers():
    results = run_ranks(_control_plane, 2)
    for floats, objects, chosen in results:
        assert floats == [[0.0, 0.0], [1.5, -1.0]]
        assert objects == [{"rank": 0}, {"rank": 1}]
        assert chosen == "from 1"


def _pairwise_exchange(rank: int, world_size: int) -> list[float] | None:
    from commbench.measure.collectives import REGISTRY, Layout

    backend = TorchDistBackend("gloo", torch.device("cpu"))
    buffers = REGISTRY["send_recv"].build(Layout(4, world_size, rank, 0, torch.float32, torch.device("cpu")))
    buffers.input.fill_(rank)
    buffers.output.fill_(-1)
    backend.send_recv(CollectiveArgs(input=buffers.input, output=buffers.output, peer=buffers.peer))
    return buffers.output.tolist()


def test_send_recv_exchanges_between_pairs():
    assert run_ranks(_pairwise_exchange, 3) == [[1.0] * 4, [0.0] * 4, [-1.0] * 4]
