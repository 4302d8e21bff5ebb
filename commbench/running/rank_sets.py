"""Rank processes of their own for the implementations that need torch's symmetric memory on another
backend than the run's ranks hold (measure.impls.process_sets: torch allows one per process, fixed once
its allocator is used).

For such a set, every rank of the run starts one process (forked from a server that imported torch, as
spawn.py starts ranks) and waits for it. Those processes meet at the run's own rendezvous store under an
attempt prefix of their own, as clients (whoever hosts the store, rank 0 or the launcher's agent, is
still running: the rank that started them), start a process group on the same devices in the same
groups, run the sweep's tables of the set, send their rows back through a pipe and end. The run's
ranks then show those rows in their place among the others, so the tables, the side-by-side
comparisons and the result files read as if one process had measured everything.

Invariants: the rank processes of a set are one group that starts and ends together, between two
tables of the run's own (the run's ranks do nothing meanwhile); one that fails or dies makes its rank
report why, and the run's ranks agree on it; a started process never outlives the rank that started it.
Without a rendezvous store (MPI starting its own ranks) no set can be started.
"""

import importlib
import os
import signal
from dataclasses import dataclass, replace
from typing import Any

import torch

from commbench.backends.base import Backend
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import RunConfig
from commbench.coordination import Rendezvous, StartUp
from commbench.core.devices import MemoryBudget
from commbench.core.groups import GroupPlan, Membership
from commbench.errors import RunError, Terminated, brief
from commbench.measure.impls import REGISTRY
from commbench.provenance.verdicts import RowContext
from commbench.results.model import Row
from commbench.running.rank_start import stop_with
from commbench.running.runner import ENDED, Session, run_sweep
from commbench.running.spawn import forking_context
from commbench.writers.output import NullOutput

POLL_S = 0.2  # how often a waiting rank looks at its set's process and at stop requests


def join_groups(backend: Backend, plan: GroupPlan) -> Membership:
    """This rank's sub-communicator of ``plan`` (every rank makes every group, in order)."""
    process_group = None
    if not plan.is_world:
        try:
            process_group = backend.new_groups([list(ranks) for ranks in plan.members])
        except Exception as exc:
            raise RunError(f"rank {backend.rank} could not create the {plan.describe()}: "
                           f"{brief(exc)}") from exc
    return Membership(plan, process_group, plan.group_rank(backend.rank))


@dataclass(frozen=True)
class SetJob:
    """What one rank process of a set runs: ``config``'s tables of its implementations, as the rank that
    started it would have (its device, groups, row annotations and memory budget)."""

    rendezvous: Rendezvous
    backend: str
    device: torch.device
    timeout_s: float
    config: RunConfig
    plan: GroupPlan
    row_context: RowContext | None
    memory: MemoryBudget | None
    hostnames: tuple[str, ...]
    modules: tuple[str, ...]  # where the set's implementations register themselves (the registry's)
    parent: int


class RankSets:
    """Starts a set's rank processes from this rank and brings back their rows (see the module)."""

    def __init__(self, rendezvous: Rendezvous, backend: str, device: torch.device, timeout_s: float) -> None:
        self.rendezvous = rendezvous
        self.backend = backend
        self.device = device
        self.timeout_s = timeout_s
        self.started = 0  # every rank starts the same sets in the same order: the count names the attempt

    def run(self, config: RunConfig, session: Session) -> list[Row]:
        """The rows of ``config`` (narrowed to one set's implementations), measured by processes of its
        own; raises with why they could not report."""
        attempt = f"{self.rendezvous.attempt}.set{self.started}"
        self.started += 1
        context = session.row_context
        modules = tuple(sorted({type(REGISTRY[name]).__module__ for name in config.impls}))
        job = SetJob(replace(self.rendezvous, launcher_hosts_store=True, attempt=attempt), self.backend,
                     self.device, self.timeout_s, config, session.membership.plan,
                     None if context is None else replace(context, nccl=None), session.memory,
                     session.hostnames, modules, os.getpid())
        forks = forking_context()
        receiving, sending = forks.Pipe(duplex=False)
        process = forks.Process(target=run_set, args=(job, sending), name=f"commbench set {attempt}")
        process.start()
        sending.close()
        try:
            return _outcome(process, receiving, session)
        finally:
            if process.is_alive():
                process.terminate()
                process.join(5.0)
            if process.is_alive():
                process.kill()
                process.join()
            receiving.close()


def _outcome(process: Any, receiving: Any, session: Session) -> list[Row]:
    """Wait for the set's process to report (a stop asked for meanwhile stops it and this rank)."""
    while not receiving.poll(POLL_S):
        if (signum := session.stop_requested()) != 0:
            raise Terminated(signum)
    try:
        kind, value = receiving.recv()
    except EOFError:  # it ended without a word: the pipe closed with it
        process.join()
        raise RuntimeError(f"{ENDED} (exit status {process.exitcode}) before it reported") from None
    process.join()
    if kind == "error":
        raise RuntimeError(value)
    return value


def run_set(job: SetJob, sending: Any) -> None:
    """One rank process of a set (the target of RankSets.run's fork): start, run the tables, report."""
    stop_with(job.parent)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for module in job.modules:
        importlib.import_module(module)
    backend: TorchDistBackend | None = None
    try:
        startup = StartUp(job.backend, job.rendezvous, job.timeout_s)
        startup.meet()
        backend = TorchDistBackend(job.backend, job.device, startup.start(job.device))
        session = Session(join_groups(backend, job.plan), row_context=job.row_context, memory=job.memory,
                          hostnames=job.hostnames)
        rows = run_sweep(job.config, backend, NullOutput(), session)
        backend.barrier()
        sending.send(("rows", rows))
        backend.shutdown()
    except BaseException as exc:  # noqa: BLE001 - told to the rank that waits, then this process ends
        sending.send(("error", brief(exc) or type(exc).__name__))
        if backend is not None:
            backend.abort()
    finally:
        sending.close()
