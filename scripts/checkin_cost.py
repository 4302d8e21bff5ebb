"""What a size's check-in costs, side by side with a control barrier and a small timed op.

Every size starts with one check-in through the rendezvous store (commbench/coordination/store.py),
outside the timed region. This runs N local gloo ranks through the real start-up path
(TorchDistBackend.create: store, join, process group) and times, in the same run:
  - check-ins (one per size in a sweep),
  - control barriers (one opens every timed region anyway),
  - sync all_reduce ops of 1 KiB (what a small size's timed loop repeats --iters times),
and prints each one's median and the ratios. Usage: python scripts/checkin_cost.py [--nproc 2] [--repeats 200]
"""

import argparse
import multiprocessing as mp
import os
import statistics
import time

import torch


def _rank(rank: int, world_size: int, port: int, repeats: int, results) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    from commbench.backends.base import CollectiveArgs
    from commbench.backends.torch_dist import TorchDistBackend
    from commbench.coordination import Rendezvous

    rendezvous = Rendezvous(rank, world_size, "127.0.0.1", port)
    backend = TorchDistBackend.create("gloo", torch.device("cpu"), rendezvous, 60.0)
    buffer = torch.zeros(256)
    args = CollectiveArgs(input=buffer, output=buffer)

    def median_us(action) -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter_ns()
            action()
            samples.append((time.perf_counter_ns() - started) / 1e3)
        return statistics.median(samples)

    steps = iter(range(10**9))
    measured = {
        "check-in": median_us(lambda: backend.check_in("size", f"s{next(steps)}")),
        "barrier": median_us(backend.barrier),
        "all_reduce 1 KiB": median_us(lambda: backend.all_reduce(args)),
    }
    backend.barrier()
    results.put((rank, measured))
    backend.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=200)
    options = parser.parse_args()
    from commbench.running.spawn import free_port

    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    procs = [context.Process(target=_rank, args=(rank, options.nproc, port, options.repeats, results))
             for rank in range(options.nproc)]
    for proc in procs:
        proc.start()
    by_rank = dict(results.get(timeout=300) for _ in procs)
    for proc in procs:
        proc.join()
    measured = by_rank[0]
    print(f"{options.nproc} gloo ranks on this host, median of {options.repeats} on rank 0:")
    for name, value in measured.items():
        print(f"  {name:<18} {value:9.1f} µs")
    print(f"check-in / barrier          = {measured['check-in'] / measured['barrier']:.2f}")
    print(f"check-in / all_reduce 1 KiB = {measured['check-in'] / measured['all_reduce 1 KiB']:.2f}")


if __name__ == "__main__":
    main()
