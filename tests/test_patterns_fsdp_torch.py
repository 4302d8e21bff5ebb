"""The FSDP pattern issues what torch's FSDP2 (fully_shard) and FSDP1 (FullyShardedDataParallel) issue.

Real small models shaped like the presets (tests/torch_models.py) are wrapped by torch's FSDP and trained
for two steps on real gloo ranks with the Flight Recorder on; the second step's record (operation,
element counts, dtypes) and, seen through a dispatch mode, the API each collective went through and its
reduce op (the Flight Recorder does not keep the op) must equal the pattern's schedule for the same model
spec, collective for collective, in order. One recording per FSDP version, shared by its tests.
"""

import os
import pickle
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import torch
import yaml

from commbench.patterns.fsdp import FsdpConfig, fsdp_schedule
from commbench.patterns.models import ModelDims, load_model
from commbench.patterns.schedule import Label
from tests.dist_helpers import run_ranks
from tests.torch_models import Gpt, Llama, spec_document

pytestmark = pytest.mark.processes

TINY_GPT = load_model("tiny").dims  # vocabulary 97, context 33 and d_ff 43: dim 0 rarely divides
TINY_LLAMA = ModelDims(hidden=16, layers=3, heads=4, kv_heads=2, ffn=37, vocab=97, context=33)
# the Flight Recorder's dtype names; a gloo reduce-scatter is recorded as an all_reduce of its input
FR_DTYPES = {"float32": "Float", "bfloat16": "BFloat16", "float16": "Half"}
APIS = {"all_gather_base": "_allgather_base_", "all_gather": "allgather_",
        "reduce_scatter_base": "_reduce_scatter_base_"}


@dataclass(frozen=True)
class Case:
    """One wrapped model: its family, dtype, mixed precision (param, reduce dtype) and resharding."""

    family: str  # gpt or llama
    dtype: str = "float32"
    mixed: tuple[str, str | None] | None = None
    reshard: bool = True

    @property
    def dims(self) -> ModelDims:
        return TINY_GPT if self.family == "gpt" else TINY_LLAMA

    def module(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return (Gpt if self.family == "gpt" else Llama)(self.dims).to(getattr(torch, self.dtype))


CASES = {
    2: {"gpt float32": Case("gpt"),
        "llama bfloat16 params, float32 reduce": Case("llama", mixed=("bfloat16", "float32")),
        "gpt float16": Case("gpt", dtype="float16"),
        "llama bfloat16, blocks kept after forward": Case("llama", mixed=("bfloat16", None), reshard=False)},
    1: {"gpt float32": Case("gpt"),
        "llama bfloat16 params, float32 reduce, blocks kept": Case("llama", mixed=("bfloat16", "float32"),
                                                                   reshard=False)},
}
WORLD = {2: 3, 1: 2}  # FSDP2 at 3 ranks: more padding, and float16's 2 x 1.5 division


def _wrap(model: torch.nn.Module, version: int, case: Case) -> torch.nn.Module:
    mixed = None if case.mixed is None else [getattr(torch, name) if name else None for name in case.mixed]
    if version == 2:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy() if mixed is None else MixedPrecisionPolicy(*mixed)
        for block in model.blocks:
            fully_shard(block, mp_policy=policy, reshard_after_forward=case.reshard)
        return fully_shard(model, mp_policy=policy)
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    strategy = ShardingStrategy.FULL_SHARD if case.reshard else ShardingStrategy.SHARD_GRAD_OP
    return FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({type(model.blocks[0])}),
                                    device_id=torch.device("cpu"), sharding_strategy=strategy,
                                    mixed_precision=None if mixed is None else MixedPrecision(*mixed))


