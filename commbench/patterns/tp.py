"""Tensor parallelism as Megatron-LM lays a transformer layer out, and torch.distributed.tensor.parallel
runs it (ColwiseParallel / RowwiseParallel, SequenceParallel).

A layer is two blocks, attention and MLP, each a column-parallel matmul (fused q/k/v; fused gate/up)
followed by a row-parallel one. With sequence parallelism the activations between blocks are split along
the sequence over the t ranks: per block the forward pass all-gathers the sequence-sharded input before
the column-parallel matmul and reduce-scatters the row-parallel output; the backward pass mirrors it (the
reduce-scatter's gradient is an all-gather, the all-gather's a reduce-scatter) and all-gathers the
block's input once more, for the column-parallel weight's gradient (only the shard was kept): all-gather
of the output's gradient, all-gather of the input, reduce-scatter of the input's gradient, the order
Megatron-LM and torch both issue. Without sequence parallelism each block all-reduces its row-parallel
output in forward and its column-parallel input's gradient in backward. An activation is
``tokens x hidden`` elements (tokens = sequence x micro-batch); its shard is 1/t of it.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from commbench.backends.base import CollectiveArgs
from commbench.patterns.parallel import GroupInfo
from commbench.patterns.schedule import Issuer, Label, dtype_name

BLOCKS = 2  # attention and MLP


@dataclass(frozen=True)
class TpShape:
    """One micro-batch's activation on one tensor-parallel group."""

    elements: int  # tokens x hidden: the full activation
    dtype: torch.dtype
    sequence_parallel: bool


class TensorParallel:
    """Issues one layer's tensor-parallel collectives for one micro-batch, in a group of t ranks."""

    def __init__(self, group: GroupInfo, shape: TpShape, device: torch.device) -> None:
        self.group = group
        self.shape = shape
        size = group.size
        self.full = torch.zeros(shape.elements, dtype=shape.dtype, device=device)
        self.shard = torch.zeros(shape.elements // size, dtype=shape.dtype, device=device)
        self._element_size = self.full.element_size()

    def per_block(self, phase: str) -> list[str]:
        """One block's collectives in a pass, in order."""
        if self.group.size == 1:
            return []
        if not self.shape.sequence_parallel:
            return ["all_reduce"]
        if phase == "forward":  # gather the input, scatter the output
            return ["all_gather_base", "reduce_scatter_base"]
        # the output's gradient gathered, the input gathered again for the weight's gradient, the input's
        # gradient scattered
        return ["all_gather_base", "all_gather_base", "reduce_scatter_base"]

    def forward(self, issuer: Issuer, unit: str) -> None:
        for _ in range(BLOCKS):
            for collective in self.per_block("forward"):
                self._issue(issuer, unit, "forward", collective)

    def backward(self, issuer: Issuer, unit: str) -> None:
        for _ in range(BLOCKS):
            for collective in self.per_block("backward"):
                self._issue(issuer, unit, "backward", collective)

    def _issue(self, issuer: Issuer, unit: str, phase: str, collective: str) -> None:
        group = self.group
        if collective == "all_gather_base":
            args = CollectiveArgs(input=self.shard, output=self.full, process_group=group.process_group)
            count = self.shard.numel()
        elif collective == "reduce_scatter_base":
            args = CollectiveArgs(input=self.full, output=self.shard, op="sum",
                                  process_group=group.process_group)
            count = self.shard.numel()
        else:
            args = CollectiveArgs(input=None, output=self.full, op="sum", process_group=group.process_group)
            count = self.full.numel()
        label = Label(collective, unit, phase, self.full.numel() * self._element_size, count,
                      dtype_name(self.shape.dtype), "" if collective == "all_gather_base" else "sum", "tp",
                      group.size)
        issuer.issue(label, args)


class TpStep:
    """One micro-batch through every layer and back: the layers' tensor-parallel collectives."""

    compute_kernels = 0

    def __init__(self, tensor_parallel: TensorParallel, layers: list[str]) -> None:
        self.tensor_parallel = tensor_parallel
        self.layers = layers

    def run(self, issuer: Issuer, compute: Callable[[], None] | None = None) -> None:
        for unit in self.layers:
            self.tensor_parallel.forward(issuer, unit)
        for unit in reversed(self.layers):
            self.tensor_parallel.backward(issuer, unit)

