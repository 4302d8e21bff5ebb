"""Which pairs of ranks fabric measures, and in which round.

The full schedule is the round-robin "circle" schedule: rank 0 stays in place while the others rotate
one seat per round; seat i meets seat n-1-i. With N ranks (N even) it takes N-1 rounds of N/2 disjoint
pairs and meets every pair exactly once; with N odd an empty seat makes it N rounds, each leaving one
rank out (its bye). A rank is in at most one pair per round, so a round's pairs can run at once.

Sampling (--sample K) keeps K rounds of that schedule, so each rank meets K peers (K-1 in a round that
gives it the bye) and the cost is K rounds, linear in N. The rounds are chosen greedily: first those
that give a host not yet measured against another host an inter-node pair, then those that add the most
(rank, peer host) combinations not yet seen, then those with the most inter-node pairs; ties go to the
earlier round, so the choice is the same on every rank and in every run.
"""

from dataclasses import dataclass

from commbench.errors import UsageError


@dataclass(frozen=True)
class Round:
    """Disjoint pairs (lower rank first, in rank order) and the rank sitting the round out, if any."""

    pairs: tuple[tuple[int, int], ...]
    bye: int | None = None

    def peer(self, rank: int) -> int | None:
        for first, second in self.pairs:
            if rank == first:
                return second
            if rank == second:
                return first
        return None


def circle_rounds(world_size: int) -> list[Round]:
    """The circle schedule of a world (see the module docstring); no rounds for fewer than 2 ranks."""
    if world_size < 2:
        return []
    seats: list[int | None] = [*range(world_size), *([None] if world_size % 2 else [])]
    count = len(seats)
    rounds = []
    for _ in range(count - 1):
        pairs, bye = [], None
        for index in range(count // 2):
            first, second = seats[index], seats[count - 1 - index]
            if first is None or second is None:
                bye = second if first is None else first
                continue
            pairs.append((min(first, second), max(first, second)))
        rounds.append(Round(tuple(sorted(pairs)), bye))
        seats = [seats[0], seats[-1], *seats[1:-1]]  # everyone but seat 0 moves one seat on
    return rounds


def check_sample(sample: int, world_size: int) -> None:
    """UsageError unless a rank can meet ``sample`` distinct peers in this world."""
    if sample < 1:
        raise UsageError(f"--sample {sample} must be at least 1")
    if sample > world_size - 1:
        raise UsageError(f"--sample {sample} is more than the {world_size - 1} peers each rank has in a "
                         f"world of {world_size} ranks")


def _gains(candidate: Round, hostnames: list[str], hosts_seen: set[str], combos_seen: set[tuple[int, str]]
           ) -> tuple[int, int, int]:
    inter = [(a, b) for a, b in candidate.pairs if hostnames[a] != hostnames[b]]
    new_hosts = {hostnames[rank] for pair in inter for rank in pair} - hosts_seen
    combos = {(a, hostnames[b]) for a, b in candidate.pairs} | {(b, hostnames[a]) for a, b in candidate.pairs}
    return len(new_hosts), len(combos - combos_seen), len(inter)


def sample_rounds(rounds: list[Round], hostnames: list[str], sample: int) -> list[Round]:
    """``sample`` rounds of ``rounds`` chosen as the module docstring says, in schedule order."""
    check_sample(sample, len(hostnames))
    left = list(range(len(rounds)))
    chosen: list[int] = []
    hosts_seen: set[str] = set()
    combos_seen: set[tuple[int, str]] = set()
    while len(chosen) < sample and left:
        # max() keeps the first of equal candidates: the earlier round
        best = max(left, key=lambda index: _gains(rounds[index], hostnames, hosts_seen, combos_seen))
        left.remove(best)
        chosen.append(best)
        for a, b in rounds[best].pairs:
            combos_seen.update({(a, hostnames[b]), (b, hostnames[a])})
            if hostnames[a] != hostnames[b]:
                hosts_seen.update({hostnames[a], hostnames[b]})
    return [rounds[index] for index in sorted(chosen)]


def pack_rounds(pairs: list[tuple[int, int]]) -> tuple[Round, ...]:
    """Pairs (lower rank first) into as few rounds as first-fit gives, each rank once per round; the
    same packing on every rank."""
    rounds: list[list[tuple[int, int]]] = []
    for pair in sorted(set(pairs)):
        free = next((found for found in rounds
                     if not {rank for taken in found for rank in taken} & set(pair)), None)
        if free is None:
            rounds.append([pair])
        else:
            free.append(pair)
    return tuple(Round(tuple(sorted(found))) for found in rounds)


@dataclass(frozen=True)
class Schedule:
    """The rounds a fabric pass measures; ``sample`` is --sample's K (None: every pair)."""

    rounds: tuple[Round, ...]
    world_size: int
    sample: int | None = None

    @property
    def pair_count(self) -> int:
        return sum(len(one.pairs) for one in self.rounds)

    def describe(self, serial: bool) -> str:
        rounds = _count(len(self.rounds), "round")
        kind = f"{rounds} sampled (--sample {self.sample})" if self.sample else f"{rounds} (circle schedule)"
        how = "one pair at a time (--serial)" if serial else "the pairs of a round at once"
        return f"{_count(self.pair_count, 'pair')} of {self.world_size} ranks in {kind}, {how}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def make_schedule(hostnames: list[str], sample: int | None) -> Schedule:
    rounds = circle_rounds(len(hostnames))
    if sample is not None:
        rounds = sample_rounds(rounds, hostnames, sample)
    return Schedule(tuple(rounds), len(hostnames), sample)
