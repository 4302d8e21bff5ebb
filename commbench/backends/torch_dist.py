"""The torch.distributed backend: the names users type mapped onto the APIs this torch has.

The flat reduce-scatter and all-gather moved names across releases (``_reduce_scatter_base`` became
``reduce_scatter_tensor``, then ``reduce_scatter_single``); the newest one present is chosen once, at
start-up, so the timed loop pays no lookup and no deprecation warning.
"""

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from commbench.backends.base import Backend, CollectiveArgs
from commbench.backends.coordination import Coordinator, StoreLost, connect, key_prefix
from commbench.errors import RunError, brief

_REDUCE_OPS = {
    "sum": "SUM",
    "avg": "AVG",
    "min": "MIN",
    "max": "MAX",
    "prod": "PRODUCT",
}


# Newer torch takes a group description, which Flight Recorder and profiler traces name groups by.
_NEW_GROUP_TAKES_DESC = "group_desc" in inspect.signature(dist.new_group).parameters


def _first_present(*names: str) -> Callable | None:
    for name in names:
        fn = getattr(dist, name, None)
        if fn is not None:
            return fn
    return None


def reduce_op(name: str, premul_factor: float = 1.0) -> Any:
    """The torch ReduceOp for an op name; premul_sum needs NCCL's pre-multiplied sum."""
    if name == "premul_sum":
        make = getattr(dist, "_make_nccl_premul_sum", None)
        if make is None:
            raise ValueError(f"premul_sum is not available in torch {torch.__version__}")
        return make(premul_factor)
    member = _REDUCE_OPS.get(name)
    if member is None or not hasattr(dist.ReduceOp, member):
        raise ValueError(f"reduce op {name!r} is not available in torch {torch.__version__}")
    return getattr(dist.ReduceOp, member)


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks meet: this rank, the world size and the TCP store at ``master_addr:master_port``
    (hosted by rank 0, or by the launcher: torchrun's agent). ``attempt`` is the launcher's restart count,
    so a restarted job never reads a dead attempt's keys. No master address: MPI starts its own ranks
    and there is no store."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    launcher_hosts_store: bool = False
    attempt: str = "0"


class TorchDistBackend(Backend):
    """Collectives through torch.distributed on an already-initialised default process group."""

    def __init__(self, name: str, device: torch.device, coordinator: Coordinator | None = None) -> None:
        self.name = name
        self.device = device
        self._is_cuda = device.type == "cuda"
        self._coordinator = coordinator
        self._reduce_scatter_flat = _first_present(
            "reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base")
        self._all_gather_flat = _first_present(
            "all_gather_single", "all_gather_into_tensor", "_all_gather_base")
        self._ops: dict[tuple[str, float], Any] = {}
        # NCCL gathers uneven lists itself (one broadcast per rank, coalesced); gloo rejects them
        self._uneven_all_gather = name == "nccl"

    # --- set-up -----------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, device: torch.device, rendezvous: Rendezvous, timeout_s: float
               ) -> "TorchDistBackend":
        """Initialise the default process group over a TCP store and return the backend.

        Every rank first checks in through the store, so a rank that never comes is named at the
        deadline. Without a master address (MPI starts its own ranks) there is no store and no check-in.
        """
        rank, world_size = rendezvous.rank, rendezvous.world_size
        master_addr, master_port = rendezvous.master_addr, rendezvous.master_port
        launcher_hosts_store = rendezvous.launcher_hosts_store
        if device.type == "cuda":
            torch.cuda.set_device(device)
        options: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s)}
        if device.type == "cuda" and name == "nccl":
            options["device_id"] = device  # eager NCCL init: failures surface here, not mid-sweep
        if not master_addr:
            dist.init_process_group(backend=name, rank=rank, world_size=world_size, **options)
            return cls(name, device)
        host = "the launcher" if launcher_hosts_store else "rank 0"
        where = f"{master_addr}:{master_port} (hosted by {host})"
        hosts_store = rank == 0 and not launcher_hosts_store
        try:
            store = connect(master_addr, master_port, rank, world_size, timeout_s, host_store=hosts_store)
        except dist.DistError as exc:
            detail = brief(exc)
            why = "the port is taken" if hosts_store else \
                f"its host did not start within {timeout_s:g} s, or MASTER_ADDR/MASTER_PORT point elsewhere"
            raise RunError(f"rank {rank} could not {'open' if rank == 0 else 'reach'} the rendezvous store "
                           f"at {where}: {why} ({detail})") from None
        coordinator = Coordinator(dist.PrefixStore(key_prefix(rendezvous.attempt), store), rank, world_size,
                                  timeout_s, where, hosts_store)
        coordinator.join()
        # The same prefix init_process_group gives its own store, so nothing else sharing it collides.
        dist.init_process_group(backend=name, store=dist.PrefixStore("default_pg", store), rank=rank,
                                world_size=world_size, **options)
        return cls(name, device, coordinator)

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def world_size(self) -> int:
        return dist.get_world_size()

    def versions(self) -> dict[str, str]:
        found: dict[str, str] = {}
        if self.name == "nccl" and torch.cuda.is_available():
            version = torch.cuda.nccl.version()
            found["nccl"] = ".".join(str(part) for part in version) if isinstance(version, tuple) \
                else str(version)
        if torch.version.cuda:
            found["cuda"] = torch.version.cuda
        return found

    # --- groups and coordination ----------------------------------------------------------------
    def new_group_handles(self, members: list[list[int]], descs: list[str] | None = None) -> list[Any]:
        handles = []
        for index, ranks in enumerate(members):
            options = {"group_desc": descs[index]} if descs and _NEW_GROUP_TAKES_DESC else {}
            group = dist.new_group(list(ranks), **options)  # every rank creates every group, in order
            handles.append(group if self.rank in ranks else None)
        return handles

    def check_in(self, label: str, signature: str, stop_signal: int = 0) -> int:
        if self._coordinator is None:
            return stop_signal
        return self._coordinator.check_in(label, signature, stop_signal)

    def account_for_failure(self, detail: str, grace_s: float) -> str:
        if self._coordinator is None:
            return ""
        try:
            self._coordinator.report_failure(detail)
            self._coordinator.await_accounts(grace_s)
            return self._coordinator.peer_accounts(include_failed=False)
        except StoreLost as exc:
            return str(exc)

    # --- helpers ------------------------------------------------------------------------------
    def _op(self, args: CollectiveArgs) -> Any:
        key = (args.op, args.premul_factor if args.op == "premul_sum" else 1.0)
        found = self._ops.get(key)
        if found is None:
            if args.op == "premul_sum" and self.name != "nccl":
                raise ValueError(f"premul_sum is NCCL's pre-multiplied sum; the {self.name} backend does "
                                 "not have it")
            found = self._ops[key] = reduce_op(*key)
        return found

    def _finish(self, args: CollectiveArgs, works: list[Any]) -> None:
        """Keep the handles of ops issued together (async), or wait on them now (sync)."""
        if args.async_op:
            args.wait_list.extend(works)
        else:
            for work in works:
                work.wait()

    @staticmethod
    def _global_rank(group: Any, group_rank: int) -> int:
        return group_rank if group is None else dist.get_global_rank(group, group_rank)

    @staticmethod
    def _keep(args: CollectiveArgs, work: Any) -> None:
        if args.async_op:
            args.wait_list.append(work)

    @staticmethod
    def _group_size(group: Any) -> int:
        return dist.get_world_size(group)

    # --- collectives --------------------------------------------------------------------------
    def all_reduce(self, args: CollectiveArgs) -> None:
        if args.input is not None and args.input is not args.output:
            args.output.copy_(args.input)  # out of place: torch's all_reduce itself works in place
        self._keep(args, dist.all_reduce(args.output, self._op(args), args.process_group, args.async_op))

    def reduce_scatter(self, args: CollectiveArgs) -> None:
        self._keep(args, dist.reduce_scatter(args.output, args.input, self._op(args), args.process_group,
                                             args.async_op))

    def reduce_scatter_base(self, args: CollectiveArgs) -> None:
        if self._reduce_scatter_flat is not None:
            work = self._reduce_scatter_flat(args.output, args.input, self._op(args), args.process_group,
                                             args.async_op)
        else:  # torch without a flat reduce-scatter: the list form over views of the input
            chunks = list(args.input.chunk(self._group_size(args.process_group)))
            work = dist.reduce_scatter(args.output, chunks, self._op(args), args.process_group, args.async_op)
        self._keep(args, work)

    def all_gather(self, args: CollectiveArgs) -> None:
        self._keep(args, dist.all_gather(args.output, args.input, args.process_group, args.async_op))

    def all_gather_base(self, args: CollectiveArgs) -> None:
        if self._all_gather_flat is not None:
            work = self._all_gather_flat(args.output, args.input, args.process_group, args.async_op)
        else:  # the list form writing into views of the flat output
            chunks = list(args.output.chunk(self._group_size(args.process_group)))
            work = dist.all_gather(chunks, args.input, args.process_group, args.async_op)
        self._keep(args, work)

    def all_to_all(self, args: CollectiveArgs) -> None:
        self._keep(args, dist.all_to_all(args.output, args.input, group=args.process_group,
                                         async_op=args.async_op))

    def all_to_all_single(self, args: CollectiveArgs) -> None:
        self._keep(args, dist.all_to_all_single(args.output, args.input, args.output_splits,
                                                args.input_splits, group=args.process_group,
                                                async_op=args.async_op))

    def broadcast(self, args: CollectiveArgs) -> None:
        root = self._global_rank(args.process_group, args.root)
        self._keep(args, dist.broadcast(args.output, root, args.process_group, args.async_op))

    def reduce(self, args: CollectiveArgs) -> None:
        root = self._global_rank(args.process_group, args.root)
        self._keep(args, dist.reduce(args.output, root, self._op(args), args.process_group, args.async_op))

    def gather(self, args: CollectiveArgs) -> None:
        root = self._global_rank(args.process_group, args.root)
        self._keep(args, dist.gather(args.input, args.output, root, args.process_group, args.async_op))

    def scatter(self, args: CollectiveArgs) -> None:
        root = self._global_rank(args.process_group, args.root)
        self._keep(args, dist.scatter(args.output, args.input, root, args.process_group, args.async_op))

    def barrier_op(self, args: CollectiveArgs) -> None:
        self._keep(args, dist.barrier(args.process_group, args.async_op))

    def send_recv(self, args: CollectiveArgs) -> None:
        if args.peer is None:  # no partner at this world size: this rank sits the exchange out
            return
        peer = self._global_rank(args.process_group, args.peer)
        works = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, args.input, peer, args.process_group),
            dist.P2POp(dist.irecv, args.output, peer, args.process_group),
        ])
        self._finish(args, works)

    def all_gather_v(self, args: CollectiveArgs) -> None:
        if self._uneven_all_gather:
            self._keep(args, dist.all_gather(args.output, args.input, args.process_group, args.async_op))
            return
        # One broadcast per rank (rank r's chunk from rank r), issued together: the bytes an uneven
        # all-gather moves, at the price of n ops; the own chunk is copied locally.
        me = dist.get_rank(args.process_group)
        group = args.process_group
        works = [dist.broadcast(args.input if rank == me else chunk, self._global_rank(group, rank), group,
                                async_op=True)
                 for rank, chunk in enumerate(args.output)]
        args.output[me].copy_(args.input)
        self._finish(args, works)

    def p2p(self, args: CollectiveArgs) -> None:
        ops, group = [], args.process_group
        if args.send_peer is not None:
            peer = self._global_rank(group, args.send_peer)
            ops.extend(dist.P2POp(dist.isend, args.input, peer, group) for _ in range(args.window))
        if args.recv_peer is not None:
            peer = self._global_rank(group, args.recv_peer)
            ops.extend(dist.P2POp(dist.irecv, args.output, peer, group) for _ in range(args.window))
        if ops:  # a rank outside every pair sits the op out
            self._finish(args, dist.batch_isend_irecv(ops))

    def ping_pong(self, args: CollectiveArgs) -> None:
        if args.peer is None:
            return
        peer = self._global_rank(args.process_group, args.peer)
        if args.leads:
            dist.send(args.input, peer, args.process_group)
            dist.recv(args.output, peer, args.process_group)
        else:  # the echo: what arrived goes back
            dist.recv(args.output, peer, args.process_group)
            dist.send(args.output, peer, args.process_group)

    # --- completion and control ---------------------------------------------------------------
    def wait(self, args: CollectiveArgs) -> None:
        if args.wait_list:
            for work in args.wait_list:
                work.wait()
            args.wait_list.clear()

    def sync_device(self) -> None:
        if self._is_cuda:
            torch.cuda.synchronize(self.device)

    def barrier(self, group: Any = None) -> None:
        dist.barrier(group)
        self.sync_device()

    def all_gather_floats(self, values: list[float], group: Any = None) -> list[list[float]]:
        world = dist.get_world_size(group)
        local = torch.tensor(values, dtype=torch.float64, device=self.device)
        gathered = torch.empty(world * len(values), dtype=torch.float64, device=self.device)
        if self._all_gather_flat is not None:
            self._all_gather_flat(gathered, local, group)
        else:
            dist.all_gather(list(gathered.chunk(world)), local, group)
        return gathered.view(world, len(values)).cpu().tolist()

    def all_gather_object(self, obj: Any, group: Any = None) -> list[Any]:
        found: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(found, obj, group)
        return found

    def broadcast_object(self, obj: Any, root: int = 0, group: Any = None) -> Any:
        holder = [obj]
        dist.broadcast_object_list(holder, self._global_rank(group, root), group)
        return holder[0]
