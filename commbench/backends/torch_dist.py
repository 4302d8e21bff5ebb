"""The torch.distributed backend: the names users type mapped onto the APIs this torch has.

The flat reduce-scatter and all-gather moved names across releases (``_reduce_scatter_base`` became
``reduce_scatter_tensor``, then ``reduce_scatter_single``); the newest one present is chosen once, at
start-up, so the timed loop pays no lookup and no deprecation warning.
"""

import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from commbench.backends import paths
from commbench.backends.base import Backend, CollectiveArgs
from commbench.backends.capabilities import probe_capabilities
from commbench.backends.paths import Agree, PathState, start_path
from commbench.backends.profiling import kernel_names
from commbench.coordination import (
    ControlGroup,
    HostBlocking,
    PointToPoint,
    Rendezvous,
    Started,
    StartUp,
    StoreLost,
    Waiter,
    abort_communicators,
    communicator_timeout,
)
from commbench.core.paths import Capabilities, PathSpec

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


class TorchDistBackend(Backend):
    """Collectives through torch.distributed on an already-initialised default process group.

    Every collective is issued with ``async_op=True``; a sync call then waits on its handle at once
    through the ``Waiter`` (so no wait ever blocks past the deadline, see coordination/waiting.py).
    Control operations (``barrier``, the gathers, ``broadcast_object``) run on a ControlGroup
    (coordination/control.py).
    """

    def __init__(self, name: str, device: torch.device, started: Started | None = None) -> None:
        self.name = name
        self.device = device
        self._is_cuda = device.type == "cuda"
        started = started or Started(None, None, Waiter())
        self._coordinator = started.coordinator
        self._waiter = started.waiter
        # control traffic on its own gloo group; on the default group where there is none (MPI without
        # a store, or a backend made by hand on an initialised group)
        self._control = ControlGroup(started.control_group, started.waiter)
        self._sync_event: Any = None
        self._aborted = False
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
        """Meet at the store, then start the process group on ``device`` (StartUp; launch
        runs the same steps with the device phases between them)."""
        startup = StartUp(name, rendezvous, timeout_s)
        startup.meet()
        return cls(name, device, startup.start(device))

    def shutdown(self) -> None:
        if dist.is_initialized() and not self._aborted:
            dist.destroy_process_group()

    def abort(self) -> None:
        if self._is_cuda and not self._aborted and dist.is_initialized():
            self._aborted = True
            abort_communicators()

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

    def flight_recorder_dump(self) -> bytes | None:
        dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)  # private: absent, one day
        if dump is None:
            return None
        try:
            # without stacks: symbolising them takes seconds, which a failed rank cannot spend before it
            # reports (the others wait FAILURE_GRACE_S); a run's stacks are commbench's own code anyway
            return dump(includeStackTraces=False)
        except RuntimeError:  # the recorder is off (TORCH_FR_BUFFER_SIZE=0) or cannot dump
            return None

    def free_device_memory(self) -> int | None:
        return torch.cuda.mem_get_info(self.device)[0] if self._is_cuda else None

    def free_cached_memory(self) -> None:
        if self._is_cuda:
            torch.cuda.empty_cache()

    # --- implementations (paths.py) -----------------------------------------------------------
    def capabilities(self) -> Capabilities:
        return probe_capabilities(self.name, self.device)

    def start_path(self, spec: PathSpec, group: Any, members: list[list[int]], agree_on: Agree) -> PathState:
        return start_path(spec, group, members, self.device, self.all_gather_floats, self._waiter.timeout_s,
                          agree_on)

    def kernel_names(self, run: Any) -> list[str]:
        return kernel_names(run, self.device)

    def one_shot_all_reduce(self, args: CollectiveArgs) -> None:
        paths.one_shot_all_reduce(args)

    def two_shot_all_reduce(self, args: CollectiveArgs) -> None:
        paths.two_shot_all_reduce(args)

    def multimem_all_reduce(self, args: CollectiveArgs) -> None:
        paths.multimem_all_reduce(args)

    def symmetric_reduce_scatter(self, args: CollectiveArgs) -> None:
        paths.symmetric_reduce_scatter(args)

    def multimem_all_gather(self, args: CollectiveArgs) -> None:
        paths.multimem_all_gather(args)

    def all_to_all_vdev(self, args: CollectiveArgs) -> None:
        paths.all_to_all_vdev(args)

    def torchcomms_op(self, args: CollectiveArgs, collective: str) -> None:
        if collective == "all_reduce":
            self._copy_out_of_place(args)
        work = paths.torchcomms_call(args, collective)
        self._issued(args, work if self._is_cuda else HostBlocking(work))

    # --- groups and coordination ----------------------------------------------------------------
    def new_group_handles(self, members: list[list[int]], descs: list[str] | None = None) -> list[Any]:
        timeout = {} if self._waiter.timeout_s is None else \
            {"timeout": communicator_timeout(self.name, self._waiter.timeout_s)}
        handles = []
        for index, ranks in enumerate(members):
            options = {"group_desc": descs[index]} if descs and _NEW_GROUP_TAKES_DESC else {}
            # every rank creates every group, in order; torch numbers a group's ranks in ascending order
            group = dist.new_group(list(ranks), **timeout, **options)
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
            return self._coordinator.account_for_failure(detail, grace_s)
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

    def _issued(self, args: CollectiveArgs, *works: Any) -> None:
        """Keep the handles of ops issued together (async), or wait on them now (sync)."""
        if args.async_op:
            args.wait_list.extend(works)
        else:
            for work in works:
                self._settle(work)

    def _settle(self, work: Any) -> None:
        """One handle: on CUDA the current stream waits for it (the host does not, except for ops that
        block the host, which are polled first); on CPU the host waits, in slices."""
        if isinstance(work, HostBlocking) and not self._is_cuda:  # torchcomms' handles on CPU
            self._waiter.until(work.is_completed)
            work.wait()
            return
        if isinstance(work, PointToPoint):
            if self._is_cuda:
                work.work.wait()
            else:
                self._waiter.whole(work.work)
            return
        if not self._is_cuda:
            self._waiter.work(work)
            return
        if isinstance(work, HostBlocking) and not torch.cuda.is_current_stream_capturing():
            self._waiter.until(work.is_completed)
        work.wait()

    @staticmethod
    def _global_rank(group: Any, group_rank: int) -> int:
        return group_rank if group is None else dist.get_global_rank(group, group_rank)

    @staticmethod
    def _group_size(group: Any) -> int:
        return dist.get_world_size(group)

    # --- collectives --------------------------------------------------------------------------
    def _copy_out_of_place(self, args: CollectiveArgs) -> None:
        """Out of place, an all-reduce that works in place (torch's, torchcomms') copies the input into the
        output first; ops still in flight write that output, so the copy waits for them."""
        if args.input is not None and args.input is not args.output:
            if args.wait_list:
                self.wait(args)
            args.output.copy_(args.input)

    def all_reduce(self, args: CollectiveArgs) -> None:
        self._copy_out_of_place(args)
        self._issued(args, dist.all_reduce(args.output, self._op(args), args.process_group, True))

    def reduce_scatter(self, args: CollectiveArgs) -> None:
        self._issued(args, dist.reduce_scatter(args.output, args.input, self._op(args), args.process_group,
                                               True))

    def reduce_scatter_base(self, args: CollectiveArgs) -> None:
        if self._reduce_scatter_flat is not None:
            work = self._reduce_scatter_flat(args.output, args.input, self._op(args), args.process_group,
                                             True)
        else:  # torch without a flat reduce-scatter: the list form over views of the input
            chunks = list(args.input.chunk(self._group_size(args.process_group)))
            work = dist.reduce_scatter(args.output, chunks, self._op(args), args.process_group, True)
        self._issued(args, work)

    def all_gather(self, args: CollectiveArgs) -> None:
        self._issued(args, dist.all_gather(args.output, args.input, args.process_group, True))

    def all_gather_base(self, args: CollectiveArgs) -> None:
        if self._all_gather_flat is not None:
            work = self._all_gather_flat(args.output, args.input, args.process_group, True)
        else:  # the list form writing into views of the flat output
            chunks = list(args.output.chunk(self._group_size(args.process_group)))
            work = dist.all_gather(chunks, args.input, args.process_group, True)
        self._issued(args, work)

    def all_to_all(self, args: CollectiveArgs) -> None:
        self._issued(args, dist.all_to_all(args.output, args.input, group=args.process_group, async_op=True))

    def all_to_all_single(self, args: CollectiveArgs) -> None:
        self._issued(args, dist.all_to_all_single(args.output, args.input, args.output_splits,
                                                  args.input_splits, group=args.process_group, async_op=True))

    def broadcast(self, args: CollectiveArgs) -> None:
        root = self._global_rank(args.process_group, args.root)
        self._issued(args, dist.broadcast(args.output, root, args.process_group, True))

    def reduce(self, args: CollectiveArgs) -> None:
        root = self._global_rank(args.process_group, args.root)
        self._issued(args, dist.reduce(args.output, root, self._op(args), args.process_group, True))

    def gather(self, args: CollectiveArgs) -> None:
        root = self._global_rank(args.process_group, args.root)
        self._issued(args, dist.gather(args.input, args.output, root, args.process_group, True))

    def scatter(self, args: CollectiveArgs) -> None:
        root = self._global_rank(args.process_group, args.root)
        self._issued(args, dist.scatter(args.output, args.input, root, args.process_group, True))

    def barrier_op(self, args: CollectiveArgs) -> None:
        work = dist.barrier(args.process_group, True, **barrier_device(self.device))
        # NCCL's barrier handle blocks the host in wait(): poll it first
        self._issued(args, HostBlocking(work) if self._is_cuda else work)

    def send_recv(self, args: CollectiveArgs) -> None:
        if args.peer is None:  # no partner at this world size: this rank sits the exchange out
            return
        peer = self._global_rank(args.process_group, args.peer)
        works = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, args.input, peer, args.process_group),
            dist.P2POp(dist.irecv, args.output, peer, args.process_group),
        ])
        self._issued(args, *map(PointToPoint, works))

    def all_gather_v(self, args: CollectiveArgs) -> None:
        if self._uneven_all_gather:
            self._issued(args, dist.all_gather(args.output, args.input, args.process_group, True))
            return
        # One broadcast per rank (rank r's chunk from rank r), issued together: the bytes an uneven
        # all-gather moves, at the price of n ops; the own chunk is copied locally.
        me = dist.get_rank(args.process_group)
        group = args.process_group
        works = [dist.broadcast(args.input if rank == me else chunk, self._global_rank(group, rank), group,
                                async_op=True)
                 for rank, chunk in enumerate(args.output)]
        args.output[me].copy_(args.input)
        self._issued(args, *works)

    def p2p(self, args: CollectiveArgs) -> None:
        ops, group = [], args.process_group
        if args.send_peer is not None:
            peer = self._global_rank(group, args.send_peer)
            ops.extend(dist.P2POp(dist.isend, args.input, peer, group) for _ in range(args.window))
        if args.recv_peer is not None:
            peer = self._global_rank(group, args.recv_peer)
            ops.extend(dist.P2POp(dist.irecv, args.output, peer, group) for _ in range(args.window))
        if ops:  # a rank outside every pair sits the op out
            self._issued(args, *map(PointToPoint, dist.batch_isend_irecv(ops)))

    def ping_pong(self, args: CollectiveArgs) -> None:
        if args.peer is None:
            return
        peer, group = self._global_rank(args.process_group, args.peer), args.process_group
        if args.leads:
            self._settle(PointToPoint(dist.isend(args.input, peer, group)))
            self._settle(PointToPoint(dist.irecv(args.output, peer, group)))
        else:  # the echo: what arrived goes back
            self._settle(PointToPoint(dist.irecv(args.output, peer, group)))
            self._settle(PointToPoint(dist.isend(args.output, peer, group)))

    # --- completion and control ---------------------------------------------------------------
    def wait(self, args: CollectiveArgs) -> None:
        if args.wait_list:
            for work in args.wait_list:
                self._settle(work)
            args.wait_list.clear()

    def completion_times(self, calls: list[CollectiveArgs]) -> list[int]:
        """Each call stamped when the last of its handles completes; then every handle is settled as
        ``wait`` settles it (a failed op raises, the current stream joins the communicators'). On CUDA
        the handles are polled (``is_completed``: the op's end event on the device). On CPU a callback on
        each handle's future stamps it, from the backend's thread, while this one waits in slices: a
        polling loop would take the cores gloo's threads need. A handle without a future (gloo's sends
        and receives) has its call stamped when its wait returns."""
        if self._is_cuda:
            return self._polled_completion_times(calls)
        lock = threading.Lock()
        stamps = [0] * len(calls)
        left = [len(args.wait_list) for args in calls]
        unwatched = set()

        def completed(index: int) -> None:
            with lock:
                left[index] -= 1
                if not left[index]:
                    stamps[index] = time.perf_counter_ns()

        for index, args in enumerate(calls):
            futures = [_future(work) for work in args.wait_list]
            if not futures or any(future is None for future in futures):
                unwatched.add(index)
                continue
            for future in futures:
                future.add_done_callback(lambda _, index=index: completed(index))
        for index, args in enumerate(calls):
            self.wait(args)
            if index in unwatched:
                stamps[index] = time.perf_counter_ns()
        return stamps

    def _polled_completion_times(self, calls: list[CollectiveArgs]) -> list[int]:
        stamps = [0] * len(calls)

        def all_stamped() -> bool:
            now = 0
            for index, args in enumerate(calls):
                if not stamps[index] and all(_completed(work) for work in args.wait_list):
                    now = now or time.perf_counter_ns()
                    stamps[index] = now
            return all(stamps)

        self._waiter.until(all_stamped)
        for args in calls:
            self.wait(args)
        return stamps

    def sync_device(self) -> None:
        """Until the current stream (and every collective it waited for) is idle, polled."""
        if not self._is_cuda:
            return
        if self._sync_event is None:
            self._sync_event = torch.cuda.Event()
        self._sync_event.record()
        self._waiter.until(self._sync_event.query)

    def barrier(self) -> None:
        self.sync_device()  # the device's work first: ranks leave the barrier with nothing pending
        self._control.barrier()

    def all_gather_floats(self, values: list[float]) -> list[list[float]]:
        return self._control.all_gather_floats(values)

    def all_gather_array(self, values: list[float]) -> np.ndarray:
        return self._control.all_gather_array(values)

    def all_gather_object(self, obj: Any) -> list[Any]:
        return self._control.all_gather_object(obj)

    def broadcast_object(self, obj: Any, root: int = 0) -> Any:
        return self._control.broadcast_object(obj, root)


def _completed(work: Any) -> bool:
    """Whether a handle's op has completed (or failed), without waiting."""
    return (work.work if isinstance(work, PointToPoint) else work).is_completed()


def _future(work: Any) -> Any:
    """A handle's future, which completes with its op; None for handles that have none (gloo's sends
    and receives, host-blocking handles)."""
    if isinstance(work, PointToPoint | HostBlocking):
        return None
    try:
        return work.get_future()
    except RuntimeError:  # "Work::getFuture not implemented"
        return None


def barrier_device(device: torch.device) -> dict[str, Any]:
    """barrier()'s device_ids for a CUDA rank: without them NCCL guesses the device from the rank, which
    in a sub-group can be another rank's GPU."""
    return {"device_ids": [device.index]} if device.type == "cuda" and device.index is not None else {}
