"""What an implementation is: one way to run a collective (torch.distributed's own call, NCCL with
registered buffers, torch's symmetric-memory kernels, ...), what it needs, and how it issues the op.

An ``Implementation`` says which collectives it runs, what it needs (``Needs``: backend, device, torch
features, NCCL version, group sizes, dtypes, ops, placements, and per size), what the backend sets up for
it (``PathSpec``), how it issues each collective (through the Backend; absent: the collective's own
call), and what shows that its path ran (``Evidence``). ``refusal`` and ``size_refusal`` are pure
functions of a ``Setting`` (the table, and the process's Capabilities), so every reason can be tested
without the device it names.

Importing this package imports no torch: the command line validates --impl with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.core.paths import Capabilities, PathSpec, version_text

if TYPE_CHECKING:
    from commbench.backends.base import Backend, CollectiveArgs

ANY = "*"  # the key of a per-collective need that holds for every collective


@dataclass(frozen=True)
class Setting:
    """One table of a run, as an implementation's probe sees it."""

    collective: str
    dtype: str
    op: str  # '' for collectives that do not reduce
    placement: str
    group_size: int
    whole_world: bool
    capabilities: Capabilities


@dataclass(frozen=True)
class SizeFacts:
    """One size of a table: what per-size rules (alignment) read."""

    collective: str
    count_per_rank: int
    element_size: int
    group_size: int


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
    groups: Callable[[str, str, int], str | None] = any_group  # why a group size is refused
    groups_text: str = ""  # the group-size rule in words, for docs and `commbench list`
    sizes: Callable[[SizeFacts], str | None] = any_size  # why one size is refused (alignment)
    sizes_text: str = ""

    def refusal(self, setting: Setting) -> str | None:
        """Why ``setting`` cannot run (the first reason), or None."""
        caps = setting.capabilities
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
        return self._setting_refusal(setting)

    def _setting_refusal(self, setting: Setting) -> str | None:
        if self.whole_world and not setting.whole_world:
            return "runs over the whole world only, not in sub-communicators"
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
class Implementation:
    """One way to run collectives. ``collectives`` None: every collective torch.distributed runs."""

    name: str
    summary: str
    collectives: tuple[str, ...] | None
    needs: Needs
    path: PathSpec = PathSpec()
    issue: Mapping[str, Issue] = field(default_factory=dict)  # absent: the collective's own call
    evidence: Evidence = Evidence()
    # A fallback known before running: the path exists but NCCL will not take it for this setting.
    expected_fallback: Callable[[Setting], str | None] = nothing_expected

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

    def issue_for(self, collective: str, own: Issue) -> Issue:
        return self.issue.get(collective, own)


# Every implementation by name, in the order they were registered (the order of `--impl all`).
REGISTRY: dict[str, Implementation] = {}


def register(implementation: Implementation) -> Implementation:
    if implementation.name in REGISTRY:
        raise ValueError(f"implementation {implementation.name!r} is already registered")
    REGISTRY[implementation.name] = implementation
    return implementation


def aligned(facts_bytes: int, element_size: int) -> bool:
    """torch's symmetric kernels: a buffer's bytes a multiple of max(4, element size)."""
    return facts_bytes % max(4, element_size) == 0


def power_of_two_factor(value: int, cap: int = 16) -> int:
    """The largest power of two up to ``cap`` that divides ``value`` (torch's alignment of a size)."""
    factor = 1
    while factor < cap and value % (factor * 2) == 0:
        factor *= 2
    return factor
