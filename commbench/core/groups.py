"""Sub-communicators: how the world splits into groups that run the same collective at the same time.

A plan is data (which global ranks form each group); launch turns it into process groups once, through
the backend, and the runner gives each rank its own group. Every group has the same size, so sizes,
buffer plans, roots and bus-bandwidth factors are the same for all of them.
"""

from dataclasses import dataclass
from typing import Any

from commbench.core.words import plural
from commbench.errors import UsageError

LAYOUTS = ("contiguous", "strided")
PRESETS = ("intra-node", "inter-node")
WORLD = "world"  # the layout recorded when the whole world is one group


@dataclass(frozen=True)
class GroupPlan:
    """The groups of a run: ``members[g]`` are the global ranks of group g, in group-rank order, which
    is ascending: torch's new_group sorts the ranks it is given, and a group's root and peers are
    group ranks, so the plan numbers them as torch does."""

    layout: str  # world, contiguous, strided, intra-node or inter-node
    members: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(tuple(sorted(ranks)) for ranks in self.members))

    @property
    def size(self) -> int:
        return len(self.members[0])

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def is_world(self) -> bool:
        return self.count == 1

    def group_of(self, rank: int) -> int:
        for index, ranks in enumerate(self.members):
            if rank in ranks:
                return index
        raise ValueError(f"rank {rank} is in no group")

    def group_rank(self, rank: int) -> int:
        return self.members[self.group_of(rank)].index(rank)

    def describe(self) -> str:
        if self.is_world:
            return "one group: the world"
        return f"{self.count} groups of {self.size} ({self.layout})"

    def as_dict(self) -> dict:
        return {"layout": self.layout, "size": self.size, "count": self.count,
                "members": [list(ranks) for ranks in self.members]}


@dataclass(frozen=True)
class Membership:
    """One rank's place in the plan: its group's process group (None: the world) and its rank within
    the group."""

    plan: GroupPlan
    process_group: Any
    group_rank: int


def world_plan(world_size: int) -> GroupPlan:
    return GroupPlan(WORLD, (tuple(range(world_size)),))


def check_group_options(group_size: int | None, group_layout: str | None, groups: str | None) -> None:
    """What can be checked without knowing the world: the combinations (each value is one of its
    choices, as config.launch declares them)."""
    if groups is not None and (group_size is not None or group_layout is not None):
        raise UsageError(f"--groups {groups} sets the groups from the hosts: drop --group-size and "
                         "--group-layout")
    if group_layout is not None and group_size is None:
        raise UsageError(f"--group-layout {group_layout} needs --group-size")
    if group_size is not None and group_size < 2:
        raise UsageError(f"--group-size {group_size}: a group needs at least 2 ranks")


def split_world(world_size: int, group_size: int, layout: str = "contiguous") -> GroupPlan:
    """world_size / group_size groups: contiguous [0..K-1], [K..2K-1], ...; strided r, r+G, r+2G, ...
    (G = the number of groups). UsageError when the size does not divide the world."""
    if group_size < 2:
        raise UsageError(f"--group-size {group_size}: a group needs at least 2 ranks")
    if world_size % group_size:
        divisors = [d for d in range(2, world_size + 1) if world_size % d == 0]
        hint = f"choose one of {', '.join(map(str, divisors))}" if divisors else "it has no group of 2+"
        raise UsageError(f"--group-size {group_size} does not divide the world of "
                         f"{plural(world_size, 'rank')}: {hint}")
    count = world_size // group_size
    if count == 1:
        return world_plan(world_size)
    if layout == "contiguous":
        members = tuple(tuple(range(g * group_size, (g + 1) * group_size)) for g in range(count))
    elif layout == "strided":
        members = tuple(tuple(range(g, world_size, count)) for g in range(count))
    else:
        raise UsageError(f"unknown --group-layout {layout!r}; choose contiguous or strided")
    return GroupPlan(layout, members)


def ranks_by_host(hostnames: list[str]) -> dict[str, list[int]]:
    """Host -> its ranks in rank order, hosts in the order of their first rank."""
    hosts: dict[str, list[int]] = {}
    for rank, host in enumerate(hostnames):
        hosts.setdefault(host, []).append(rank)
    return hosts


def split_by_hosts(hostnames: list[str], preset: str) -> GroupPlan:
    """intra-node: the ranks sharing each host; inter-node: the i-th rank of every host.

    Every host must run the same number of ranks so that every group has the same size; UsageError
    (naming the hosts) otherwise.
    """
    hosts = ranks_by_host(hostnames)
    counts = {host: len(ranks) for host, ranks in hosts.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{host}: {count}" for host, count in list(counts.items())[:8])
        raise UsageError(f"--groups {preset}: the hosts run different numbers of ranks ({shown}), so the "
                         "groups would differ in size")
    per_host = next(iter(counts.values()))
    world_size = len(hostnames)
    if preset == "intra-node":
        if per_host < 2:
            raise UsageError(f"--groups intra-node: every host runs one rank ({plural(len(hosts), 'host')}); "
                             "a group needs at least 2 ranks on a host")
        if len(hosts) == 1:
            return GroupPlan(preset, (tuple(range(world_size)),))
        return GroupPlan(preset, tuple(tuple(ranks) for ranks in hosts.values()))
    if preset == "inter-node":
        if len(hosts) < 2:
            raise UsageError(f"--groups inter-node: all {plural(world_size, 'rank')} run on one host "
                             f"({next(iter(hosts))}); inter-node groups need ranks on at least 2 hosts")
        if per_host == 1:
            return GroupPlan(preset, (tuple(range(world_size)),))
        return GroupPlan(preset, tuple(tuple(ranks[i] for ranks in hosts.values()) for i in range(per_host)))
    raise UsageError(f"unknown --groups {preset!r}; choose intra-node or inter-node")


def format_ranks(ranks: list[int]) -> str:
    """'rank 3' or 'ranks 0-2, 5' for messages."""
    ordered = sorted(set(ranks))
    spans: list[str] = []
    start = previous = None
    for rank in ordered:
        if previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = rank
    if start is not None:
        spans.append(str(start) if start == previous else f"{start}-{previous}")
    return ("rank " if len(ordered) == 1 else "ranks ") + ", ".join(spans)
