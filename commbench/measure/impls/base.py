"""What an implementation is: one way to run a collective (torch.distributed's own call, NCCL with
registered buffers, torch's symmetric-memory kernels, ...), what it needs, and how it issues the op.

``Implementation`` is the base of a class per family (c10d.py, nccl.py, symmetric.py, nvshmem.py,
torchcomms.py). An instance says which collectives it runs, what it needs (``Needs``: backend, device,
torch features, NCCL version, group sizes, dtypes, ops, placements, and per size) and what shows that its
path ran (``Evidence``); its class says what the backend sets up for it (``path``: a ``PathSpec`` naming a
memory kind and a communicator kind, which ``Backend.start_path`` turns into objects that allocate,
register and release a size's buffers) and how it issues each collective (``issue_for``: a Backend
method, or the collective's own call). ``refusal`` and ``size_refusal`` are pure functions of a
``Setting`` (the table, and the process's Capabilities), so every reason can be tested without the
device it names.

The registry holds one reference implementation (``reference=True``: torch.distributed's own call):
--impl's default, what a row from before --impl ran, and what the side-by-side table compares with.
Nothing outside the registry names an implementation.

Importing this package imports no torch: the command line validates --impl with it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from commbench.core.paths import Capabilities, PathSpec, version_text

if TYPE_CHECKING:
    from commbench.backends.base import Backend, CollectiveArgs

ANY = "*"  # the key of a per-collective need that holds for every collective


@dataclass(frozen=True)
class Setting:
    """One table of a run, as an implementation's probe sees it. ``capabilities`` is None where the
    implementation needs nothing of the process (``Needs.of_process``): then nothing was probed."""

    collective: str
    dtype: str
    op: str  # '' for collectives that do not reduce
    placement: str
    group_size: int
    whole_world: bool
    capabilities: Capabilities | None
    hosts: int = 1  # the most hosts one group spans (every group runs the table at once)


@dataclass(frozen=True)
class SizeFacts:
    """One size of a table: what per-size rules (alignment, a kernel's blocks) read. ``pair_counts``: for
    all_to_allv, what each group rank sends each (elements; empty for even collectives)."""

    collective: str
    count_per_rank: int
    element_size: int
    group_size: int
    pair_counts: tuple[tuple[int, ...], ...] = ()
    one_host: bool = True  # every group's ranks share a host

    def sends(self) -> tuple[tuple[int, ...], ...]:
        """Elements group rank i sends group rank j, for the all-to-alls: ``pair_counts``, or the even
        chunk of all_to_all_single."""
        if self.pair_counts:
            return self.pair_counts
        return tuple((self.count_per_rank,) * self.group_size for _ in range(self.group_size))


def any_group(collective: str, placement: str, ranks: int) -> str | None:
    return None


def any_size(facts: SizeFacts) -> str | None:
    return None


def _lookup(table: Mapping[str, tuple[str, ...]], collective: str) -> tuple[str, ...] | None:
    return table.get(collective, table.get(ANY))


@dataclass(frozen=True, kw_only=True)
class Needs:
    """What an implementation needs. Per-collective needs are mappings from a collective (or ANY) to
    the values allowed; a collective a mapping does not name has no such restriction."""

    backend: str = "nccl"  # '' any
    device: str = "cuda"  # '' any
    features: tuple[str, ...] = ()  # of core.paths.FEATURES
    kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # torch ops it launches
    min_nccl: tuple[int, ...] | None = None
    dtypes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ops: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    placements: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    whole_world: bool = False  # no sub-communicators (--group-size, --groups)
    one_host: str = ""  # why a group must share one host ('' it need not)
    groups: Callable[[str, str, int], str | None] = any_group  # why a group size is refused
    groups_text: str = ""  # the group-size rule in words, for docs and `commbench list`
    sizes: Callable[[SizeFacts], str | None] = any_size  # why one size is refused (alignment)
    sizes_text: str = ""

    @property
    def of_process(self) -> bool:
        """Whether a need depends on what this process offers (its backend, device, torch or NCCL): then
        each rank probes its own, and the ranks agree on the first refusal. Otherwise the answer is a pure
        function of the table, the same on every rank."""
        return bool(self.backend or self.device or self.features or self.kernels or self.min_nccl)

    def refusal(self, setting: Setting) -> str | None:
        """Why ``setting`` cannot run (the first reason), or None."""
        if self.of_process and (why := self._process_refusal(setting)) is not None:
            return why
        return self._setting_refusal(setting)

    def _process_refusal(self, setting: Setting) -> str | None:
        caps = setting.capabilities
        if caps is None:
            raise ValueError("a need of the process was judged without probing it")
        if self.backend and caps.backend != self.backend:
            return f"needs --backend {self.backend} (this run: {caps.backend})"
        if self.device and caps.device != self.device:
            return f"needs a {self.device.upper()} device (this run: {caps.device})"
        for feature in self.features:
            if (why := caps.lacks(feature)) is not None:
                return why
        for op in _lookup(self.kernels, setting.collective) or ():
            if (why := caps.kernel_missing(f"symm_mem::{op}")) is not None:
                return why
        if self.min_nccl is not None and caps.nccl_version is not None and caps.nccl_version < self.min_nccl:
            return f"needs NCCL {version_text(self.min_nccl)} or later (this run: " \
                   f"{version_text(caps.nccl_version)})"
        return None

    def _setting_refusal(self, setting: Setting) -> str | None:
        if self.whole_world and not setting.whole_world:
            return "runs over the whole world only, not in sub-communicators"
        if self.one_host and setting.hosts > 1:
            return f"runs within one host only (a group here spans {setting.hosts}): {self.one_host}"
        if (why := self.groups(setting.collective, setting.placement, setting.group_size)) is not None:
            return why
        for name, table, value in (("dtype", self.dtypes, setting.dtype), ("op", self.ops, setting.op),
                                   ("placement", self.placements, setting.placement)):
            allowed = _lookup(table, setting.collective)
            if allowed is not None and value and value not in allowed:
                return f"{setting.collective} takes {name} {' or '.join(allowed)} only (asked: {value})"
        return None


@dataclass(frozen=True)
class Evidence:
    """What shows that an implementation's path ran.

    ``proof``/``fallback``: patterns (re.search) on the kernel names of one op (--profile-kernels): one
    that proves the path, one that betrays another path. ``nccl_log``: what NCCL's log (--nccl-debug)
    must show: registration, symmetric (a symmetric kernel chosen) or copy-engine; '' nothing.
    ``judged_alone``: False where one rank proves nothing (NCCL copies locally at one rank, whatever
    the path)."""

    proof: str = ""
    fallback: str = ""
    proof_text: str = ""  # the proof in words: 'NCCL's symmetric kernels (ncclSymkDevKernel_*)'
    nccl_log: str = ""
    judged_alone: bool = True


def nothing_expected(setting: Setting) -> str | None:
    return None


Issue = Callable[["Backend", "CollectiveArgs"], None]


@dataclass(frozen=True, kw_only=True)
class Implementation(ABC):
    """One way to run collectives; a subclass per family says what it sets up and how it issues.
    ``collectives`` None: every collective torch.distributed runs."""

    name: str
    summary: str
    collectives: tuple[str, ...] | None
    needs: Needs
    evidence: Evidence = Evidence()
    # A fallback known before running: the path exists but NCCL will not take it for this setting.
    expected_fallback: Callable[[Setting], str | None] = nothing_expected
    reference: bool = False  # torch.distributed's own call: the default, and what the others compare with
    # The collectives whose out-of-place form this implementation runs as a copy of the input into the
    # output, then the op in place (torch's all_reduce, and torchcomms', work in place): their time holds
    # the copy, where a kernel that writes its output itself (one-shot, two-shot) has none.
    copies_out_of_place: tuple[str, ...] = ()

    @property
    @abstractmethod
    def path(self) -> PathSpec | None:
        """What the backend sets up for it, once per run (``Backend.start_path``); None: nothing (the
        run's communicator, torch's allocator), and then no set-up or registration is timed either."""

    @abstractmethod
    def issue_for(self, collective: str, own: Issue) -> Issue:
        """How it issues ``collective``: a Backend method, or ``own`` (the collective's own call)."""

    def start(self, backend: Backend, group: Any, members: list[list[int]],
              agree_on: Callable[[str | None], str | None]) -> Any:
        """Set up ``path`` over ``group`` (``members``: every group's ranks; ``agree_on``: how the ranks
        agree on a failure between steps), raising with the reason when any rank cannot. What it returns
        (backends.paths.PathState) allocates, registers and releases each size's buffers and holds the
        communicator the ops run on; None: nothing to set up."""
        spec = self.path
        return None if spec is None else backend.start_path(spec, group, members, agree_on)

    def runs(self, collective: str) -> bool:
        return self.collectives is None or collective in self.collectives

    def refusal(self, setting: Setting) -> str | None:
        """Why this implementation cannot run ``setting``, or None: in words that start after its name
        ('needs --backend nccl (this run: gloo)')."""
        if not self.runs(setting.collective):
            return f"runs {', '.join(self.collectives or ())} only"
        return self.needs.refusal(setting)

    def size_refusal(self, facts: SizeFacts) -> str | None:
        return self.needs.sizes(facts)


# Every implementation by name, in the order they were registered (the order of `--impl all`).
REGISTRY: dict[str, Implementation] = {}


def register(implementation: Implementation) -> Implementation:
    if implementation.name in REGISTRY:
        raise ValueError(f"implementation {implementation.name!r} is already registered")
    if implementation.reference and any(known.reference for known in REGISTRY.values()):
        raise ValueError(f"implementation {implementation.name!r} cannot be a second reference")
    REGISTRY[implementation.name] = implementation
    return implementation


def reference() -> Implementation:
    """The registry's reference implementation (torch.distributed's own call)."""
    return next(implementation for implementation in REGISTRY.values() if implementation.reference)


def aligned(facts_bytes: int, element_size: int) -> bool:
    """torch's symmetric kernels: a buffer's bytes a multiple of max(4, element size)."""
    return facts_bytes % max(4, element_size) == 0


def power_of_two_factor(value: int, cap: int = 16) -> int:
    """The largest power of two up to ``cap`` that divides ``value`` (torch's alignment of a size)."""
    factor = 1
    while factor < cap and value % (factor * 2) == 0:
        factor *= 2
    return factor
