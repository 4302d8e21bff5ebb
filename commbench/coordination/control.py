"""Control traffic: the barriers that open timed regions, agreement, gathered samples and check results,
host names, broadcast counts. It never runs on the communicator being measured.

Invariants:
- It runs on a gloo backend of its own, made straight from the rendezvous store (``ProcessGroupGloo``)
  rather than through ``new_group``: it inherits nothing of the default group (NCCL's bound device,
  communicator splits) and changes nothing of torch's group bookkeeping. Without a store (MPI starting
  its own ranks) it shares the default group, which is host-side there.
- Tensors are on the CPU, and every wait goes through the Waiter (slices against the deadline).
- Objects travel pickled, between the ranks of one job: each rank's size first, then the bytes.
"""

import pickle
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from commbench.coordination.waiting import Waiter


class ControlGroup:
    """Control operations over ``group``: a gloo backend, or (None) the default process group, looked
    up at the first operation (a backend may be made before any group exists, to issue nothing)."""

    def __init__(self, group: Any, waiter: Waiter) -> None:
        self._given = group
        self._waiter = waiter
        self._flat_gathers = True  # into one tensor; older torch's gloo has no flat all_gather

    @property
    def _group(self) -> Any:
        return self._given if self._given is not None else dist.group.WORLD

    @property
    def world_size(self) -> int:
        return self._group.size()

    def barrier(self) -> None:
        self._waiter.work(self._group.barrier(dist.BarrierOptions()))

    def all_gather_floats(self, values: list[float]) -> list[list[float]]:
        """Every rank's list of floats (all of one length), by rank."""
        return self.all_gather_array(values).tolist()

    def all_gather_array(self, values: list[float]) -> np.ndarray:
        """Every rank's floats (all of one length) as one float64 array, [rank][value]: gathered into
        one tensor, not one per rank (at thousands of ranks, tensors by the thousand per gather)."""
        local = torch.tensor(values, dtype=torch.float64)
        if self._flat_gathers:
            gathered = torch.empty(self.world_size * local.numel(), dtype=torch.float64)
            try:
                work = self._group._allgather_base(gathered, local)
            except RuntimeError:  # raised before anything is sent: this gloo cannot
                self._flat_gathers = False
            else:
                self._waiter.work(work)
                return gathered.view(self.world_size, local.numel()).numpy()
        return torch.stack(self._all_gather(local)).numpy()

    def all_gather_object(self, obj: Any) -> list[Any]:
        payload = _as_bytes(obj)
        sizes = [int(size) for (size,) in self.all_gather_floats([float(payload.numel())])]
        padded = torch.zeros(max(sizes), dtype=torch.uint8)
        padded[:payload.numel()] = payload
        return [_from_bytes(gathered[:size]) for gathered, size in zip(self._all_gather(padded), sizes,
                                                                       strict=True)]

    def broadcast_object(self, obj: Any, root: int = 0) -> Any:
        payload = _as_bytes(obj)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
        self._broadcast(size, root)
        buffer = payload if self._group.rank() == root else torch.empty(int(size.item()), dtype=torch.uint8)
        self._broadcast(buffer, root)
        return _from_bytes(buffer)

    def _all_gather(self, local: torch.Tensor) -> list[torch.Tensor]:
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        self._waiter.work(self._group.allgather([gathered], [local]))
        return gathered

    def _broadcast(self, tensor: torch.Tensor, root: int) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = root
        self._waiter.work(self._group.broadcast([tensor], options))


def _as_bytes(obj: Any) -> torch.Tensor:
    return torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)


def _from_bytes(tensor: torch.Tensor) -> Any:
    return pickle.loads(tensor.numpy().tobytes())  # a rank of this job sent it, as torch's own would
