"""Which pairs of ranks fabric measures, and in which round.

The full schedule is the round-robin "circle" schedule: rank 0 stays in place while the others rotate
one seat per round; seat i meets seat n-1-i. With N ranks (N even) it takes N-1 rounds of N/2 disjoint
pairs and meets every pair exactly once; with N odd an empty seat makes it N rounds, each leaving one
rank out (its bye). A rank is in at most one pair per round, so a round's pairs can run at once.

Sampling (--sample K) keeps K rounds of that schedule, so each rank meets K peers (K-1 in a round that
gives it the bye) and the cost is K rounds, linear in N. The rounds are chosen greedily: first those
that give a host not yet measured against another host an inter-node pair, then those that add the most
(rank, peer host) combinations not yet seen, then those with the most inter-node pairs; ties go to the
earlier round, so the choice is the same on every rank and in every run. Beyond CANDIDATE_ROUNDS + 1
ranks the choice is among CANDIDATE_ROUNDS rounds (or 2K) spread evenly over the schedule, each computed
alone (circle_round): choosing costs time in N, where looking at all N-1 rounds would cost N^2 (294 s at
4,096 ranks, scripts/bench_scale.py).
"""

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from commbench.core.words import plural
from commbench.errors import UsageError

CANDIDATE_ROUNDS = 128  # a large world's --sample chooses among this many rounds (or 2K), evenly spread


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


def circle_round(world_size: int, index: int) -> Round:
    """Round ``index`` of the circle schedule, computed alone (a large world's sampling looks at a few of
    its N-1 rounds; building them all would cost time and memory in N^2). After ``index`` rounds, seat
    i > 0 holds rank 1 + ((i - 1 - index) mod (seats - 1)): everyone but seat 0 has moved ``index``
    seats on; the empty seat of an odd world is the last rank's number, world_size."""
    count = world_size + world_size % 2
    moving = count - 1
    ranks = _ranks(world_size)  # the same int objects in every round: a full schedule holds N^2 of them

    def seated(seat: int) -> int | None:
        rank = 0 if seat == 0 else 1 + (seat - 1 - index) % moving
        return None if rank == world_size else ranks[rank]

    pairs, bye = [], None
    for seat in range(count // 2):
        first, second = seated(seat), seated(count - 1 - seat)
        if first is None or second is None:
            bye = second if first is None else first
            continue
        pairs.append((min(first, second), max(first, second)))
    return Round(tuple(sorted(pairs)), bye)


@lru_cache(maxsize=4)
def _ranks(world_size: int) -> tuple[int, ...]:
    return tuple(range(world_size))


def circle_rounds(world_size: int) -> list[Round]:
    """The circle schedule of a world (see the module docstring); no rounds for fewer than 2 ranks."""
    if world_size < 2:
        return []
    return [circle_round(world_size, index) for index in range(world_size + world_size % 2 - 1)]


def check_sample(sample: int, world_size: int) -> None:
    """UsageError unless a rank can meet ``sample`` distinct peers in this world."""
    if sample < 1:
        raise UsageError(f"--sample {sample} must be at least 1")
    if sample > world_size - 1:
        raise UsageError(f"--sample {sample} is more than the {plural(world_size - 1, 'peer')} each rank has "
                         f"in a world of {plural(world_size, 'rank')}")


def _gains(candidate: Round, hostnames: list[str], hosts_seen: set[str], combos_seen: set[tuple[int, str]]
           ) -> tuple[int, int, int]:
    inter = [(a, b) for a, b in candidate.pairs if hostnames[a] != hostnames[b]]
    new_hosts = {hostnames[rank] for pair in inter for rank in pair} - hosts_seen
    combos = {(a, hostnames[b]) for a, b in candidate.pairs} | {(b, hostnames[a]) for a, b in candidate.pairs}
    return len(new_hosts), len(combos - combos_seen), len(inter)


def sample_rounds(rounds: list[Round], hostnames: list[str], sample: int) -> list[Round]:
    """``sample`` rounds of ``rounds`` chosen as the module docstring says, in schedule order.

    A round's gains only fall as rounds are chosen (the third, its inter-node pairs, stays), so the
    gains last computed for a round bound its gains now: only a round that could still beat the best
    is computed again ("lazy" greedy; the same choice as computing every round's gains every time)."""
    check_sample(sample, len(hostnames))
    hosts_seen: set[str] = set()
    combos_seen: set[tuple[int, str]] = set()

    def key(index: int) -> tuple[tuple[int, ...], int]:  # the smallest is the best: ties to the earlier
        return tuple(-gain for gain in _gains(rounds[index], hostnames, hosts_seen, combos_seen)), index

    candidates = [key(index) for index in range(len(rounds))]
    heapq.heapify(candidates)
    chosen: list[int] = []
    while len(chosen) < sample and candidates:
        _, best = heapq.heappop(candidates)
        now = key(best)
        if candidates and now > candidates[0]:
            heapq.heappush(candidates, now)
            continue
        chosen.append(best)
        for a, b in rounds[best].pairs:
            combos_seen.update({(a, hostnames[b]), (b, hostnames[a])})
            if hostnames[a] != hostnames[b]:
                hosts_seen.update({hostnames[a], hostnames[b]})
    return [rounds[index] for index in sorted(chosen)]


def sample_candidates(world_size: int, sample: int) -> list[Round]:
    """The rounds --sample chooses from: every round of the schedule, or in a world of more than
    CANDIDATE_ROUNDS + 1 ranks that many (at least twice K) spread evenly over it, each computed alone,
    so that sampling a large world costs time in N, not N^2."""
    total = world_size + world_size % 2 - 1
    wanted = max(CANDIDATE_ROUNDS, 2 * sample)
    if total <= wanted:
        return circle_rounds(world_size)
    indices = sorted({round(position * (total - 1) / (wanted - 1)) for position in range(wanted)})
    return [circle_round(world_size, index) for index in indices]


@dataclass(frozen=True)
class Schedule:
    """The rounds a fabric pass measures; ``sample`` is --sample's K (None: every pair)."""

    rounds: tuple[Round, ...]
    world_size: int
    sample: int | None = None

    @property
    def pair_count(self) -> int:
        return sum(len(one.pairs) for one in self.rounds)

    def holding(self, pairs: Iterable[tuple[int, int]]) -> tuple[Round, ...]:
        """The rounds that hold any of ``pairs`` (lower rank first), each with those pairs alone: measuring
        a subset of a pass's pairs again takes at most the pass's rounds, and runs each pair beside the
        same pairs as before, as far as they are measured again too."""
        wanted = set(pairs)
        kept = (tuple(pair for pair in one.pairs if pair in wanted) for one in self.rounds)
        return tuple(Round(found) for found in kept if found)

    def describe(self, serial: bool) -> str:
        rounds = plural(len(self.rounds), "round")
        kind = f"{rounds} sampled (--sample {self.sample})" if self.sample else f"{rounds} (circle schedule)"
        how = "one pair at a time (--serial)" if serial else "the pairs of a round at once"
        return f"{plural(self.pair_count, 'pair')} of {self.world_size} ranks in {kind}, {how}"


def make_schedule(hostnames: list[str], sample: int | None) -> Schedule:
    world_size = len(hostnames)
    if sample is None:
        return Schedule(tuple(circle_rounds(world_size)), world_size)
    check_sample(sample, world_size)
    chosen = sample_rounds(sample_candidates(world_size, sample), hostnames, sample)
    return Schedule(tuple(chosen), world_size, sample)
