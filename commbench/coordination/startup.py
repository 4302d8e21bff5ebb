"""One rank's start: meet the others at the rendezvous store, agree on devices, then start the process
group and the side group that carries control traffic.

Invariants:
- Every key of an attempt lives under that attempt's prefix, the process group's own keys (NCCL's
  unique id, gloo's addresses) included: a job restarted by torchrun ``--max-restarts`` on the agent's
  store never reads a dead attempt's keys.
- The measured communicator carries only measured work. Agreement, sample gathering, host names and
  object broadcasts go over a gloo side group (``control_group``), or over the store before it exists;
  without a store (MPI starting its own ranks) they share the default group, which is then host-side.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from commbench.coordination.store import Coordinator, Rendezvous, StoreLost, connect, key_prefix
from commbench.coordination.waiting import Waiter
from commbench.core.devices import accepted_options

# NCCL's watchdog ends a collective that runs past the communicator's timeout by tearing the process
# down; commbench's own waits end at --timeout, so the watchdog waits this much longer, as a backstop
# that leaves the run time to record its failure.
WATCHDOG_MARGIN_S = 60.0


@dataclass(frozen=True)
class Started:
    """What a started rank communicates through besides the measured communicator."""

    coordinator: Coordinator | None  # check-ins through the store; None without a store
    control_group: Any  # the gloo backend for control traffic; None: the default group
    waiter: Waiter


def process_group_store(store: Any, attempt: str) -> Any:
    """The store the default process group keeps its keys in, under this attempt's prefix."""
    return dist.PrefixStore(f"{key_prefix(attempt)}default_pg", store)


def communicator_timeout(backend: str, timeout_s: float) -> timedelta:
    """The process group's own timeout: --timeout, and for NCCL a backstop beyond it (see above)."""
    return timedelta(seconds=timeout_s + (WATCHDOG_MARGIN_S if backend == "nccl" else 0.0))


def init_options(init: Callable[..., Any], backend: str, device: torch.device, timeout_s: float
                 ) -> dict[str, Any]:
    """init_process_group's options: the timeout, and on NCCL the device for an eager start (a failure
    then surfaces at the start, not mid-sweep) where ``init`` takes ``device_id`` (torch >= 2.3)."""
    options: dict[str, Any] = {"timeout": communicator_timeout(backend, timeout_s)}
    if device.type == "cuda" and backend == "nccl":
        options.update(accepted_options(init, {"device_id": device}))
    return options


class StartUp:
    """One rank's start, step by step: ``meet`` (store and join), the device phases, ``start``."""

    def __init__(self, name: str, rendezvous: Rendezvous, timeout_s: float) -> None:
        self.name = name
        self.rendezvous = rendezvous
        self.timeout_s = timeout_s
        self._store: Any = None
        self.coordinator: Coordinator | None = None

    def meet(self) -> None:
        """Connect to the store and wait until every rank has joined (nothing to do without a store)."""
        if not self.rendezvous.master_addr:
            return
        self._store = connect(self.rendezvous, self.timeout_s)
        self.coordinator = Coordinator.meeting(self._store, self.rendezvous, self.timeout_s)
        self.coordinator.join()

    def peers(self, phase: str, label: str) -> list[int] | None:
        """The ranks that registered under ``label`` in ``phase``, in rank order, once every rank has
        registered (Coordinator.peers_under); None without a store."""
        return None if self.coordinator is None else self.coordinator.peers_under(phase, label)

    def agree(self, phase: str, problem: str | None) -> str | None:
        """The first problem any rank found in ``phase`` (without a store: this rank's own)."""
        return problem if self.coordinator is None else self.coordinator.agree_on_problem(phase, problem)

    def give_up(self, detail: str, grace_s: float) -> None:
        """This rank's start failed after the others met it: tell them, and (the store's host) stay
        until they have read it, so none loses the store mid-request."""
        if self.coordinator is None:
            return
        try:
            self.coordinator.account_for_failure(detail, grace_s)
        except StoreLost:
            pass  # the store went with its host: the others find out on their own

    def start(self, device: torch.device) -> Started:
        """The default process group on ``device``, then the control side group."""
        meeting = self.rendezvous
        if device.type == "cuda":
            torch.cuda.set_device(device)
        options = init_options(dist.init_process_group, self.name, device, self.timeout_s)
        if self._store is None:
            dist.init_process_group(backend=self.name, rank=meeting.rank, world_size=meeting.world_size,
                                    **options)
            return Started(None, None, Waiter(self.timeout_s))
        dist.init_process_group(backend=self.name, store=process_group_store(self._store, meeting.attempt),
                                rank=meeting.rank, world_size=meeting.world_size, **options)
        # a gloo backend of its own over the store (control.py says why not new_group)
        control_store = dist.PrefixStore(f"{key_prefix(meeting.attempt)}control/", self._store)
        control = dist.ProcessGroupGloo(control_store, meeting.rank, meeting.world_size,
                                        timedelta(seconds=self.timeout_s))
        coordinator = self.coordinator
        trouble = coordinator.trouble if coordinator is not None else None
        return Started(coordinator, control, Waiter(self.timeout_s, trouble))


def abort_communicators() -> None:
    """Abort this process's NCCL communicators, so kernels stuck on a dead peer return and the process
    can exit. torch spells it differently across releases (``_abort_process_group`` in recent releases,
    a backend's ``abort`` or ``_shutdown`` in older ones); best effort: the process exits next anyway."""
    from torch.distributed import distributed_c10d as c10d

    try:
        abort_all = getattr(c10d, "_abort_process_group", None)
        if abort_all is not None:
            abort_all()
            return
        for group in list(c10d._world.pg_map):
            backend = group._get_backend(torch.device("cuda"))
            stop = getattr(backend, "abort", None) or getattr(backend, "_shutdown", None)
            if stop is not None:
                stop()
    except Exception:  # noqa: BLE001 - nothing more can be done for a communicator that will not abort
        pass
