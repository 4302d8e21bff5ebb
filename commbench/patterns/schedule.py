"""Issuing a step's collectives: dry (learn the schedule), one by one and timed, or asynchronously.

A pattern's step calls ``Issuer.issue(label, args)`` for every collective (the label names the registry's
collective, or one of the point-to-point calls below, which says how the backend runs it); the issuer
decides how it runs and keeps every label it issued, in order. Buffers an asynchronous step reuses come
from a ``Ring``: taking a buffer back first completes the collectives still using it, so at most
``depth`` of them are in flight per ring.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from commbench.backends.base import Backend, CollectiveArgs
from commbench.core.sizes import format_size
from commbench.errors import RunError, failures_named
from commbench.measure.collectives import REGISTRY
from commbench.measure.collectives.base import unit_factor
from commbench.measure.timing import Timer

T = TypeVar("T")

DRY, SYNC, ASYNC = "dry", "sync", "async"

# A pipeline's lone send or receive: one side of a message, not a registry collective (those time both).
POINT_TO_POINT = {"send": lambda backend, args: backend.p2p(args),
                  "recv": lambda backend, args: backend.p2p(args)}


def dtype_name(dtype: object) -> str:
    """torch.bfloat16 -> 'bfloat16', the name rows and labels carry."""
    return str(dtype).removeprefix("torch.")


def issue_function(collective: str) -> Callable[[Backend, CollectiveArgs], None]:
    found = POINT_TO_POINT.get(collective)
    return found if found is not None else REGISTRY[collective].issue


def busbw_factor(collective: str, group_size: int) -> float:
    """The registry's factor; 1 for a lone send or receive (its bytes cross one link once)."""
    return unit_factor(group_size) if collective in POINT_TO_POINT else REGISTRY[collective].busbw_factor(
        group_size)


@dataclass(frozen=True)
class Label:
    """What one collective of a step is: rows are built per (collective, unit, phase, group)."""

    collective: str  # the registry's collective name, or send / recv
    unit: str  # the unit (layer, micro-batch) whose pass issued it; '' for a step-wide one (a flush)
    phase: str  # forward, backward or flush
    size_bytes: int  # nccl-tests' size: the all-gather output, the reduce-scatter input
    count_per_rank: int  # elements of this rank's shard
    dtype: str = "float32"
    op: str = ""  # the reduce op of a reducing collective
    group: str = ""  # the parallel dimension whose group it ran in (tp, pp, dp, ep); '' for the world
    group_size: int = 0  # ranks in that group; 0: the world

    def key(self) -> tuple[str, str, str, str]:
        return (self.collective, self.unit, self.phase, self.group)


class CheckHooks(Protocol):
    """--check inside the issuer: known inputs before a collective, its outputs verified after it."""

    def fill(self, label: Label, args: CollectiveArgs) -> None: ...

    def verify(self, label: Label, args: CollectiveArgs) -> None: ...


class Issuer:
    """Runs collectives for a step: ``dry`` records labels and issues nothing; ``sync`` issues and
    completes each (timed in its own slot when a timer is given); ``async`` leaves each handle on its
    call's wait list for the step to complete later."""

    def __init__(self, backend: Backend, mode: str, context: str, timer: Timer | None = None,
                 slots: int = 0, checker: CheckHooks | None = None) -> None:
        if mode not in (DRY, SYNC, ASYNC):
            raise ValueError(f"unknown issue mode {mode!r}")
        self.backend = backend
        self.mode = mode
        self.context = context  # names the run in error messages: "fsdp tiny, bucket 1 MiB"
        self.labels: list[Label] = []  # every collective issued, in order (a dry issuer only records them)
        self._timer = timer
        self._slots = slots
        self._checker = checker  # sync mode only: a checked collective is completed before it is verified
        self.issued = 0

    @property
    def async_op(self) -> bool:
        return self.mode == ASYNC

    def issue(self, label: Label, args: CollectiveArgs) -> None:
        self.labels.append(label)
        if self.mode == DRY:
            return
        if self._timer is not None and self.issued >= self._slots:
            raise RunError(f"{self.context}: the step issued more collectives than its schedule "
                           f"({self._slots}) on rank {self.backend.rank}")
        args.async_op = self.async_op
        issue = issue_function(label.collective)
        if self._checker is not None:
            self._checker.fill(label, args)
        with failures_named(lambda: self._failed(label)):
            if self._timer is not None:
                self._timer.start(self.issued)
                issue(self.backend, args)
                self._timer.finish(self.issued, args)
            else:
                issue(self.backend, args)
                if not self.async_op:
                    self.backend.wait(args)
        if self._checker is not None:
            self._checker.verify(label, args)
        self.issued += 1

    def _failed(self, label: Label) -> str:
        """Which collective of which unit failed, and where."""
        where = f"unit {label.unit}" if label.unit else "the final flush"
        return (f"{self.context}: {label.collective} of {where} ({label.phase}) failed at size "
                f"{format_size(label.size_bytes)} on rank {self.backend.rank}")


@dataclass
class Pending:
    """A collective in flight and what must run once it is complete."""

    args: CollectiveArgs
    callbacks: list[Callable[[], None]] = field(default_factory=list)

    def complete(self, backend: Backend) -> None:
        backend.wait(self.args)
        for callback in self.callbacks:
            callback()
        self.callbacks = []


class Ring(Generic[T]):
    """Buffers used in turn; taking one back completes the collectives still reading or writing it."""

    def __init__(self, backend: Backend, buffers: list[T]) -> None:
        if not buffers:
            raise ValueError("a ring needs at least one buffer")
        self._backend = backend
        self._buffers = buffers
        self._pending: list[list[Pending]] = [[] for _ in buffers]
        self._next = 0

    def take(self) -> tuple[int, T]:
        index = self._next
        self._next = (index + 1) % len(self._buffers)
        self._complete(index)
        return index, self._buffers[index]

    def hold(self, index: int, pending: Pending) -> None:
        self._pending[index].append(pending)

    def complete_all(self) -> None:
        for index in range(len(self._buffers)):
            self._complete(index)

    def _complete(self, index: int) -> None:
        waiting, self._pending[index] = self._pending[index], []
        for pending in waiting:
            pending.complete(self._backend)
