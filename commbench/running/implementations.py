"""The implementations of one sweep on this rank (--impl; commbench.measure.impls): probed, set up once
each, their buffers registered per size, and what each row says about them.

Order, and why: a table whose implementation cannot run here (its probe refuses, or its set-up raises)
becomes rows with the reason and status 'unavailable', which are not failures. The probe reads the
process's capabilities (probed once, on first use, and only for an implementation that needs something of
the process: a c10d-only sweep never probes) and every rank adopts the first refusal any rank found, so
all ranks skip or run alike. Set-up (a communicator, a pool, a heap: ``Implementation.start``) runs once
per implementation, the first time a table needs it, and is timed with the device memory it took; per
size, the buffers' registration or rendezvous is timed apart from the ops and undone after the size.
Both times are columns of the rows, never part of an op's time. An implementation with nothing to set up
(the reference) has no such columns and no status.
"""

import time
from dataclasses import dataclass, field
from typing import Any

from commbench.backends.base import Backend
from commbench.core.dtypes import element_size
from commbench.core.groups import Membership
from commbench.measure.impls import REGISTRY, Implementation, Setting, SizeFacts
from commbench.measure.impls.evidence import judge_kernels
from commbench.measure.planning import PlannedSize, TablePlan
from commbench.running.agreement import agree, attempt

UNAVAILABLE = "unavailable"


def agreed_reason(backend: Backend, reason: str | None) -> str | None:
    """The first reason any rank has (the lowest rank's), on every rank; None when none has one."""
    texts = backend.all_gather_object(reason)
    return next((text for text in texts if text is not None), None)