def _record_step(rank: int, world_size: int, version: int) -> dict[str, list[tuple]]:
    """Each case's second training step: per collective (API, reduce op, Flight Recorder name, input and
    output elements, dtype)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    members = torch.distributed.ReduceOp.RedOpType.__members__
    op_names = {int(value): name.lower() for name, value in members.items()}

    class Calls(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str, str]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            namespace, name = str(func).split(".")[:2]
            if namespace == "c10d":
                ops = [op_names[arg.op()] for arg in args if type(arg).__name__ == "ScriptObject"
                       and arg._type().name().endswith("ReduceOp")]
                self.seen.append((name, ops[0] if ops else ""))
            return func(*args, **(kwargs or {}))

    def recorded() -> list[dict]:
        return pickle.loads(torch._C._distributed_c10d._dump_fr_trace())["entries"]

    found = {}
    for title, case in CASES[version].items():
        model = _wrap(case.module(), version, case)
        tokens = torch.randint(0, case.dims.vocab, (2, 12), generator=torch.Generator().manual_seed(rank))
        model(tokens).float().sum().backward()  # the first step initialises FSDP lazily
        before, calls = len(recorded()), Calls()
        with calls:
            model(tokens).float().sum().backward()
        entries = recorded()[before:]
        assert len(entries) == len(calls.seen)
        found[title] = [(api, op, entry["profiling_name"], sum(map(_numel, entry["input_sizes"])),
                         sum(map(_numel, entry["output_sizes"])), entry["input_dtypes"][0])
                        for (api, op), entry in zip(calls.seen, entries, strict=True)]
    return found


def _numel(shape: list[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


@contextmanager
def _flight_recorder():
    saved = os.environ.get("TORCH_FR_BUFFER_SIZE")
    os.environ["TORCH_FR_BUFFER_SIZE"] = "20000"  # the spawned ranks inherit it
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TORCH_FR_BUFFER_SIZE"]
        else:
            os.environ["TORCH_FR_BUFFER_SIZE"] = saved


def _record(version: int) -> list[dict[str, list[tuple]]]:
    with _flight_recorder():
        return run_ranks(_record_step, WORLD[version], version, timeout=240)


@pytest.fixture(scope="session")
def fsdp2_steps() -> list[dict[str, list[tuple]]]:
    return _record(2)


@pytest.fixture(scope="session")
def fsdp1_steps() -> list[dict[str, list[tuple]]]:
    return _record(1)


def expected(label: Label, world_size: int) -> tuple:
    """How a collective of the pattern shows in torch's record on gloo."""
    if label.collective.startswith("all_gather"):
        name, inputs, outputs = "gloo:all_gather", label.count_per_rank, label.count_per_rank * world_size
    else:
        name, inputs = "gloo:all_reduce", label.count_per_rank * world_size
        outputs = inputs
    return (APIS[label.collective], label.op, name, inputs, outputs, FR_DTYPES[label.dtype])


def pattern_step(case: Case, version: int, tmp_path) -> list[tuple]:
    path = tmp_path / f"{case.family}.yaml"
    path.write_text(yaml.safe_dump(spec_document(case.module(), case.dims, case.family), sort_keys=False))
    param, reduce = case.mixed or (case.dtype, None)
    config = FsdpConfig(model=str(path), fsdp_version=version, dtype=case.dtype, param_dtype=param,
                        reduce_dtype=reduce, reshard=case.reshard)
    return [expected(label, WORLD[version]) for label in fsdp_schedule(config, WORLD[version])]


def _compare(recorded: list[dict[str, list[tuple]]], version: int, tmp_path) -> None:
    for title, case in CASES[version].items():
        ours = pattern_step(case, version, tmp_path)
        for rank, steps in enumerate(recorded):
            assert steps[title] == ours, f"FSDP{version} {title}, rank {rank}"


def test_fsdp2_steps_equal_the_pattern_s(fsdp2_steps, tmp_path):
    _compare(fsdp2_steps, 2, tmp_path)
    gpt = fsdp2_steps[0]["gpt float32"]
    assert {op for _, op, *_ in gpt if op} == {"avg"}  # float32 gradients: AVG, no division
    assert {op for _, op, *_ in fsdp2_steps[0]["gpt float16"] if op} == {"sum"}
    mixed = fsdp2_steps[0]["llama bfloat16 params, float32 reduce"]
    assert {(api, dtype) for api, _, _, _, _, dtype in mixed} == {("_allgather_base_", "BFloat16"),
                                                                 ("_reduce_scatter_base_", "Float")}
    # the root is gathered once: 2 layers gathered twice, the root once, every unit reduced once
    assert len(gpt) == 2 * 2 + 1 + 3
    kept = fsdp2_steps[0]["llama bfloat16, blocks kept after forward"]
    assert len(kept) == 3 + 1 + 3 + 1 and {dtype for *_, dtype in kept} == {"BFloat16"}


def test_fsdp1_steps_equal_the_pattern_s(fsdp1_steps, tmp_path):
    _compare(fsdp1_steps, 1, tmp_path)
    gpt = fsdp1_steps[0]["gpt float32"]
    assert {api for api, *_ in gpt} == {"allgather_", "_reduce_scatter_base_"}  # CPU: the list all-gather
    assert {op for _, op, *_ in gpt if op} == {"sum"}  # and a sum between the divisions


def test_the_tiny_preset_is_the_torch_module_s_shapes():
    tiny = load_model("tiny")
    document = spec_document(Gpt(tiny.dims), tiny.dims, "tiny")
    assert [(unit["name"], unit["params"]) for unit in document["units"]] == [
        ("root", {param.name: list(param.shape) for param in tiny.units[0].params}),
        ("block", {param.name: list(param.shape) for param in tiny.units[1].params})]
