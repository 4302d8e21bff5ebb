"""The judging of fabric measurements at its edges, on values chosen so that every median and ratio can
be worked out by hand: how many others a rank must reach to be scored, how many peers a measurement needs
to be judged, and what a class's median is when every measurement touches something already named."""

import pytest

from commbench.fabric.outliers import drain_list, find_suspects


def _pairs(count: int, value) -> dict[tuple[int, int], float]:
    """Every directed pair of ``count`` ranks, valued ``value(src, dst)``."""
    return {(src, dst): value(src, dst) for src in range(count) for dst in range(count) if src != dst}


def _thresholds(judged) -> list[tuple[str, float, float | None]]:
    return [(part.pair_class, part.median, part.threshold) for part in judged.classes]


def test_a_rank_whose_measurements_reach_exactly_two_others_is_scored_and_named():
    # rank 0 at 1 GB/s with both others; 1<->2 at 10. Rank 0's score: 1; ranks 1 and 2: the median of
    # 1, 1, 10, 10 = 5.5. Against the median score 5.5 (no spread), rank 0 is 5.5x slow.
    hostnames = ["h0"] * 3
    values = {"bandwidth": _pairs(3, lambda src, dst: 1.0 if 0 in (src, dst) else 10.0)}
    suspects, judged = find_suspects(values, hostnames, [], 2.0)
    assert [suspect.to_dict() for suspect in suspects] == [{
        "kind": "rank", "name": "rank 0 (h0)", "hosts": ["h0"], "ranks": [0], "score": 0.1818,  # 1 / 5.5
        "evidence": ["rank 0 (h0): its 4 intra-node transfers at a median 1.000 GB/s, 0.18x the median of "
                     "the other ranks (5.500 GB/s); 4 of 4 are outliers on their own"]}]
    (basis,) = suspects[0].bases
    assert (basis.pairs, basis.reference, basis.against) == (
        ((0, 1), (0, 2), (1, 0), (2, 0)), 5.5, "the median of the other ranks")
    assert drain_list(suspects) == ["h0"]  # a rank's host is drained
    # what is left to judge against is 1->2 and 2->1: two, too few to judge them, enough to judge rank 0's
    assert _thresholds(judged) == [("intra-node", 10.0, None)]
    assert {(item.src, item.dst) for item in judged.slow()} == {(0, 1), (0, 2), (1, 0), (2, 0)}


def test_two_ranks_of_a_host_with_a_slow_pair_between_them_name_the_link_not_either_rank():
    # each rank's intra-node measurements reach one other rank: the pair is a link, not a rank
    hostnames = ["h0", "h0", "h1", "h1", "h2", "h2", "h3", "h3"]

    def bandwidth(src: int, dst: int) -> float:
        if {src, dst} == {2, 3}:
            return 4.0
        return 40.0 if hostnames[src] == hostnames[dst] else 10.0

    suspects, _ = find_suspects({"bandwidth": _pairs(8, bandwidth)}, hostnames, [], 2.0)
    assert [suspect.to_dict() for suspect in suspects] == [{
        "kind": "link", "name": "2-3 (h1-h1)", "hosts": ["h1"], "ranks": [2, 3], "score": 0.1,
        "evidence": ["2->3 bandwidth 4.000 GB/s, 0.10x the intra-node median (40.000)",
                     "3->2 bandwidth 4.000 GB/s, 0.10x the intra-node median (40.000)"]}]
    assert [basis.against for basis in suspects[0].bases] == ["the intra-node median"] * 2
    assert drain_list(suspects) == []


def test_three_measurements_left_to_judge_against_are_enough_to_name_a_link():
    # 0->1 at 1 GB/s, 1->2 and 2->0 at 10: no rank stands out (scores 5.5, 5.5, 10), and against the
    # three measurements' median 10 (no spread) 0->1 is 10x slow
    hostnames = ["h0"] * 3
    values = {"bandwidth": {(0, 1): 1.0, (1, 2): 10.0, (2, 0): 10.0}}
    suspects, judged = find_suspects(values, hostnames, [], 2.0)
    assert [suspect.label for suspect in suspects] == ["link 0-1 (h0-h0)"]
    assert _thresholds(judged) == [("intra-node", 10.0, pytest.approx(2.0))]


def test_one_measurement_left_to_judge_against_still_judges_those_of_a_named_host():
    # three hosts of one rank, 1->0 not measured. Host pairs: h0-h1 10 (0->1 alone), h0-h2 and h1-h2 1;
    # host scores h0 5.5, h1 5.5, h2 1, so h2 is named, and its four measurements are judged against the
    # one measurement that does not touch it, 0->1
    hostnames = ["h0", "h1", "h2"]
    values = {"bandwidth": {pair: 1.0 if 2 in pair else 10.0 for pair in _pairs(3, lambda src, dst: 0.0)
                            if pair != (1, 0)}}
    suspects, judged = find_suspects(values, hostnames, [], 2.0)
    assert [suspect.evidence for suspect in suspects] == [[
        "host h2: its 4 inter-node transfers at a median 1.000 GB/s, 0.18x the median of the other hosts "
        "(5.500 GB/s); 4 of 4 are outliers on their own"]]
    assert {(item.src, item.dst) for item in judged.slow()} == {(0, 2), (2, 0), (1, 2), (2, 1)}
    assert _thresholds(judged) == [("inter-node", 10.0, None)]


def test_a_class_whose_every_measurement_touches_an_excused_host_keeps_its_own_median_and_judges_nothing():
    # h0 is excused: every inter-node measurement touches it. The class's median is still its own
    # (10, 10, 10, 10, 20, 20, 20, 20: 15), and with no peer left, nothing in it is judged.
    hostnames = ["h0", "h0", "h1", "h1"]

    def bandwidth(src: int, dst: int) -> float:
        if hostnames[src] == hostnames[dst]:
            return 40.0
        return 10.0 if src < dst else 20.0

    suspects, judged = find_suspects({"bandwidth": _pairs(4, bandwidth)}, hostnames, [], 2.0,
                                     frozenset({"h0"}))
    assert suspects == []
    assert _thresholds(judged) == [("intra-node", 40.0, None), ("inter-node", 15.0, None)]
    assert judged.slow() == []
