"""Peak memory per rank of a large collective, against its buffers and against bare torch.

For all_gather_base, reduce_scatter_base and all_to_all_single at --size (default 1 GiB) on 2 local
gloo ranks, each measurement in fresh processes:

- baseline: a rank's resident memory once torch is imported and the process group has run a tiny op;
- commbench: the rank's peak resident memory after commbench measured the size (plan, allocate, fill,
  warm up, time, release), through the same runner code a sweep uses;
- bare torch: the peak of a plain program that allocates the same two buffers and calls the same
  torch.distributed function as often, nothing else.

Target: commbench peak - baseline <= 1.1 x the rank's input + output bytes, or, where the collective
itself needs more (bare torch's growth above that), <= 1.1 x bare torch's growth: what commbench adds
is judged, not what the backend needs. The bare-torch column shows what the collective itself needs
beyond its buffers (gloo copies through a temporary the size of the larger buffer for all-gather and
reduce-scatter; NCCL works in place on the device). Exit status 1 when a collective misses the target.

    python scripts/bench_memory.py [--size 1G] [--ranks 2]
"""

import argparse
import resource
import sys

import torch
import torch.distributed as dist

from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import RunConfig
from commbench.core.groups import Membership, world_plan
from commbench.core.sizes import format_size, parse_size
from commbench.measure.collectives import REGISTRY, Layout
from commbench.measure.planning import SizeLimits, TablePlan, buffer_bytes, plan_sizes
from commbench.running.runner import SizePoint, measure_size
from commbench.running.spawn import run_on_local_ranks
from commbench.writers.output import NullOutput

COLLECTIVES = ["all_gather_base", "reduce_scatter_base", "all_to_all_single"]
ITERS, WARMUP = 3, 1
TARGET = 1.1  # commbench's growth over the larger of the buffers and bare torch's growth


def _resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _bare_call(name: str):
    flat_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    flat_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return {
        "all_gather_base": lambda buffers: flat_gather(buffers.output, buffers.input),
        "reduce_scatter_base": lambda buffers: flat_scatter(buffers.output, buffers.input),
        "all_to_all_single": lambda buffers: dist.all_to_all_single(buffers.output, buffers.input),
    }[name]


def _measure(rank: int, world_size: int, name: str, size: int, bare: bool) -> dict:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    backend.all_gather_floats([0.0])  # the process group's own buffers belong to the baseline
    baseline = _resident_bytes()
    collective = REGISTRY[name]
    (planned,), _ = plan_sizes(collective, [size], SizeLimits(world_size, "float32"))
    if bare:
        buffers = collective.build(Layout(planned.count_per_rank, world_size, rank, 0, torch.float32,
                                          torch.device("cpu")))
        for tensor in buffers.tensors():
            tensor.zero_()
        call = _bare_call(name)
        for _ in range(ITERS + WARMUP + 1):
            call(buffers)
        del buffers
    else:
        config = RunConfig(collectives=[name], sizes=[size], iters=ITERS, warmup=WARMUP)
        point = SizePoint(config, backend, TablePlan(collective, "float32", "", [planned]), planned,
                          Membership(world_plan(world_size), None, rank))
        measure_size(point, NullOutput())
    return {"baseline": baseline, "peak": _peak_bytes(),
            "buffers": buffer_bytes(collective, planned, world_size, rank, "float32")}


def _worst(per_rank: list[dict]) -> tuple[int, int]:
    worst = max(per_rank, key=lambda found: found["peak"] - found["baseline"])
    return worst["peak"] - worst["baseline"], worst["buffers"]


def judge(commbench: int, bare: int, buffers: int) -> str:
    """PASS when commbench's growth is within 1.1x the buffers, or within 1.1x bare torch's larger one."""
    if commbench <= TARGET * buffers:
        return "PASS"
    if commbench <= TARGET * bare:
        return "PASS (the collective's own: bare torch grows as much)"
    return "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G")
    parser.add_argument("--ranks", type=int, default=2)
    options = parser.parse_args()
    size = parse_size(options.size)
    mib = 2**20
    print(f"{format_size(size)} on {options.ranks} gloo ranks: growth over the baseline, worst rank, MiB")
    print(f"{'collective':<21}{'buffers':>9}{'commbench':>11}{'ratio':>7}{'bare torch':>12}{'ratio':>7}"
          f"{'cb/bare':>9}  target: commbench <= {TARGET:.2f} x the larger of buffers and bare torch")
    verdicts = []
    for name in COLLECTIVES:
        ours, buffers = _worst(run_on_local_ranks(_measure, options.ranks, name, size, False))
        bare, _ = _worst(run_on_local_ranks(_measure, options.ranks, name, size, True))
        verdicts.append(judge(ours, bare, buffers))
        print(f"{name:<21}{buffers / mib:>9.0f}{ours / mib:>11.0f}{ours / buffers:>7.2f}{bare / mib:>12.0f}"
              f"{bare / buffers:>7.2f}{ours / bare:>9.3f}  {verdicts[-1]}")
    return 1 if "FAIL" in verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
