"""What diagnose concludes: per process group, where progress stopped and who is to blame, and the
findings, the root first. Plain data: the console (render.py) and --json read it.

The classes of finding, and what each means:
- MISMATCH: members issued different operations at the same sequence number (a code path that differs
  by rank): a different collective, size or dtype, a collective one rank skipped (its call site or its
  next collective shows it), or one a few ranks issued that the others never did; or ranks that issue
  their collectives on two groups in different orders, so that each waits in a group the other has
  not reached ('order').
- MEMBERSHIP: ranks list different members for one group.
- P2P: sends and receives that wait on each other (where the backend records them: NCCL).
- BEHIND: the group stopped at a collective some members never entered, their last one completed: they
  are busy outside communication (or, on gloo, in a send or receive, which gloo does not record).
- MISSING: ranks that left no dump: dead or unreachable.
- COMMUNICATION: every member entered the same collective and none completed it: the transport itself.
"""

from dataclasses import asdict, dataclass, field

from commbench.core.groups import format_ranks

MISMATCH, MEMBERSHIP, P2P, BEHIND, MISSING, COMMUNICATION = (
    "mismatch", "membership", "p2p", "behind", "missing", "communication")
# The order findings are told in: a cause before what it causes.
CLASS_ORDER = (MEMBERSHIP, MISMATCH, P2P, BEHIND, MISSING, COMMUNICATION)
# What a mismatch was: the first difference found, in this order.
DIFFERENT_COLLECTIVE, DIFFERENT_SIZE, DIFFERENT_DTYPE, SKIPPED, EXTRA, ORDER = (
    "collective", "size", "dtype", "skipped", "extra", "order")


def group_label(name: str, desc: str) -> str:
    """'1:mesh_dp'; the bare name without a description; 'unnamed' for a group torch did not register
    (a process group built directly, as commbench's own control group is)."""
    if not name:
        return "unnamed"
    return name if desc in ("", "undefined") else f"{name}:{desc}"


MAX_RANKS_TEXT = 48  # characters of a rank list before it is shortened


def ranks_text(ranks: list[int] | tuple[int, ...]) -> str:
    """'rank 3', 'ranks 0-2, 5', or, for long lists (a data-parallel group of thousands), 'ranks 2-4094
    every 4th' or '1023 ranks: 2, 6, 10, ..., 4094'."""
    text = format_ranks(list(ranks))
    if len(text) <= MAX_RANKS_TEXT:
        return text
    ordered = sorted(set(ranks))
    steps = {later - earlier for earlier, later in zip(ordered, ordered[1:], strict=False)}
    if len(steps) == 1:
        return f"ranks {ordered[0]}-{ordered[-1]} every {steps.pop()}th"
    return f"{len(ordered)} ranks: {', '.join(map(str, ordered[:4]))}, ..., {ordered[-1]}"


@dataclass(frozen=True)
class Operation:
    """One entry as the verdict shows it."""

    seq: int
    op: str  # 'all_reduce'
    recorded: str  # 'gloo:all_reduce'
    sizes: str  # '4' or '4 -> 3x4'
    dtype: str  # 'Float'
    status: str  # 'completed' or 'in flight (scheduled)' / '(started)'
    stack: str = ""  # 'train.py:41 step', the innermost frame outside torch

    def describe(self) -> str:
        return f"#{self.seq} {self.op} [{self.sizes}] {self.dtype}"


@dataclass(frozen=True)
class RankState:
    """Ranks of a group that were last doing the same thing in it (``last`` None: nothing recorded)."""

    ranks: tuple[int, ...]
    last: Operation | None
    note: str = ""  # where else they are: 'in flight in group 2:stuck at #3', 'no dump'


@dataclass(frozen=True)
class Finding:
    kind: str  # one of CLASS_ORDER
    group: str  # the group's label: '1:differs'
    culprits: tuple[int, ...]  # ranks to look at (empty for COMMUNICATION when every member is)
    reading: str  # one line: what happened and where to look next
    detail: str = ""  # a MISMATCH's kind: collective, size, dtype, skipped, extra, order
    seq: int | None = None
    sides: tuple[tuple[tuple[int, ...], Operation], ...] = ()  # the first divergence, side by side
    elsewhere: str = ""  # the groups the culprits are held in instead, ", "-joined (their findings say why)


@dataclass(frozen=True)
class GroupReport:
    name: str
    desc: str
    members: tuple[int, ...]  # with a dump or listed; see members_known
    members_known: bool  # listed by the dumps (pg_config), not inferred from who recorded operations
    stopped_at: Operation | None  # the furthest collective any member reached
    states: tuple[RankState, ...]
    finding: Finding | None = None
    unnamed_missing: int = 0  # members the group's sizes imply that no dump names

    @property
    def label(self) -> str:
        return group_label(self.name, self.desc)


@dataclass
class Verdict:
    source: str
    backend: str
    version: str
    ranks: tuple[int, ...]  # with a dump
    world_size: int
    missing: tuple[int, ...]
    groups: list[GroupReport]
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)

    @property
    def culprit_found(self) -> bool:
        return bool(self.findings)

    def as_dict(self) -> dict:
        return asdict(self) | {"culprit_found": self.culprit_found}
