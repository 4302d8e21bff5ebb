"""The backend interface: one method per collective over a CollectiveArgs, plus completion, control
operations (apart from the measured communicator) and the process group's lifetime."""

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from commbench.core.paths import Capabilities, PathSpec

if TYPE_CHECKING:
    from commbench.backends.paths import PathState

TensorOrList = torch.Tensor | list[torch.Tensor] | None


@dataclass
class CollectiveArgs:
    """Everything one collective call needs.

    ``root`` is a rank within ``process_group`` (None: the world); ``peer``, ``send_peer`` and
    ``recv_peer`` too (point-to-point).
    When ``async_op`` is set each call appends its work handle to ``wait_list`` and ``Backend.complete``
    waits on them all. ``premul_factor`` is premul_sum's factor; ``window`` the messages p2p() sends or
    receives per call; ``leads`` says which side of ping_pong sends first.
    """

    input: TensorOrList
    output: TensorOrList
    process_group: Any = None
    async_op: bool = False
    wait_list: list[Any] = field(default_factory=list)
    op: str = "sum"
    root: int = 0
    peer: int | None = None
    input_splits: list[int] | None = None
    output_splits: list[int] | None = None
    premul_factor: float = 1.0
    send_peer: int | None = None
    recv_peer: int | None = None
    window: int = 1
    leads: bool = False
    path: Any = None  # an implementation's buffers as registered for this size (paths.Binding), or None


