"""A test-only backend: the real torch.distributed backend, except that on one rank one output element is
off by one after every op completes. --check must count exactly that element and say where it is."""

from typing import Any

import torch

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend


def nudge(output: Any, index: int) -> None:
    """Add 1 to element ``index`` of an output, a tensor or a list of tensors read as one flat buffer."""
    for part in output if isinstance(output, list) else [output]:
        if part is None:
            continue
        if index < part.numel():
            part.view(-1)[index] += 1
            return
        index -= part.numel()


class CorruptingBackend(TorchDistBackend):
    def __init__(self, bad_rank: int, index: int) -> None:
        super().__init__("gloo", torch.device("cpu"))
        self.bad_rank = bad_rank
        self.index = index

    def wait(self, args: CollectiveArgs) -> None:
        # every completion (sync ops too: the runner completes each one) passes through wait()
        super().wait(args)
        if self.rank == self.bad_rank and args.output is not None:
            nudge(args.output, self.index)
