"""A validated trace onto this world: groups, commbench collectives and each rank's list of operations.

The world-size rule (W ranks recorded, N ranks now): rank r replays recorded rank r mod W, as replica
r // W of the recorded job. Each recorded group G becomes, for every replica j, the group
{g + jW : g in G} restricted to ranks below N (dropped when that leaves no rank). So N = W is the
recording itself; N = kW runs k copies side by side, each on its own groups; N < W keeps recorded
ranks 0..N-1 and shrinks every group to its members among them. A rank keeps its recorded bytes per
operation: the per-rank tensor (RecordedOp.shape) stays, the gathered or scattered side follows the
group size. Operations that cannot be placed (a peer or root outside this world, an all-to-all that
does not split over the new group size) are counted by reason and not replayed.

Point-to-point operations run on the default group between the same two ranks; a recorded group equal
to this world that torch named default_pg is replayed on the default group itself.
"""

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property

from commbench.core.dtypes import element_size
from commbench.core.words import plural
from commbench.measure.collectives import REGISTRY
from commbench.replay.model import P2P_OPS, RecordedGroup, RecordedOp, Shape, Trace, group_order, numel

COLLECTIVE_OF = {
    "all_reduce": "all_reduce", "all_gather": "all_gather_base", "reduce_scatter": "reduce_scatter_base",
    "all_to_all": "all_to_all_single", "broadcast": "broadcast", "reduce": "reduce", "gather": "gather",
    "scatter": "scatter", "barrier": "barrier", "send": "ping", "recv": "ping",
}
DEFAULT_GROUP_DESC = "default_pg"


@dataclass(frozen=True)
class ReplayGroup:
    label: str  # the recorded group's label, '/j' added for replica j when there are several
    desc: str  # given to the process group, so a recording of the replay names it as the original did
    members: tuple[int, ...]  # this world's global ranks, in group-rank order
    is_default: bool  # replayed on the default group instead of a new one
    recorded_size: int  # members of the recorded group

    @cached_property
    def member_set(self) -> frozenset[int]:
        return frozenset(self.members)


@dataclass(frozen=True)
class ReplayOp:
    """One operation of one rank, ready to allocate and issue. ``key`` names its row: the group (or the
    ordered pair of ranks), the collective, dtype, elements per rank and root; shapes may differ within."""

    collective: str  # a commbench collective (collectives.REGISTRY)
    group: str  # a ReplayGroup's label; '' for point-to-point (the default group)
    shape: Shape
    dtype: str
    root: int = 0  # group rank
    peer: int | None = None  # global rank of the other side (ping)
    sends: bool = False  # ping: this rank sends (else receives)
    offset_ns: int | None = None  # recorded time since the rank's first operation
    recorded_us: float | None = None
    key: tuple = ()
    group_size: int = 1

    @property
    def count_per_rank(self) -> int:
        """Elements per rank chunk, in the descriptor's convention (collectives.py)."""
        if self.collective == "barrier":
            return 0
        if self.collective == "all_to_all_single":
            return numel(self.shape) // self.group_size
        return numel(self.shape)

    @property
    def size_bytes(self) -> int:
        count = self.count_per_rank
        return count * REGISTRY[self.collective].shards(self.group_size) * element_size_of(self.dtype) \
            if count else 0


def element_size_of(dtype: str) -> int:
    return {"int16": 2, "bool": 1}.get(dtype) or element_size(dtype)


@dataclass
class ReplayPlan:
    """Every rank's operations on this world, the groups to create (the same list on every rank, in
    creation order), what could not be placed, and what was assumed."""

    world_size: int
    groups: list[ReplayGroup]
    ops: dict[int, list[ReplayOp]]
    unmapped: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    _by_label: dict[str, ReplayGroup] = field(default_factory=dict, repr=False, compare=False)

    def group(self, label: str) -> ReplayGroup:
        if len(self._by_label) != len(self.groups):  # built once: asked once per operation
            self._by_label = {group.label: group for group in self.groups}
        return self._by_label[label]


def _replica_groups(trace: Trace, world_size: int) -> dict[tuple[str, int], ReplayGroup]:
    replicas = math.ceil(world_size / trace.world_size)
    found: dict[tuple[str, int], ReplayGroup] = {}
    for name in sorted(trace.groups, key=group_order):
        recorded = trace.groups[name]
        for replica in range(replicas):
            members = tuple(rank + replica * trace.world_size for rank in recorded.ranks
                            if rank + replica * trace.world_size < world_size)
            if not members:
                continue
            label = recorded.label if replicas == 1 else f"{recorded.label}/{replica}"
            is_default = recorded.desc == DEFAULT_GROUP_DESC and members == tuple(range(world_size))
            found[(name, replica)] = ReplayGroup(label, recorded.desc, members, is_default,
                                                 len(recorded.ranks))
    return found


