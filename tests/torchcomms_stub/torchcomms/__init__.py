"""A stand-in for the torchcomms package, for tests on machines without it: a real communicator (gloo over
the store it is given) that finds its place and meets its peers as torchcomms does, and writes down what
each communicator was made with and what each all_reduce found still in flight.

As torchcomms (comms/torchcomms/TorchCommUtils.cpp, query_ranksize): rank and size come from
TORCHCOMM_RANK and TORCHCOMM_SIZE, else Open MPI's, MPICH's, then torchrun's variables, else it fails.
Rank 0 publishes the communicator's unique id in the store under its name and the others read it; a key
that already holds an earlier communicator's id is refused here, where torchcomms on NCCL would start
ranks on mismatched ids and hang.
"""

import os
import uuid
from datetime import timedelta

import torch.distributed as dist

CREATED: list[dict] = []  # one entry per new_comm in this process
IN_FLIGHT: list[int] = []  # per all_reduce: how many of this communicator's earlier ops were not waited on
_PLACES = (("TORCHCOMM_RANK", "TORCHCOMM_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
           ("PMI_RANK", "PMI_SIZE"), ("RANK", "WORLD_SIZE"))


class ReduceOp:
    SUM, AVG, MIN, MAX, PRODUCT = (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
                                   dist.ReduceOp.PRODUCT)


def _place() -> tuple[int, int]:
    for rank, size in _PLACES:
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    raise RuntimeError("Unable to determine rank and size from environment variables. Please set "
                       "TORCHCOMM_RANK and TORCHCOMM_SIZE")


class Work:
    def __init__(self, work) -> None:
        self.work = work
        self.waited = False

    def is_completed(self) -> bool:
        return self.work.is_completed()

    def wait(self) -> None:
        self.work.wait()
        self.waited = True


class Comm:
    def __init__(self, group) -> None:
        self.group = group
        self.works: list[Work] = []

    def _issued(self, work) -> Work:
        self.works.append(Work(work))
        return self.works[-1]

    def all_reduce(self, tensor, op, async_op):
        IN_FLIGHT.append(sum(not work.waited for work in self.works))
        options = dist.AllreduceOptions()
        options.reduceOp = op
        return self._issued(self.group.allreduce([tensor], options))

    def finalize(self) -> None:
        self.group = None


def new_comm(backend, device, name, store=None, timeout=None):
    rank, size = _place()
    key = f"uniqueid/{name}"
    if rank == 0:
        if store.check([key]):
            raise RuntimeError(f"the store already holds a unique id under {key!r}")
        store.set(key, uuid.uuid4().hex)
    unique_id = store.get(key).decode()
    CREATED.append({"backend": backend, "name": name, "rank": rank, "size": size, "timeout": timeout,
                    "unique_id": unique_id})
    if backend != "gloo":  # nothing to make where the test has no device
        return Comm(None)
    group = dist.ProcessGroupGloo(dist.PrefixStore(f"{name}/", store), rank, size,
                                  timeout or timedelta(seconds=60))
    return Comm(group)