class Backend(ABC):
    """One method per collective. Each issues the call described by ``args`` and returns nothing."""

    name: str
    device: torch.device

    # --- the measured collectives -------------------------------------------------------------
    @abstractmethod
    def all_reduce(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def reduce_scatter(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def reduce_scatter_base(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def all_gather(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def all_gather_base(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def all_to_all(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def all_to_all_single(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def broadcast(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def reduce(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def gather(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def scatter(self, args: CollectiveArgs) -> None: ...

    @abstractmethod
    def barrier_op(self, args: CollectiveArgs) -> None:
        """The barrier as a measured collective (``barrier()`` below is the control barrier)."""

    @abstractmethod
    def send_recv(self, args: CollectiveArgs) -> None:
        """Send ``input`` to ``peer`` and receive ``output`` from it, both at once."""

    @abstractmethod
    def all_gather_v(self, args: CollectiveArgs) -> None:
        """All-gather ``input`` into the list ``output`` whose chunks may differ in size."""

    @abstractmethod
    def p2p(self, args: CollectiveArgs) -> None:
        """Send ``input`` to ``send_peer`` and receive ``output`` from ``recv_peer``, ``window`` times
        each, all in flight together; a peer of None means no sends (or receives) on this rank."""

    @abstractmethod
    def ping_pong(self, args: CollectiveArgs) -> None:
        """One round trip with ``peer``: the leading rank sends ``input`` and receives the echo into
        ``output``; the other receives into ``output`` and sends it back. Blocking in either mode."""

    # --- completion and control -------------------------------------------------------------
    @abstractmethod
    def wait(self, args: CollectiveArgs) -> None:
        """Wait for every handle on the wait list and empty it; the device may still be busy."""

    def completion_times(self, calls: list[CollectiveArgs]) -> list[int]:
        """Wait for every handle of each call (ops issued together, async), emptying their wait lists,
        and return for each call the host's clock (``time.perf_counter_ns``) when all of its handles had
        completed. This default waits on the calls in turn, so a call that completed before an earlier
        one is stamped late; a backend that can poll its handles stamps each when it completes."""
        stamps = []
        for args in calls:
            self.wait(args)
            stamps.append(time.perf_counter_ns())
        return stamps

    def complete(self, args: CollectiveArgs) -> None:
        """Wait for every handle on the wait list, empty it, then synchronise the device."""
        self.wait(args)
        self.sync_device()

    @abstractmethod
    def barrier(self) -> None:
        """A control barrier: returns once every rank has reached it, with this rank's device idle."""

    @abstractmethod
    def sync_device(self) -> None:
        """Until the device has finished the work issued so far (bounded by the timeout)."""

    # Control operations run apart from the measured communicator (a gloo side group, or the store), so
    # a rank failing on the host never turns one into a mismatched collective on it.
    @abstractmethod
    def all_gather_floats(self, values: list[float]) -> list[list[float]]:
        """Every rank's list of floats (all lists the same length), indexed by rank."""

    def all_gather_array(self, values: list[float]) -> np.ndarray:
        """``all_gather_floats`` as one float64 array [rank][value], for large gathers (every rank's
        samples of a size: a Python float per value costs seconds at thousands of ranks)."""
        return np.asarray(self.all_gather_floats(values), dtype=np.float64)

    @abstractmethod
    def all_gather_object(self, obj: Any) -> list[Any]: ...

    @abstractmethod
    def broadcast_object(self, obj: Any, root: int = 0) -> Any: ...

    @property
    @abstractmethod
    def rank(self) -> int: ...

    @property
    @abstractmethod
    def world_size(self) -> int: ...

    def versions(self) -> dict[str, str]:
        """Library versions worth recording with results (NCCL, ...)."""
        return {}

    def free_device_memory(self) -> int | None:
        """Bytes free on this rank's device (CUDA), or None where the backend cannot tell (CPU)."""
        return None

    def free_cached_memory(self) -> None:
        """Hand memory the allocator keeps cached back to the device (between sizes)."""
        return None

    def flight_recorder_dump(self) -> bytes | None:
        """This rank's Flight Recorder (torch's record of its last operations per process group), as torch
        dumps it (a pickle), for `commbench diagnose` after a failure; None where there is none."""
        return None

    # --- implementations (commbench.measure.impls) -------------------------------------------------
    def capabilities(self) -> Capabilities:
        """What this process's torch, NCCL and device offer the implementations, with why not."""
        why = f"{type(self).__name__} is not torch.distributed"
        return Capabilities.none(self.name, self.device.type, why)

    def start_path(self, spec: PathSpec, group: Any, members: list[list[int]],
                   agree_on: Callable[[str | None], str | None]) -> "PathState":
        """Set up what ``spec`` asks for over ``group`` (None: the world; ``members``: every group's
        ranks, as communicators are made by every rank): its communicator kind, then its memory kind (a
        pool, windows, a heap), which then allocates, registers and releases each size's buffers. The
        ranks agree after each step (``agree_on``: this rank's failure or None -> the first any rank
        had); raises with that reason on every rank when one could not."""
        raise NotImplementedError(f"{type(self).__name__} runs torch.distributed's own calls only")

    def kernel_names(self, run: Any) -> list[str]:
        """What ``run()`` (one op, completed) ran on the device, by name; [] where nothing can say."""
        return []

    def one_shot_all_reduce(self, args: CollectiveArgs) -> None:
        """All-reduce by torch's one-shot symmetric-memory kernel: every rank reads every peer's buffer."""
        raise NotImplementedError(f"{type(self).__name__} has no symmetric memory")

    def two_shot_all_reduce(self, args: CollectiveArgs) -> None:
        """All-reduce by torch's two-shot symmetric-memory kernels: reduce-scatter, then all-gather."""
        raise NotImplementedError(f"{type(self).__name__} has no symmetric memory")

    def multimem_all_reduce(self, args: CollectiveArgs) -> None:
        """All-reduce by torch's multimem (NVLink SHARP) kernels."""
        raise NotImplementedError(f"{type(self).__name__} has no symmetric memory")

    def symmetric_reduce_scatter(self, args: CollectiveArgs) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no symmetric memory")

    def multimem_all_gather(self, args: CollectiveArgs) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no symmetric memory")

    def all_to_all_vdev(self, args: CollectiveArgs) -> None:
        """All-to-all (even or uneven) by NVSHMEM's all_to_all_vdev, splits on the device."""
        raise NotImplementedError(f"{type(self).__name__} has no NVSHMEM")

    def torchcomms_op(self, args: CollectiveArgs, collective: str) -> None:
        """``collective`` through the torchcomms communicator in ``args.path``."""
        raise NotImplementedError(f"{type(self).__name__} has no torchcomms")

    # --- groups and coordination ----------------------------------------------------------------
    def new_groups(self, members: list[list[int]]) -> Any:
        """Create one process group per member list, on every rank in the same order (as process-group
        creation requires); return the handle of the group holding this rank."""
        return next((handle for handle in self.new_group_handles(members) if handle is not None), None)

    def new_group_handles(self, members: list[list[int]], descs: list[str] | None = None) -> list[Any]:
        """Create one process group per member list, on every rank in the same order; return every
        group's handle, None on the ranks outside it (groups may overlap: a rank may be in several).
        ``descs`` describe the groups where the backend records a description (torch's group_desc)."""
        raise NotImplementedError(f"{type(self).__name__} cannot split the world into groups")

    def check_in(self, label: str, signature: str, stop_signal: int = 0) -> int:
        """Wait until every rank has reached the step ``signature`` (``label`` names it in messages) and
        return the stop signal any rank passed (0: go on). Raises RunError naming the ranks that did not
        arrive within the timeout. Without a way to coordinate, returns this rank's own signal."""
        return stop_signal

    def account_for_failure(self, detail: str, grace_s: float) -> str:
        """After this rank failed: tell the others, wait up to ``grace_s`` for every rank's account, and
        say what became of them ('rank 2 died (SIGKILL)', ...; where ``detail`` is a peer having gone,
        also which failed, with the cause's message); '' when nothing is known."""
        return ""

    @abstractmethod
    def shutdown(self) -> None:
        """Release the process group."""

    def abort(self) -> None:
        """After a failure: abort communicators that may still run collectives on a dead or hung peer, so
        the process can exit (nothing to do where a failed collective ends by itself)."""
        return None