def _milliseconds(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _memory_taken(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else max(0, before - after)


@dataclass
class ImplTable:
    """One table's implementation on this rank: refused (``refusal``), or set up (``state``)."""

    impl: Implementation
    refusal: str | None = None
    state: Any = None  # what Implementation.start set up (backends.paths.PathState); None: nothing
    init_ms: float | None = None
    init_bytes: int | None = None
    expected_fallback: str | None = None
    hosts: int = 1  # the most hosts one group spans
    failure: str | None = None  # why it failed where it ran (its set's own rank processes): error rows

    @property
    def name(self) -> str:
        return self.impl.name

    @property
    def plain(self) -> bool:
        return self.state is None


@dataclass
class Started:
    state: Any = None
    error: str | None = None
    init_ms: float | None = None
    init_bytes: int | None = None


@dataclass
class ImplFacts:
    """What a row says about its implementation, beyond its name."""

    status: str = ""
    note: str = ""
    register_ms: float | None = None
    setup_bytes: int | None = None
    kernels: list[str] = field(default_factory=list)
    profiled: bool = False  # --profile-kernels ran its op for this size (every rank runs it once)

    def judge(self, table: ImplTable, group_size: int) -> None:
        """The kernel names' verdict (a fallback known in advance stays the verdict)."""
        if self.status == "fallback":
            return
        status, note = judge_kernels(table.impl.evidence, self.kernels, group_size)
        if status:
            self.status, self.note = status, note


class ImplRun:
    """One sweep's implementations on this rank (see the module's docstring)."""

    def __init__(self, backend: Backend, membership: Membership, hostnames: tuple[str, ...] = ()) -> None:
        self.backend = backend
        self.membership = membership
        # every rank knows every group, so every rank finds the same count (1 when no host names are known)
        self.hosts = max((len({hostnames[rank] for rank in ranks}) for ranks in membership.plan.members),
                         default=1) if hostnames else 1
        self._capabilities: Any = None
        self._refusals: dict[tuple, str | None] = {}
        self._failures: dict[tuple, str] = {}
        self._started: dict[str, Started] = {}

    def capabilities(self) -> Any:
        if self._capabilities is None:
            self._capabilities = self.backend.capabilities()
        return self._capabilities

    def table(self, table: TablePlan) -> ImplTable:
        """The implementation of ``table``, probed and set up (or refused, with the reason)."""
        impl = REGISTRY[table.impl]
        if (failure := self._failures.get(self._key(table))) is not None:
            return ImplTable(impl, failure=failure, hosts=self.hosts)
        setting = self.setting(table)
        refusal = self.refusal(table)
        if refusal is not None:
            return ImplTable(impl, refusal=refusal, hosts=self.hosts)
        if impl.path is None:  # nothing to set up: it runs as the run's own ops do
            return ImplTable(impl, hosts=self.hosts)
        started = self._start(impl)
        if started.error is not None:
            return ImplTable(impl, refusal=f"set-up failed: {started.error}", hosts=self.hosts)
        return ImplTable(impl, None, started.state, started.init_ms, started.init_bytes,
                         impl.expected_fallback(setting), self.hosts)

    def setting(self, table: TablePlan) -> Setting:
        impl, plan = REGISTRY[table.impl], self.membership.plan
        return Setting(table.collective.name, table.dtype, table.op, table.placement or
                       table.collective.default_placement, plan.size, plan.is_world,
                       self.capabilities() if impl.needs.of_process else None, self.hosts)

    def refusal(self, table: TablePlan) -> str | None:
        """Why ``table``'s implementation cannot run here, the same on every rank (before any set-up);
        asked once per table (it exchanges when the implementation needs something of the process)."""
        key = self._key(table)
        if key not in self._refusals:
            impl = REGISTRY[table.impl]
            refusal = impl.refusal(self.setting(table))
            if impl.needs.of_process:  # each rank judged its own process: all adopt the first refusal
                refusal = agreed_reason(self.backend, refusal)
            self._refusals[key] = refusal
        return self._refusals[key]

    def refuse(self, table: TablePlan, reason: str) -> None:
        """``table`` cannot run here after all (said on every rank alike)."""
        self._refusals[self._key(table)] = reason

    def fail(self, table: TablePlan, reason: str) -> None:
        """``table`` failed where it ran (its set's rank processes; said on every rank alike)."""
        self._failures[self._key(table)] = reason

    @staticmethod
    def _key(table: TablePlan) -> tuple:
        return (table.impl, table.collective.name, table.dtype, table.op, table.placement)

    def _start(self, impl: Implementation) -> Started:
        if impl.name in self._started:
            return self._started[impl.name]
        backend, plan = self.backend, self.membership.plan
        before = backend.free_device_memory()
        started_at = time.perf_counter()
        state, error = attempt(lambda: impl.start(backend, self.membership.process_group,
                                                   [list(ranks) for ranks in plan.members],
                                                   lambda failure: agree(backend, failure)))
        seconds = time.perf_counter() - started_at
        error = agreed_reason(backend, error)
        if error is not None and state is not None:
            attempt(state.close)
        found = Started(None, error) if error is not None else \
            Started(state, None, _milliseconds(seconds), _memory_taken(before, backend.free_device_memory()))
        self._started[impl.name] = found
        return found

    def close(self) -> None:
        for started in self._started.values():
            if started.state is not None:
                attempt(started.state.close)
        self._started = {}


def size_refusal(table: ImplTable, plan: TablePlan, size: PlannedSize, group_size: int) -> str | None:
    """Why this size is refused by the table's implementation (alignment), or None."""
    facts = SizeFacts(plan.collective.name, size.count_per_rank, element_size(plan.dtype), group_size,
                      size.pair_counts, table.hosts == 1)
    return table.impl.size_refusal(facts)


@dataclass
class Registered:
    binding: Any
    seconds: float
    bytes_taken: int | None


def register(backend: Backend, scope: Any, tensors: list[Any], input_splits: list[int] | None) -> Registered:
    """A size's buffers registered (or rendezvoused), timed, with the device memory it took."""
    before = backend.free_device_memory()
    started = time.perf_counter()
    binding = scope.register(tensors, input_splits)
    backend.sync_device()
    seconds = time.perf_counter() - started
    return Registered(binding, seconds, _memory_taken(before, backend.free_device_memory()))


def row_fields(table: ImplTable, facts: ImplFacts | None) -> dict[str, Any]:
    """The implementation's columns of a row."""
    if table.refusal is not None:
        return {"impl": table.name, "impl_status": UNAVAILABLE}
    if table.plain:  # nothing set up: nothing timed apart, no path to judge
        return {"impl": table.name, "kernels": " | ".join(facts.kernels) if facts else ""}
    facts = facts or ImplFacts()
    if table.expected_fallback and facts.status != "fallback":
        facts.status, facts.note = "fallback", table.expected_fallback
    setup = [value for value in (table.init_bytes, facts.setup_bytes) if value is not None]
    return {"impl": table.name, "impl_status": facts.status or "ran", "impl_note": facts.note,
            "impl_init_ms": table.init_ms, "impl_register_ms": facts.register_ms,
            "impl_setup_bytes": sum(setup) if setup else None, "kernels": " | ".join(facts.kernels)}
