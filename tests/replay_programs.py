"""Small real training programs whose communication the replay tests record: each runs on an initialised
gloo world (tests.dist_helpers.run_ranks) and writes its rank's recording into ``out_dir`` the way
docs/replay.md tells users to (torch's Flight Recorder dump, or a torch.profiler chrome trace)."""

from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

STEPS = 3  # training steps per program: enough for --select last:N to find a repeating step


def dump_flight_recorder(out_dir: str, rank: int, as_json: bool = False) -> None:
    """What a user adds at the end of training (or torch does itself on an NCCL timeout)."""
    recorder = torch._C._distributed_c10d
    data = recorder._dump_fr_trace_json() if as_json else recorder._dump_fr_trace()
    Path(out_dir, f"nccl_trace_rank_{rank}").write_bytes(data)


def _mlp(width: int = 16) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def _train(model: nn.Module) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        optimizer.zero_grad()
        model(torch.randn(8, 16)).sum().backward()
        optimizer.step()


def ddp(rank: int, world_size: int, out_dir: str) -> None:
    """DistributedDataParallel with buckets of a few KiB: several gradient all-reduces per step."""
    from torch.nn.parallel import DistributedDataParallel

    _train(DistributedDataParallel(_mlp(), bucket_cap_mb=0.002))
    dump_flight_recorder(out_dir, rank)


def fsdp2(rank: int, world_size: int, out_dir: str) -> None:
    """FSDP2 (fully_shard) per layer and on the root: all-gathers and reduce-scatters."""
    from torch.distributed.fsdp import fully_shard

    model = _mlp()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    _train(model)
    dump_flight_recorder(out_dir, rank)


def mesh_2x2(rank: int, world_size: int, out_dir: str) -> None:
    """A 2x2 device mesh: a sequence-parallel MLP block all-gathers its input and reduce-scatters its
    output over 'tp' (bfloat16), and the gradients are all-reduced over 'dp'. Dumped in the JSON form."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp, dp = mesh["tp"].get_group(), mesh["dp"].get_group()
    torch.manual_seed(rank)
    up, down = torch.randn(8, 12, requires_grad=True), torch.randn(12, 8, requires_grad=True)
    for _ in range(STEPS):
        local = torch.randn(4, 8, dtype=torch.bfloat16)
        gathered = torch.empty(8, 8, dtype=torch.bfloat16)
        dist.all_gather_into_tensor(gathered, local, group=tp)
        partial = (gathered.float() @ up).relu() @ down
        shard = torch.empty(4, 8, dtype=torch.bfloat16)
        dist.reduce_scatter_tensor(shard, partial.to(torch.bfloat16), group=tp)
        partial.sum().backward()
        for parameter in (up, down):
            dist.all_reduce(parameter.grad, group=dp)
            parameter.grad = None
    dump_flight_recorder(out_dir, rank, as_json=True)


def pipeline(rank: int, world_size: int, out_dir: str) -> None:
    """A GPipe schedule over ``world_size`` stages: activations (bfloat16) go forward and gradients back
    with send/recv, four micro-batches per step. The last step is profiled into ``out_dir``/profiler; the
    Flight Recorder's dump goes to ``out_dir``/flight and holds nothing (gloo's does not record
    point-to-point operations)."""
    torch.manual_seed(rank)
    stage = nn.Linear(8, 8).to(torch.bfloat16)
    first, last = rank == 0, rank == world_size - 1
    for step in range(STEPS):
        if step == STEPS - 1:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                        record_shapes=True) as profiler:
                _pipeline_step(stage, rank, first, last)
            profiler.export_chrome_trace(str(Path(out_dir, "profiler", f"trace_rank_{rank}.json")))
        else:
            _pipeline_step(stage, rank, first, last)
    dump_flight_recorder(str(Path(out_dir, "flight")), rank)


def _pipeline_step(stage: nn.Module, rank: int, first: bool, last: bool) -> None:
    inputs, outputs = [], []
    for _ in range(4):  # forward, micro-batch after micro-batch
        activation = torch.randn(2, 8, dtype=torch.bfloat16)
        if not first:
            dist.recv(activation, rank - 1)
        activation.requires_grad_(not first)
        result = stage(activation)
        if not last:
            dist.send(result.detach(), rank + 1)
        inputs.append(activation)
        outputs.append(result)
    for activation, result in zip(reversed(inputs), reversed(outputs), strict=True):  # backward
        gradient = torch.ones_like(result)
        if not last:
            dist.recv(gradient, rank + 1)
        result.backward(gradient)
        if not first:
            dist.send(activation.grad, rank - 1)
