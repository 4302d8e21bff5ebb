"""The activation patterns' configuration (tp, moe, pp, 3d) and the world they run on: a mesh of parallel
dimensions and one process group per dimension.

The mesh orders its dimensions outermost first, Megatron-LM's order: pipeline, data, tensor (tensor
innermost, so a tensor-parallel group is consecutive ranks, on one node when it fits). A rank's coordinate
in each dimension is its rank in that dimension's group. A message's elements come from the model's
dims: one micro-batch's activations are ``seq_len x micro_batch_size x hidden`` elements (a sequence
shard of them under sequence parallelism).
"""

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from commbench.config.launch import LaunchConfig, check_count, resolve_launch
from commbench.core.dtypes import canonical_dtype
from commbench.errors import UsageError
from commbench.patterns.models import ModelSpec, load_model

if TYPE_CHECKING:  # the mesh and its config are read by torch-free code (the tables)
    from commbench.backends.base import Backend

PATTERNS = ("tp", "moe", "pp", "3d")
ACTIVATION_DTYPES = ("bfloat16", "float16", "float32", "float64")
DEFAULT_MAX_SEQ_LEN = 4096  # without --seq-len: the model's context, at most this (Megatron's usual length)


@dataclass(kw_only=True)
class ParallelConfig:
    """One `commbench pattern tp|moe|pp|3d` run; each pattern reads the fields that concern it."""

    launch: LaunchConfig = field(default_factory=LaunchConfig)
    pattern: str = "tp"
    model: str = "gpt2-small"
    layers: int | None = None  # keep the first N layers
    seq_len: int | None = None  # None: the model's context, at most DEFAULT_MAX_SEQ_LEN
    micro_batch_size: int = 1  # sequences per micro-batch
    micro_batches: int = 8  # pp, 3d: micro-batches per step
    tp: int | None = None  # tensor-parallel ranks per group (tp: the world unless given)
    pp: int | None = None  # pipeline stages (pp: the world)
    dp: int | None = None  # 3d: data-parallel ranks (the world / (tp x pp) unless given)
    sequence_parallel: bool = True  # tp, 3d: all-gather / reduce-scatter instead of all-reduce
    routing_skew: float = 1.0  # moe: the Zipf exponent of expert popularity (0: uniform)
    seed: int = 0  # moe: the routing's seed
    compute_size: int = 0  # pp, 3d: a size x size matmul per layer and micro-batch forward (0: none)
    dtype: str = "bfloat16"  # activations and gradients
    check: bool = False
    warmup: int = 0
    iters: int = 3

    def check_world(self, world_size: int) -> None:
        """The mesh must tile the world and every split must divide what it splits."""
        model = load_model(self.model, self.layers)
        mesh = self.mesh(world_size)
        dims = model.require_dims(self.pattern)
        tp = mesh.size("tp")
        sized = self.for_world(model, world_size)
        if self.sequence_parallel and self.pattern in ("tp", "3d") and sized.tokens(model) % tp:
            raise UsageError(f"sequence parallel splits {sized.seq_len_of(model)} x {self.micro_batch_size} "
                             f"tokens over {tp} tensor-parallel ranks: choose a --seq-len they divide")
        if self.pattern == "moe":
            if not dims.is_moe:
                raise UsageError(f"model {model.name} has no experts (dims.experts): pattern moe needs a "
                                 "mixture-of-experts model such as mixtral-8x7b")
            if dims.experts % world_size:
                raise UsageError(f"{dims.experts} experts do not divide over {world_size} expert-parallel "
                                 "ranks: choose a world size that divides them")
        stages = mesh.size("pp")
        if stages > dims.layers:
            raise UsageError(f"{stages} pipeline stages need at least as many layers; the model has "
                             f"{dims.layers}")

    def mesh(self, world_size: int) -> "Mesh":
        """The dimensions this pattern runs on, outermost first; UsageError when they do not tile."""
        if self.pattern == "moe":
            return Mesh(("ep",), (world_size,))
        if self.pattern == "pp":
            return Mesh(("pp",), (self.pp or world_size,)).fits(world_size)
        tp = self.tp or world_size if self.pattern == "tp" else self.tp or 1
        pp = 1 if self.pattern == "tp" else self.pp or 1
        if world_size % (tp * pp):
            raise UsageError(f"--tp {tp} x --pp {pp} = {tp * pp} ranks do not divide the world of "
                             f"{world_size}")
        dp = self.dp or world_size // (tp * pp)
        return Mesh(("pp", "dp", "tp"), (pp, dp, tp)).fits(world_size)

    def seq_len_of(self, model: ModelSpec) -> int:
        return self.seq_len or min(model.require_dims(self.pattern).context, DEFAULT_MAX_SEQ_LEN)

    def for_world(self, model: ModelSpec, world_size: int) -> "ParallelConfig":
        """This run on ``world_size`` ranks: without --seq-len, the default length shortened (by less
        than the tensor-parallel size) so that sequence parallelism splits the tokens evenly; a length
        the user gave is kept, and check_world refuses it if it does not split."""
        if self.seq_len is not None or not self.sequence_parallel or self.pattern not in ("tp", "3d"):
            return self
        tp = self.mesh(world_size).size("tp")
        seq_len = self.seq_len_of(model)
        while seq_len > 1 and seq_len * self.micro_batch_size % tp:
            seq_len -= 1
        return replace(self, seq_len=seq_len)

    def tokens(self, model: ModelSpec) -> int:
        """Tokens in one micro-batch: sequence length x micro-batch size."""
        return self.seq_len_of(model) * self.micro_batch_size


