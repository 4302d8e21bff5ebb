"""A test-only backend: the real torch.distributed backend on gloo, which records where each all_reduce's
buffer lies and can hold one rank back once, after one op of a timed region, as a slow rank would."""

import time

import torch

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend


class RecordingBackend(TorchDistBackend):
    """``delay_rank`` sleeps ``delay_s`` once, right after completing the ``delay_op``-th all_reduce that
    follows a barrier (the timed region's opening one: warm-up and probe ops run before it). ``addresses``
    holds (the buffer's address, its storage's address) for every all_reduce."""

    def __init__(self, delay_rank: int | None = None, delay_op: int = 0, delay_s: float = 0.0) -> None:
        super().__init__("gloo", torch.device("cpu"))
        self.delay_rank, self.delay_op, self.delay_s = delay_rank, delay_op, delay_s
        self.addresses: list[tuple[int, int]] = []
        self.since_barrier = 0
        self.delayed = False

    def barrier(self) -> None:
        super().barrier()
        self.since_barrier = 0

    def all_reduce(self, args: CollectiveArgs) -> None:
        super().all_reduce(args)
        self.addresses.append((args.output.data_ptr(), args.output.untyped_storage().data_ptr()))
        self.since_barrier += 1
        if self.rank == self.delay_rank and self.since_barrier == self.delay_op and not self.delayed:
            self.delayed = True
            time.sleep(self.delay_s)
