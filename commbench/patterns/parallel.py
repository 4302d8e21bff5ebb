"""The world the activation patterns (tp, moe, pp, 3d) run on: a mesh of parallel dimensions and one
process group per dimension (their configuration, ParallelConfig, is config.py's).

The mesh orders its dimensions outermost first, Megatron-LM's order: pipeline, data, tensor (tensor
innermost, so a tensor-parallel group is consecutive ranks, on one node when it fits). A rank's coordinate
in each dimension is its rank in that dimension's group. A message's elements come from the model's
dims: one micro-batch's activations are ``seq_len x micro_batch_size x hidden`` elements (a sequence
shard of them under sequence parallelism).
"""

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from commbench.errors import UsageError

if TYPE_CHECKING:  # the mesh and its config are read by torch-free code (the tables)
    from commbench.backends.base import Backend


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
