"""One rank's start: meet the others at the rendezvous store, agree on devices, then start the process
group and the side group that carries control traffic.

Invariants:
- Every key of an attempt lives under that attempt's prefix, the process group's own keys (NCCL's
  unique id, gloo's addresses) included: a job restarted by torchrun ``--max-restarts`` on the agent's
  store never reads a dead attempt's keys.
- The measured communicator carries only measured work. Agreement, sample gathering, host names and
  object broadcasts go over a gloo side group (``control_group``), or over the store before it exists;
  without a store (MPI starting its own ranks) they share the default group, which is then host-side.
- A rank that cannot reach the store in time says so with the timeout, from Python, before torch's
  store client tries (whose own failure logs C++ frames).
"""

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from commbench.coordination.board import LauncherBoard
from commbench.coordination.store import Coordinator, StoreLost, key_prefix
from commbench.coordination.waiting import Waiter
from commbench.core.devices import accepted_options
from commbench.errors import RunError, brief

# NCCL's watchdog ends a collective that runs past the communicator's timeout by tearing the process
# down; commbench's own waits end at --timeout, so the watchdog waits this much longer, as a backstop
# that leaves the run time to record its failure.
WATCHDOG_MARGIN_S = 60.0


# The store's own timeout for one request. commbench's waits poll with their own deadline (--timeout),
# so this only bounds a request to a store that stopped answering; a tiny --timeout must not make the
# store's first connection (the host's to itself) time out.
STORE_REQUEST_FLOOR_S = 30.0


def connect(host: str, port: int, rank: int, world_size: int, timeout_s: float, host_store: bool
            ) -> Any:
    """The rendezvous TCPStore: rank 0 hosts it unless a launcher (torchrun's agent) already does.

    The host does not wait for the others here: Coordinator.join does, and names who is missing.
    """
    timeout = timedelta(seconds=max(timeout_s, STORE_REQUEST_FLOOR_S))
    if host_store:
        return dist.TCPStore(host, port, world_size, True, timeout, wait_for_workers=False,
                             multi_tenant=True)
    return dist.TCPStore(host, port, world_size, False, timeout)


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
    launcher_board: str = ""  # commbench's local launcher's board of deaths (board.py); "" elsewhere

    @property
    def where(self) -> str:
        host = "the launcher" if self.launcher_hosts_store else "rank 0"
        return f"{self.master_addr}:{self.master_port} (hosted by {host})"

    @property
    def hosts_store(self) -> bool:
        return self.rank == 0 and not self.launcher_hosts_store


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


def wait_for_listener(host: str, port: int, timeout_s: float) -> None:
    """Until something listens at host:port: TimeoutError when nothing does in time, ConnectionError
    when the host name does not resolve. Polled from Python, so a failure logs nothing of torch's."""
    deadline = time.monotonic() + timeout_s
    pause = 0.01
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.05, deadline - time.monotonic())):
                return
        except socket.gaierror as exc:
            raise ConnectionError(f"cannot resolve {host!r} ({exc.strerror})") from None
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing listened there within {timeout_s:g} s (--timeout)") from None
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.2)


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
        meeting = self.rendezvous
        if not meeting.master_addr:
            return
        where, rank = meeting.where, meeting.rank
        try:
            if not meeting.hosts_store:
                wait_for_listener(meeting.master_addr, meeting.master_port, self.timeout_s)
            self._store = connect(meeting.master_addr, meeting.master_port, rank, meeting.world_size,
                                  self.timeout_s, host_store=meeting.hosts_store)
        except (dist.DistError, OSError) as exc:
            raise RunError(_store_failure(rank, where, meeting.hosts_store, exc, self.timeout_s)) from None
        board = LauncherBoard(meeting.launcher_board) if meeting.launcher_board else None
        self.coordinator = Coordinator(dist.PrefixStore(key_prefix(meeting.attempt), self._store), rank,
                                       meeting.world_size, self.timeout_s, where, meeting.hosts_store, board)
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


def _store_failure(rank: int, where: str, hosts_store: bool, exc: BaseException, timeout_s: float) -> str:
    """Why the store could not be opened or reached, in the words that fit what happened."""
    detail = brief(exc)
    if hosts_store:
        if "EADDRINUSE" in str(exc) or "address already in use" in str(exc).lower():
            why = "the port is taken"
        else:
            why = f"it did not open within {timeout_s:g} s (--timeout)" if "timed out" in detail.lower() \
                else "it did not open"
        return f"rank {rank} could not open the rendezvous store at {where}: {why} ({detail})"
    why = (f"its host did not start within {timeout_s:g} s (--timeout), or MASTER_ADDR/MASTER_PORT point "
           "elsewhere")
    said = "" if isinstance(exc, TimeoutError) else f" ({detail})"  # ours says no more than the above
    return f"rank {rank} could not reach the rendezvous store at {where}: {why}{said}"


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
