"""The memory-window step of scripts/gpu_check.sh: what commbench counts for an async window against
what the allocator really grew, the cache emptied after a size, and the default budget's source.

    python scripts/gpu_memory_check.py [--device cuda|cpu]

On CUDA (NCCL, one rank): a window of list all_gathers grows the allocator by no more than commbench's
count of torch's temporaries; after a 256 MiB size and Backend.free_cached_memory nothing stays
reserved; the default budget comes from cudaMemGetInfo. On CPU (gloo, one rank, small sizes) the same
calls run through the same objects, so a change to them fails here and not first on a GPU; the
allocator's figures exist on CUDA only and are not asserted there.
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # noqa: E402 - run from a checkout

from commbench.backends.base import CollectiveArgs  # noqa: E402
from commbench.backends.torch_dist import TorchDistBackend  # noqa: E402
from commbench.config.sweep import RunConfig  # noqa: E402
from commbench.coordination import Rendezvous  # noqa: E402
from commbench.core.groups import Membership, world_plan  # noqa: E402
from commbench.measure.collectives import REGISTRY, Layout  # noqa: E402
from commbench.measure.planning import PlannedSize, SizeLimits, TablePlan, memory_need  # noqa: E402
from commbench.running.rank import memory_budget  # noqa: E402
from commbench.running.runner import SizePoint, measure_size  # noqa: E402
from commbench.running.spawn import free_port  # noqa: E402
from commbench.writers.output import NullOutput  # noqa: E402

WINDOW = 4


def window_growth(backend: TorchDistBackend, device: torch.device, count: int) -> None:
    """A window of WINDOW async list all_gathers: the allocator's growth beside the buffers against
    commbench's count of the temporaries each op in flight holds."""
    collective = REGISTRY["all_gather"]
    size = PlannedSize(count * 4, count * 4, count)
    need = memory_need(collective, size, SizeLimits(1, "float32", device=device.type))
    buffers = collective.build(Layout(count, 1, 0, 0, torch.float32, device))
    args = CollectiveArgs(async_op=True, **buffers.call_options())
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    for _ in range(WINDOW):
        backend.all_gather(args)
    backend.complete(args)
    predicted = need.temporary * WINDOW
    if not cuda:
        print(f"a window of {WINDOW} list all_gathers ran; commbench counts {predicted >> 10} KiB of "
              f"temporaries ({need.temporary >> 10} KiB per op in flight); the allocator's growth is "
              "measured on CUDA only")
        return
    grown = torch.cuda.max_memory_allocated() - before
    print(f"a window of {WINDOW} list all_gathers: allocator grew {grown >> 20} MiB beside the buffers, "
          f"predicted {predicted >> 20} MiB ({need.temporary >> 20} MiB per op in flight)")
    assert grown <= predicted * 1.02 + (8 << 20), "torch allocated more than commbench counts"


def cache_emptied(backend: TorchDistBackend, count: int) -> None:
    """One all_reduce size measured through the runner, then the cache emptied."""
    config = RunConfig(collectives=["all_reduce"], sizes=[count * 4], iters=3, warmup=1)
    table = TablePlan(REGISTRY["all_reduce"], "float32", "sum", [PlannedSize(count * 4, count * 4, count)])
    point = SizePoint(config, backend, table, table.sizes[0], Membership(world_plan(1), None, 0))
    (row,) = measure_size(point, NullOutput())
    assert not row.error and row.samples, row.error
    backend.free_cached_memory()
    if backend.device.type != "cuda":
        print(f"all_reduce at {count * 4 >> 10} KiB measured through the runner: {row.samples} samples")
        return
    reserved = torch.cuda.memory_reserved()
    print(f"after a {count * 4 >> 20} MiB size and the cache emptied: {reserved >> 20} MiB reserved")
    assert reserved < (64 << 20), "the allocator kept the size's buffers cached"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    device_type = parser.parse_args().device
    cuda = device_type == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    backend = TorchDistBackend.create("nccl" if cuda else "gloo", device,
                                      Rendezvous(0, 1, "127.0.0.1", free_port()), 120.0)
    try:
        budget = memory_budget(backend, ["here"])
        assert budget is not None, "no default memory budget"
        print("default budget:", budget.describe())
        if cuda:
            assert "cudaMemGetInfo" in budget.describe(), budget
        count = (64 << 20) if cuda else (64 << 10)  # float32: 256 MiB chunks on CUDA, 256 KiB on CPU
        window_growth(backend, device, count)
        cache_emptied(backend, count)
    finally:
        backend.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
