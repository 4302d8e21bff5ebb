"""commbench's timed loop against a bare torch.distributed loop, side by side in one process group.

For reduce_scatter_base and all_reduce at 1 KiB, 64 KiB and 4 MiB, rounds alternate a bare loop
(perf_counter around the torch.distributed call, nothing else) with commbench's own sync loop
(timing.time_sync through the backend, timers and wait list) on the same buffers. Per size it prints the
ratio commbench / raw of the median per-op time (each op's time is the max over ranks in both).
Targets on 2 gloo ranks: <= 1.02 at 64 KiB and above, <= 1.05 at 1 KiB.

    python scripts/bench_overhead.py [--ranks 2] [--rounds 9] [--ops 200]
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend
from commbench.collectives import REGISTRY, Layout
from commbench.launch import run_on_local_ranks
from commbench.stats import slowest_rank_per_iteration
from commbench.timing import time_sync, warm_up

SIZES = [1024, 64 * 1024, 4 * 1024 * 1024]
COLLECTIVES = ["reduce_scatter_base", "all_reduce"]


def _raw_call(name: str, buffers) -> object:
    """The plain torch.distributed call a user would write for this collective."""
    flat_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if name == "reduce_scatter_base":
        return lambda: flat_reduce_scatter(buffers.output, buffers.input)
    return lambda: dist.all_reduce(buffers.output)


def _raw_loop(call, ops: int) -> list[float]:
    seconds = [0.0] * ops
    dist.barrier()
    for index in range(ops):
        start = time.perf_counter_ns()
        call()
        seconds[index] = (time.perf_counter_ns() - start) * 1e-9
    return seconds


def _measure(rank: int, world_size: int, rounds: int, ops: int) -> dict:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    medians: dict = {}
    for name in COLLECTIVES:
        collective = REGISTRY[name]
        for size in SIZES:
            count, _ = collective.plan(size, world_size, 4)
            buffers = collective.build(Layout(count, world_size, rank, 0, torch.float32, torch.device("cpu")))
            for tensor in buffers.tensors():
                tensor.zero_()
            args = CollectiveArgs(input=buffers.input, output=buffers.output)
            call = getattr(backend, collective.method)
            raw = _raw_call(name, buffers)
            warm_up(call, backend, args, 20)
            raw_samples: list[float] = []
            ours_samples: list[float] = []
            for round_index in range(rounds):
                # alternate which loop goes first, so neither always runs on a warmer machine
                order = ("raw", "ours") if round_index % 2 == 0 else ("ours", "raw")
                for which in order:
                    if which == "raw":
                        local = _raw_loop(raw, ops)
                    else:
                        local = time_sync(call, backend, args, ops).seconds
                    slowest = slowest_rank_per_iteration(backend.all_gather_floats(local))
                    (raw_samples if which == "raw" else ours_samples).extend(slowest)
            medians[(name, size)] = (statistics.median(raw_samples), statistics.median(ours_samples))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=int, default=200)
    options = parser.parse_args()
    medians = run_on_local_ranks(_measure, options.ranks, options.rounds, options.ops)[0]
    print(f"{options.ranks} gloo ranks, {options.rounds} rounds x {options.ops} ops per loop, median per op")
    print(f"{'collective':<22}{'size':>10}{'raw µs':>12}{'commbench µs':>15}{'ratio':>9}{'target':>9}")
    for (name, size), (raw, ours) in medians.items():
        target = 1.05 if size < 64 * 1024 else 1.02
        ratio = ours / raw
        verdict = "ok" if ratio <= target else "OVER"
        print(f"{name:<22}{size:>10}{raw * 1e6:>12.1f}{ours * 1e6:>15.1f}{ratio:>9.3f}{target:>7.2f}"
              f" {verdict}")


if __name__ == "__main__":
    main()
