"""Whether this torch and NCCL get premul_sum right, asked of torch alone (no commbench code).

    python scripts/premul_probe.py [--nproc N] [--factor F] [--json FILE]

Each of all_reduce, reduce, reduce_scatter_tensor and the list reduce_scatter runs once per dtype
(float32, bfloat16, float16) with ReduceOp.PREMUL_SUM(F) on N NCCL ranks (default: every visible GPU),
on small integers whose scaled sums are exact in every dtype, and rank 0 prints which were right. When
commbench's --check finds premul_sum rows wrong, this says whether plain torch gets the same wrong
values (the stack's bug: torch 2.11 hands NCCL a 4-byte float factor for bfloat16, which NCCL reads as
2 bytes, so a power-of-two factor reads as 0; pytorch/pytorch#190745) or not (commbench's). The GPU
check (scripts/gpu_check.sh) compares commbench's premul_sum rows against this. Needs CUDA.
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
COLLECTIVES = ("all_reduce", "reduce", "reduce_scatter_tensor", "reduce_scatter")
COUNT = 64  # per rank's share of a reduce-scatter
# the torch call each of commbench's premul_sum collectives makes (TorchDistBackend), so a caller can
# match commbench's rows to this probe's results (scripts/gpu_check.sh, tests/test_correctness.py)
COMMBENCH_CALLS = {"all_reduce": "all_reduce", "reduce": "reduce", "reduce_scatter": "reduce_scatter",
                   "reduce_scatter_v": "reduce_scatter", "reduce_scatter_base": "reduce_scatter_tensor"}


def _inputs(rank: int, world: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return (torch.arange(COUNT * world, device=device) % 7 + rank + 1).to(dtype)


def _expected(world: int, factor: float) -> torch.Tensor:
    return sum((torch.arange(COUNT * world) % 7 + rank + 1).double() for rank in range(world)) * factor


def _issue(name: str, data: torch.Tensor, op, rank: int, world: int) -> torch.Tensor | None:
    """The result this rank holds of its share, or None where it holds none (reduce off the root)."""
    if name == "all_reduce":
        dist.all_reduce(data, op=op)
        return data
    if name == "reduce":
        dist.reduce(data, dst=0, op=op)
        return data if rank == 0 else None
    out = torch.empty(COUNT, dtype=data.dtype, device=data.device)
    if name == "reduce_scatter_tensor":
        dist.reduce_scatter_tensor(out, data, op=op)
    else:
        dist.reduce_scatter(out, list(data.chunk(world)), op=op)
    return out


def _rank(rank: int, world: int, port: int, factor: float, results: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    expected = _expected(world, factor)
    found = {}
    for name in COLLECTIVES:
        for dtype_name, dtype in DTYPES.items():
            got = _issue(name, _inputs(rank, world, dtype, device), dist._make_nccl_premul_sum(factor), rank,
                         world)
            if got is None:
                continue
            want = expected if got.numel() == expected.numel() else expected.chunk(world)[rank]
            differs = (got.double().cpu() != want).nonzero()
            at = int(differs[0]) if len(differs) else 0
            found[f"{name} {dtype_name}"] = {"wrong": len(differs), "of": got.numel(),
                                             "first": [float(got[at]), float(want[at])]}
    gathered = [None] * world
    dist.all_gather_object(gathered, found)
    if rank == 0:
        merged = {}
        for per_rank in gathered:
            for key, value in per_rank.items():
                known = merged.setdefault(key, {"wrong": 0, "of": 0, "first": value["first"]})
                known["wrong"] += value["wrong"]
                known["of"] += value["of"]
        results.update(merged)
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=0, help="NCCL ranks (default: every visible GPU)")
    parser.add_argument("--factor", type=float, default=0.5)
    parser.add_argument("--json", help="write {'collective dtype': {'wrong', 'of', 'first'}} here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("premul_probe: needs CUDA (NCCL's premul_sum)", file=sys.stderr)
        return 2
    world = args.nproc or torch.cuda.device_count()
    from commbench.running.spawn import free_port

    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_rank, args=(world, free_port(), args.factor, results), nprocs=world, join=True)
    found = dict(results)
    print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, {world} rank(s), "
          f"premul_sum factor {args.factor:g}")
    for key, value in found.items():
        got, want = value["first"]
        verdict = "right" if not value["wrong"] else \
            f"WRONG {value['wrong']} of {value['of']} (first: got {got:g}, want {want:g})"
        print(f"  {key:<32} {verdict}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(found, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
