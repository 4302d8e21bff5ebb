"""The tensor-parallel and pipeline patterns issue what torch issues for the same model.

Tensor parallelism: Megatron-shaped layers (tests/torch_models.MegatronBlock) parallelized with
torch.distributed.tensor.parallel (ColwiseParallel / RowwiseParallel, with and without SequenceParallel)
over a gloo device mesh, one forward and backward recorded by the Flight Recorder (operation, elements,
dtype; a gloo reduce-scatter shows as an all_reduce of its input). With sequence parallelism the
column-parallel projections gather their input themselves and are checkpointed, so backward gathers it
again as Megatron-LM does; the same program and records on torch 2.11 to 2.14.1. Pipeline parallelism:
torch.distributed.pipelining's Schedule1F1B over three gloo stages, its sends and receives read from a
torch.profiler chrome trace (the Flight Recorder does not record point-to-point on gloo): each stage's
messages, peers and elements, in order. One recording on 3 ranks, shared by the tests.
"""

import json
import os
import pickle

import pytest
import torch

from commbench.backends.torch_dist import TorchDistBackend
from commbench.patterns.measure import step_dry
from commbench.patterns.models import ModelDims
from commbench.patterns.parallel import GroupInfo
from commbench.patterns.pp import PipelineLink, PpStep, TimedCompute, one_f_one_b
from commbench.patterns.tp import TensorParallel, TpShape, TpStep
from tests.dist_helpers import run_ranks
from tests.test_patterns_fsdp_torch import _flight_recorder, _numel
from tests.torch_models import MegatronBlock

pytestmark = pytest.mark.processes

WORLD = 3
DIMS = ModelDims(hidden=24, layers=2, heads=3, ffn=30, vocab=97, context=33)  # 1 head and 10 of d_ff per rank
BATCH, LENGTH = 2, 9  # 9 tokens: 3 per rank under sequence parallelism
MICRO_BATCHES = 4
FR_NAMES = {"all_gather_base": "gloo:all_gather", "reduce_scatter_base": "gloo:all_reduce",
            "all_reduce": "gloo:all_reduce"}


