"""Record a small training job's communication for `commbench replay`, on a laptop: no GPU, no NCCL.

Run it under torchrun, one process per rank (gloo on CPU by default):

    torchrun --standalone --nproc_per_node 2 scripts/record_example.py OUT
    commbench replay OUT/ddp          # DistributedDataParallel's gradient all-reduces
    commbench replay OUT/fsdp2        # FSDP2's all-gathers and reduce-scatters

A small MLP trains for a few steps twice, each recorded the way docs/replay.md tells a real job to:

- OUT/ddp: DistributedDataParallel (256 KiB gradient buckets, so a step is several all-reduces), recorded
  by torch's Flight Recorder (TORCH_FR_BUFFER_SIZE set before the process group starts) and dumped on
  every rank with ``torch._C._distributed_c10d._dump_fr_trace()`` to ``nccl_trace_rank_<rank>``;
- OUT/fsdp2: the same model sharded with FSDP2 (``fully_shard`` per layer and on the root), its steps
  run under torch.profiler with ``record_shapes=True`` and exported to ``trace_rank_<rank>.json``.

With ``--backend nccl`` (and a GPU per rank) the same script records NCCL's collectives instead.
"""

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "20000")  # before the process group starts

import torch  # noqa: E402 - the Flight Recorder's size is read when torch.distributed starts
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

# The MLP's widths: 4 linear layers of different sizes (0.46 M parameters, 1.8 MiB in float32), so a
# step's collectives differ from one another and replay's --select last:N finds the step that repeats.
WIDTHS = (256, 384, 512, 256, 128)


def mlp(device: torch.device) -> nn.Module:
    torch.manual_seed(0)  # every rank starts from the same weights, as a real job does
    layers: list[nn.Module] = []
    for width_in, width_out in zip(WIDTHS, WIDTHS[1:], strict=False):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    return nn.Sequential(*layers).to(device)


def train(model: nn.Module, steps: int, device: torch.device) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(32, WIDTHS[0], device=device)).square().mean().backward()
        optimizer.step()


def record_ddp(out: Path, steps: int, device: torch.device) -> None:
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    train(DistributedDataParallel(mlp(device), device_ids=ids, bucket_cap_mb=0.25), steps, device)
    (out / f"nccl_trace_rank_{dist.get_rank()}").write_bytes(torch._C._distributed_c10d._dump_fr_trace())


def record_fsdp2(out: Path, steps: int, device: torch.device) -> None:
    from torch.distributed.fsdp import fully_shard
    from torch.profiler import ProfilerActivity, profile

    model = mlp(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as profiler:
        train(model, steps, device)
    profiler.export_chrome_trace(str(out / f"trace_rank_{dist.get_rank()}.json"))


def main() -> int:
    parser = argparse.ArgumentParser(description="Record a small DDP and FSDP2 job for commbench replay.")
    parser.add_argument("out", help="directory to write OUT/ddp and OUT/fsdp2 into")
    parser.add_argument("--steps", type=int, default=3, help="training steps recorded per job")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    options = parser.parse_args()
    if "RANK" not in os.environ:
        print("record_example.py: run it under torchrun, e.g. `torchrun --standalone --nproc_per_node 2 "
              f"scripts/record_example.py {options.out}`", file=sys.stderr)
        return 2
    if options.steps < 2:
        print("record_example.py: --steps must be at least 2 (replay's --select last:N looks for a step "
              "that repeats)", file=sys.stderr)
        return 2
    device = torch.device("cpu")
    if options.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group(options.backend)
    out = Path(options.out)
    for name in ("ddp", "fsdp2"):
        (out / name).mkdir(parents=True, exist_ok=True)
    record_ddp(out / "ddp", options.steps, device)
    record_fsdp2(out / "fsdp2", options.steps, device)
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"recorded {dist.get_world_size()} ranks, {options.steps} steps each: {out / 'ddp'} (DDP, "
              f"Flight Recorder) and {out / 'fsdp2'} (FSDP2, torch.profiler); replay one with "
              f"`commbench replay {out / 'ddp'}`")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