def resolve_parallel(config: ParallelConfig) -> ParallelConfig:
    """A validated copy; UsageError (exit 2) on the first problem, before any process group starts."""
    if config.pattern not in PATTERNS:
        raise UsageError(f"unknown pattern {config.pattern!r}; choose from {', '.join(PATTERNS)}")
    load_model(config.model, config.layers).require_dims(config.pattern)
    dtype = canonical_dtype(config.dtype)
    if dtype not in ACTIVATION_DTYPES:
        raise UsageError(f"--dtype {dtype}: activations and gradients are floating point; choose from "
                         f"{', '.join(ACTIVATION_DTYPES)}")
    counts = (("--seq-len", config.seq_len, 1), ("--micro-batch-size", config.micro_batch_size, 1),
              ("--micro-batches", config.micro_batches, 1), ("--tp", config.tp, 1), ("--pp", config.pp, 1),
              ("--dp", config.dp, 1), ("--warmup", config.warmup, 0), ("--iters", config.iters, 1),
              ("--compute-size", config.compute_size, 0))
    for flag, value, minimum in counts:
        if value is not None:
            check_count(flag, value, minimum)
    if not 0 <= config.routing_skew <= 10:
        raise UsageError(f"--routing-skew {config.routing_skew:g} must be between 0 (uniform) and 10")
    return replace(config, launch=resolve_launch(config.launch), dtype=dtype)


@dataclass(frozen=True)
class Mesh:
    """Parallel dimensions, outermost first: rank = sum of coordinate x the sizes inside it."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return math.prod(self.sizes)

    def fits(self, world_size: int) -> "Mesh":
        if self.world_size != world_size:
            shape = " x ".join(f"{name} {size}" for name, size in zip(self.names, self.sizes, strict=True))
            raise UsageError(f"{shape} = {self.world_size} ranks, but the world has {world_size}")
        return self

    def size(self, name: str) -> int:
        return self.sizes[self.names.index(name)] if name in self.names else 1

    def _stride(self, name: str) -> int:
        return math.prod(self.sizes[self.names.index(name) + 1:])

    def coordinate(self, rank: int, name: str) -> int:
        return rank // self._stride(name) % self.size(name)

    def members(self, name: str) -> list[list[int]]:
        """Every group of one dimension: the ranks that differ only in that coordinate, in its order."""
        stride, size = self._stride(name), self.size(name)
        starts = [rank for rank in range(self.world_size) if self.coordinate(rank, name) == 0]
        return [[start + index * stride for index in range(size)] for start in starts]

    def describe(self) -> str:
        return " x ".join(f"{name} {size}" for name, size in zip(self.names, self.sizes, strict=True))


@dataclass(frozen=True)
class GroupInfo:
    """This rank's group in one dimension: its process group (None: the world), its rank in it, the
    group's size and global ranks, and its layout (contiguous or strided ranks; world)."""

    name: str
    process_group: Any
    rank: int
    size: int
    members: tuple[int, ...]
    layout: str


def make_groups(backend: "Backend", mesh: Mesh) -> dict[str, GroupInfo]:
    """One process group per dimension, created on every rank in the same order."""
    found = {}
    for name in mesh.names:
        members = mesh.members(name)
        mine = next(ranks for ranks in members if backend.rank in ranks)
        if len(mine) == backend.world_size:
            handle, layout = None, "world"
        else:
            handle = backend.new_groups(members) if len(mine) > 1 else None
            layout = "contiguous" if mine == list(range(mine[0], mine[0] + len(mine))) else "strided"
        found[name] = GroupInfo(name, handle, mine.index(backend.rank), len(mine), tuple(mine), layout)
    return found
