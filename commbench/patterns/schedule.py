"""Issuing a step's collectives: dry (learn the schedule), one by one and timed, or asynchronously.

A pattern's step calls ``Issuer.issue(label, args)`` for every collective (the label names the registry's
collective, which says how the backend runs it); the issuer decides how it runs. Buffers an asynchronous
step reuses come from a ``Ring``: taking a buffer back first completes the collectives still using it,
so at most ``depth`` of them are in flight per ring.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from commbench.backends.base import Backend, CollectiveArgs
from commbench.collectives import REGISTRY
from commbench.errors import RunError, failures_named
from commbench.sizes import format_size
from commbench.timing import Timer

T = TypeVar("T")

DRY, SYNC, ASYNC = "dry", "sync", "async"


@dataclass(frozen=True)
class Label:
    """What one collective of a step is: rows are built per (collective, unit, phase)."""

    collective: str  # the registry's collective name
    unit: str  # the unit whose pass issued it; '' for the flush at the end of the backward pass
    phase: str  # forward, backward or flush
    size_bytes: int  # nccl-tests' size: the all-gather output, the reduce-scatter input
    count_per_rank: int  # elements of this rank's shard


class Issuer:
    """Runs collectives for a step: ``dry`` records labels and issues nothing; ``sync`` issues and
    completes each (timed in its own slot when a timer is given); ``async`` leaves each handle on its
    call's wait list for the step to complete later."""

    def __init__(self, backend: Backend, mode: str, context: str, timer: Timer | None = None,
                 slots: int = 0) -> None:
        if mode not in (DRY, SYNC, ASYNC):
            raise ValueError(f"unknown issue mode {mode!r}")
        self.backend = backend
        self.mode = mode
        self.context = context  # names the run in error messages: "fsdp tiny, bucket 1 MiB"
        self.labels: list[Label] = []
        self._timer = timer
        self._slots = slots
        self.issued = 0

    @property
    def async_op(self) -> bool:
        return self.mode == ASYNC

    def issue(self, label: Label, args: CollectiveArgs) -> None:
        if self.mode == DRY:
            self.labels.append(label)
            return
        if self._timer is not None and self.issued >= self._slots:
            raise RunError(f"{self.context}: the step issued more collectives than its schedule "
                           f"({self._slots}) on rank {self.backend.rank}")
        args.async_op = self.async_op
        issue = REGISTRY[label.collective].issue
        with failures_named(lambda: self._failed(label)):
            if self._timer is not None:
                self._timer.start(self.issued)
                issue(self.backend, args)
                self._timer.finish(self.issued, args)
            else:
                issue(self.backend, args)
                if not self.async_op:
                    self.backend.wait(args)
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
