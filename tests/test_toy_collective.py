"""Adding a collective is one descriptor in one place (docs/architecture.md): a toy one, registered the way
the families register theirs, runs through the real sweep, --check included, on real gloo ranks."""

import pytest
import torch

from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import resolve, run_config
from commbench.measure.collectives.base import Buffers, Collective, Expected, Layout, register, unit_factor
from commbench.running.runner import run_sweep
from commbench.writers.output import NullOutput
from tests.dist_helpers import run_ranks

pytestmark = pytest.mark.processes


def reverse_ring_buffers(layout: Layout) -> Buffers:
    n = layout.world_size
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank),
                   send_peer=(layout.rank - 1) % n, recv_peer=(layout.rank + 1) % n)


def from_next_rank(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [Expected(buffers.output, buffers.recv_peer, 0, 0)]


# The whole of a new collective: its buffers, what --check expects, how it is issued, its factor.
REVERSE_RING = Collective(
    name="reverse_ring", summary="every rank sends to rank-1 and receives from rank+1",
    issue=lambda backend, args: backend.p2p(args),
    build=reverse_ring_buffers, expect=from_next_rank, busbw_factor=unit_factor)


def _sweep_the_toy(rank: int, world_size: int) -> list[tuple]:
    register(REVERSE_RING)  # in this rank's process only: the test process's registry stays as shipped
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    config = resolve(run_config(collectives=["reverse_ring"], sizes=[1024, 4096], iters=3, warmup=1,
                                modes=["sync", "async"], check=True, backend="gloo", device="cpu"))
    rows = run_sweep(config, backend, NullOutput())
    return [(row.collective, row.size_bytes, row.mode, row.wrong, row.error, row.samples) for row in rows]


def test_a_registered_toy_collective_runs_and_checks_through_the_sweep():
    rows = run_ranks(_sweep_the_toy, 3)[0]
    assert [(name, size, mode) for name, size, mode, *_ in rows] == [
        ("reverse_ring", 1024, "sync"), ("reverse_ring", 1024, "async"),
        ("reverse_ring", 4096, "sync"), ("reverse_ring", 4096, "async")]
    assert all(wrong == 0 and error == "" and samples > 0 for *_, wrong, error, samples in rows)