def _tensor_parallel(model: torch.nn.Module, sequence_parallel: bool) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (WORLD,))
    for block in model:
        plan = {"attention.wqkv": ColwiseParallel(), "feed_forward.w13": ColwiseParallel()}
        if sequence_parallel:
            # Norms on sequence shards; each column-parallel projection gathers its input itself (the
            # blocks are ModuleDicts, never called, so a PrepareModuleInput hook on one would not run:
            # torch 2.13 then gathered inside the projection's view, which torch 2.11's DTensor refuses).
            plan.update({"attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
                         "attention.wqkv": ColwiseParallel(input_layouts=Shard(1)),
                         "feed_forward.w13": ColwiseParallel(input_layouts=Shard(1)),
                         "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
                         "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1))})
        else:
            plan.update({"attention.wo": RowwiseParallel(), "feed_forward.w2": RowwiseParallel()})
        parallelize_module(block, mesh, plan)
        if sequence_parallel:
            # As Megatron-LM: keep only the input's shard and gather it again for the weight's gradient
            for projections, name in ((block.attention, "wqkv"), (block.feed_forward, "w13")):
                projections[name] = checkpoint_wrapper(projections[name])


def _record_tensor_parallel(rank: int, sequence_parallel: bool) -> list[tuple]:
    """One forward and backward of two layers: each collective's record (name, input elements, dtype)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(MegatronBlock(DIMS) for _ in range(DIMS.layers))).to(torch.bfloat16)
    _tensor_parallel(model, sequence_parallel)
    x = torch.randn(BATCH, LENGTH, DIMS.hidden, dtype=torch.bfloat16)
    x = x.chunk(WORLD, dim=1)[rank].contiguous() if sequence_parallel else x
    x.requires_grad_(True)  # as a layer's input is, after the embedding
    before = len(_recorded())
    model(x).float().sum().backward()
    return [(entry["profiling_name"], sum(map(_numel, entry["input_sizes"])), entry["input_dtypes"][0])
            for entry in _recorded()[before:]]


def _recorded() -> list[dict]:
    return pickle.loads(torch._C._distributed_c10d._dump_fr_trace())["entries"]


def _record_pipeline(rank: int, trace_dir: str) -> list[tuple]:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(rank)
    stage = PipelineStage(torch.nn.Sequential(MegatronBlock(DIMS)), rank, WORLD, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=lambda output, target: output.sum())
    tokens = torch.randn(MICRO_BATCHES * BATCH, LENGTH, DIMS.hidden)

    def step() -> None:
        if rank == 0:
            schedule.step(tokens)
        elif rank == WORLD - 1:
            schedule.step(target=torch.zeros(MICRO_BATCHES), losses=[])
        else:
            schedule.step()

    step()  # the first step infers the stages' shapes
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiled:
        step()
    path = os.path.join(trace_dir, f"pipeline-{rank}.json")
    profiled.export_chrome_trace(path)
    events = json.loads(open(path).read())["traceEvents"]
    return [("send" if event["name"] == "c10d::send" else "recv", int(event["args"]["Concrete Inputs"][2]),
             _numel(event["args"]["Input Dims"][0][0]))
            for event in events if event.get("name") in ("c10d::send", "c10d::recv_")]


def _record(rank: int, world_size: int, trace_dir: str) -> dict[str, list[tuple]]:
    return {"sp": _record_tensor_parallel(rank, True), "no-sp": _record_tensor_parallel(rank, False),
            "pipeline": _record_pipeline(rank, trace_dir)}


@pytest.fixture(scope="session")
def torch_steps(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, list[tuple]]]:
    with _flight_recorder():
        return run_ranks(_record, WORLD, str(tmp_path_factory.mktemp("traces")), timeout=240)


def _group(rank: int) -> GroupInfo:
    return GroupInfo("tp", None, rank, WORLD, tuple(range(WORLD)), "world")


def test_tensor_parallel_layers_equal_torch_s(torch_steps):
    backend = TorchDistBackend("gloo", torch.device("cpu"))  # a dry step never calls it
    for variant, sequence_parallel in (("sp", True), ("no-sp", False)):
        shape = TpShape(BATCH * LENGTH * DIMS.hidden, torch.bfloat16, sequence_parallel)
        step = TpStep(TensorParallel(_group(0), shape, backend.device), ["block0", "block1"])
        scattered = {"reduce_scatter_base": WORLD}  # recorded by its input, the whole activation
        ours = [(FR_NAMES[name], label.count_per_rank * scattered.get(name, 1), "BFloat16")
                for label, name in ((label, label.collective) for label in step_dry(backend, step, "tp"))]
        for rank, steps in enumerate(torch_steps):
            assert steps[variant] == ours, f"{variant}, rank {rank}"
    # per layer and block: 2 collectives forward and 3 backward with sequence parallelism, else 1 and 1
    assert len(torch_steps[0]["sp"]) == 2 * 2 * (2 + 3) and len(torch_steps[0]["no-sp"]) == 2 * 2 * 2


def test_pipeline_stages_equal_torch_s_1f1b(torch_steps):
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    for rank, steps in enumerate(torch_steps):
        group = GroupInfo("pp", None, rank, WORLD, tuple(range(WORLD)), "world")
        link = PipelineLink(group, BATCH * LENGTH * DIMS.hidden, torch.float32, backend.device)
        no_compute = TimedCompute(backend, 0, 1, torch.float32)
        step = PpStep(link, one_f_one_b(rank, WORLD, MICRO_BATCHES), no_compute)
        messages = [action for action in step.actions if action.kind == "message"]
        ours = []
        for label, action in zip(step_dry(backend, step, "pp"), messages, strict=True):
            peer = rank + action.neighbour
            parts = ["send", "recv"] if label.collective == "send_recv" else [label.collective]
            ours.extend((part, peer, label.count_per_rank) for part in parts)
        assert steps["pipeline"] == ours, f"stage {rank}"
    assert len(torch_steps[1]["pipeline"]) == 4 * MICRO_BATCHES  # the middle stage: 4 per micro-batch