def _place(op: RecordedOp, recorded: RecordedGroup, group: ReplayGroup, rank: int, replica: int,
           shift: int) -> ReplayOp | str:
    """The operation as ``rank`` replays it, or why it cannot be placed."""
    collective = COLLECTIVE_OF[op.name]
    size = len(group.members)
    if op.name in P2P_OPS:
        peer = recorded.global_rank(op.peer or 0) + shift
        if peer not in group.member_set:  # the replica's group holds exactly the ranks below N
            return f"{op.name} with a peer outside this world"
        source, destination = (rank, peer) if op.name == "send" else (peer, rank)
        key = (f"p2p {source}->{destination}", collective, op.dtype, numel(op.shape))
        return ReplayOp(collective, "", op.shape, op.dtype, peer=peer, sends=op.name == "send",
                        key=key, group_size=2)
    if op.name == "all_to_all" and op.shape and op.shape[0] % size:
        return f"all_to_all of {plural(op.shape[0], 'row')} over {plural(size, 'rank')}"
    root = op.root or 0
    if root >= size:
        return f"{op.name} with a root outside its group in this world"
    key = (group.label, collective, op.dtype, numel(op.shape), root)
    return ReplayOp(collective, group.label, op.shape, op.dtype, root=root, key=key, group_size=size)


def _rank_ops(trace: Trace, groups: dict[tuple[str, int], ReplayGroup], rank: int, unmapped: Counter
              ) -> list[ReplayOp]:
    recorded_rank, replica = rank % trace.world_size, rank // trace.world_size
    shift = replica * trace.world_size
    ops = trace.ops.get(recorded_rank, [])
    start = next((op.created_ns for op in ops if op.created_ns is not None), None)
    placed = []
    for op in ops:
        group = groups[(op.group, replica)]
        found = _place(op, trace.groups[op.group], group, rank, replica, shift)
        if isinstance(found, str):
            unmapped[found] += 1
            continue
        offset = None if start is None or op.created_ns is None else max(0, op.created_ns - start)
        placed.append(replace(found, offset_ns=offset, recorded_us=op.duration_us))
    return placed


def map_trace(trace: Trace, world_size: int) -> ReplayPlan:
    groups = _replica_groups(trace, world_size)
    unmapped: Counter = Counter()
    ops = {rank: _rank_ops(trace, groups, rank, unmapped) for rank in range(world_size)}
    used = {op.group for rank_ops in ops.values() for op in rank_ops if op.group}
    plan = ReplayPlan(world_size, [group for group in groups.values() if group.label in used], ops,
                      unmapped)
    plan.notes.extend(_world_notes(trace, plan))
    unrooted = max(sum(1 for op in rank_ops if op.name in ("broadcast", "reduce") and op.root is None)
                   for rank_ops in trace.ops.values())
    if unrooted:
        plan.notes.append(f"broadcast and reduce without a recorded root (up to {unrooted} per rank): group "
                          "rank 0 assumed")
    reducing = sum(1 for rank_ops in ops.values() for op in rank_ops if REGISTRY[op.collective].reduces)
    if reducing:
        plan.notes.append("reduce ops are not recorded: every reduction replayed as sum")
    return plan


def _world_notes(trace: Trace, plan: ReplayPlan) -> list[str]:
    recorded, now = trace.world_size, plan.world_size
    if now == recorded:
        return []
    if now < recorded:
        notes = [f"recorded on {plural(recorded, 'rank')}, replayed on {now}: recorded ranks "
                 f"{now}..{recorded - 1} are left out and every group keeps only its members below rank "
                 f"{now}"]
    else:
        copies = math.ceil(now / recorded)
        notes = [f"recorded on {plural(recorded, 'rank')}, replayed on {now}: {copies} copies of the job "
                 f"side by side, rank r replaying recorded rank r mod {recorded}"]
    shrunk = [group.label for group in plan.groups if len(group.members) < group.recorded_size]
    if shrunk:
        notes.append(f"groups smaller than recorded in this world: {', '.join(shrunk)}")
    return notes

