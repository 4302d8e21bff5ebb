"""fabric's schedule: the circle rounds meet every pair once; sampling keeps K rounds covering every host."""

import itertools

import pytest

from commbench.errors import UsageError
from commbench.fabric.schedule import check_sample, circle_rounds, make_schedule, sample_rounds


@pytest.mark.parametrize("world_size", range(2, 18))
def test_circle_rounds_meet_every_pair_exactly_once_in_disjoint_rounds(world_size):
    rounds = circle_rounds(world_size)
    assert len(rounds) == (world_size - 1 if world_size % 2 == 0 else world_size)
    met = [pair for one in rounds for pair in one.pairs]
    assert sorted(met) == list(itertools.combinations(range(world_size), 2))
    for one in rounds:
        ranks = [rank for pair in one.pairs for rank in pair]
        assert len(ranks) == len(set(ranks))  # a rank is in at most one pair per round
        left_out = set(range(world_size)) - set(ranks)
        assert left_out == ({one.bye} if world_size % 2 else set())


def test_odd_worlds_give_every_rank_exactly_one_bye():
    byes = [one.bye for one in circle_rounds(9)]
    assert sorted(byes) == list(range(9))


def test_a_round_knows_each_ranks_peer():
    one = circle_rounds(6)[2]
    for first, second in one.pairs:
        assert one.peer(first) == second and one.peer(second) == first
    assert circle_rounds(5)[0].peer(circle_rounds(5)[0].bye) is None


def test_fewer_than_two_ranks_have_no_rounds():
    assert circle_rounds(1) == [] and circle_rounds(0) == []


def _hosts(host_count: int, per_host: int) -> list[str]:
    return [f"node{rank // per_host}" for rank in range(host_count * per_host)]


@pytest.mark.parametrize("host_count, per_host, sample", [(8, 4, 1), (8, 4, 3), (5, 2, 2), (16, 8, 2),
                                                          (3, 1, 2), (7, 1, 3)])
def test_sampling_keeps_k_rounds_and_measures_every_host_against_another(host_count, per_host, sample):
    hostnames = _hosts(host_count, per_host)
    rounds = sample_rounds(circle_rounds(len(hostnames)), hostnames, sample)
    assert len(rounds) == sample
    peers = {rank: set() for rank in range(len(hostnames))}
    for one in rounds:
        for first, second in one.pairs:
            peers[first].add(second)
            peers[second].add(first)
    assert all(sample - 1 <= len(found) <= sample for found in peers.values())
    inter_hosts = {hostnames[rank] for one in rounds for pair in one.pairs for rank in pair
                   if hostnames[pair[0]] != hostnames[pair[1]]}
    assert inter_hosts == set(hostnames)


def test_sampling_prefers_rounds_that_cross_hosts():
    hostnames = _hosts(4, 4)  # ranks 0-3 on node0, ...: some circle rounds are mostly intra-node
    everything = circle_rounds(16)
    chosen = sample_rounds(everything, hostnames, 2)

    def crossing(one):
        return sum(hostnames[a] != hostnames[b] for a, b in one.pairs)

    assert sum(map(crossing, chosen)) >= sum(sorted(map(crossing, everything))[-2:]) - 2


def test_sampling_is_the_same_every_time():
    hostnames = _hosts(6, 3)
    assert make_schedule(hostnames, 3) == make_schedule(list(hostnames), 3)


@pytest.mark.parametrize("sample, world_size, message", [(0, 4, "at least 1"), (4, 4, "3 peers"),
                                                         (9, 8, "7 peers")])
def test_a_sample_no_rank_can_have_is_refused(sample, world_size, message):
    with pytest.raises(UsageError, match=message):
        check_sample(sample, world_size)


def test_the_schedule_describes_its_cost():
    schedule = make_schedule(_hosts(2, 2), None)
    assert schedule.pair_count == 6 and len(schedule.rounds) == 3
    assert "6 pairs of 4 ranks in 3 rounds" in schedule.describe(serial=False)
    assert "1 pair of 2 ranks in 1 round" in make_schedule(_hosts(1, 2), None).describe(serial=False)
    assert "one pair at a time" in schedule.describe(serial=True)


def test_pairs_measured_again_keep_their_rounds_and_leave_the_rest_out():
    schedule = make_schedule(_hosts(3, 2), None)  # 6 ranks: 5 rounds of 3 pairs
    wanted = [(2, 0), (0, 2), (1, 4), (3, 5)]  # a pair given either way round, or twice, is one pair
    wanted = [(min(pair), max(pair)) for pair in wanted]
    rounds = schedule.holding(wanted)
    assert sorted(pair for one in rounds for pair in one.pairs) == sorted(set(wanted))
    # each pair in the round that held it in the pass: disjoint pairs, and no more rounds than the pass
    for one in rounds:
        (original,) = [known for known in schedule.rounds if set(one.pairs) <= set(known.pairs)]
        ranks = [rank for pair in one.pairs for rank in pair]
        assert len(ranks) == len(set(ranks)) and original.pairs != one.pairs
    assert len(rounds) <= len(schedule.rounds)
    assert schedule.holding([]) == ()
