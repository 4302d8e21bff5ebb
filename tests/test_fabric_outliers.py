"""The outlier rule and the blame on values built here: quiet fabrics name nobody, a slow host, rank or
link is named alone, and only once measured again and slow every time (else it is transient), nothing on
an oversubscribed host is named, the verdict states its thresholds, and a soak's spikes are found on the
pair that had them."""

import math
import random
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.fabric.analysis import analyse, crowded_hosts, run_crowding, suspects_of, usable_cpus_of
from commbench.fabric.confirm import RECHECK, SLOW_IN, ConfirmationPlan, plan_confirmation
from commbench.fabric.drift import drift_line, pair_spikes, pass_medians, spike_pair
from commbench.fabric.matrices import KIND, NodeResult
from commbench.fabric.outliers import drain_list, find_suspects
from commbench.measure.robust import BANDWIDTH, LATENCY, slow_mask
from commbench.results.model import Row
from tests.test_robust import textbook_spread


def _hosts(host_count: int, per_host: int) -> list[str]:
    return [f"h{rank // per_host}" for rank in range(host_count * per_host)]


def _fabric(hostnames: list[str], noise: float, seed: int = 1, intra_gbps: float = 40.0,
            inter_gbps: float = 10.0) -> dict[str, dict[tuple[int, int], float]]:
    """Every directed pair: bandwidth and latency, each times a random factor in [1/noise, noise]."""
    generator = random.Random(seed)
    values: dict[str, dict[tuple[int, int], float]] = {"bandwidth": {}, "latency": {}}
    for src in range(len(hostnames)):
        for dst in range(len(hostnames)):
            if src == dst:
                continue
            intra = hostnames[src] == hostnames[dst]
            bandwidth, latency = (intra_gbps, 2.0) if intra else (inter_gbps, 8.0)
            values["bandwidth"][(src, dst)] = bandwidth * noise ** generator.uniform(-1, 1)
            values["latency"][(src, dst)] = latency * noise ** generator.uniform(-1, 1)
    return values


def _slow_down(values, metric: str, touching, factor: float) -> None:
    for pair in values[metric]:
        if touching(*pair):
            values[metric][pair] *= factor


def _names(values, hostnames, nodes=(), factor=2.0) -> list[str]:
    suspects, _ = find_suspects(values, hostnames, list(nodes), factor)
    return [suspect.label for suspect in suspects]


@pytest.mark.parametrize("noise, seed", [(1.05, 1), (1.3, 2), (1.6, 3), (1.9, 4)])
@pytest.mark.parametrize("host_count, per_host", [(5, 2), (3, 2), (8, 1), (1, 4)])
def test_a_fabric_without_a_bad_part_names_nobody(host_count, per_host, noise, seed):
    hostnames = _hosts(host_count, per_host)
    assert _names(_fabric(hostnames, noise, seed), hostnames) == []


@pytest.mark.parametrize("host_count, per_host, noise", [(5, 2, 1.1), (3, 2, 1.1), (3, 1, 1.1), (5, 1, 2.5),
                                                         (8, 4, 1.5)])
def test_one_slow_host_is_named_and_nothing_else(host_count, per_host, noise):
    hostnames = _hosts(host_count, per_host)
    values = _fabric(hostnames, noise)
    slow_host = f"h{host_count - 1}"
    _slow_down(values, "bandwidth", lambda a, b: slow_host in (hostnames[a], hostnames[b])
               and hostnames[a] != hostnames[b], 0.08)
    suspects, judged = find_suspects(values, hostnames, [], 2.0)
    assert [(suspect.kind, suspect.name) for suspect in suspects] == [("host", slow_host)]
    inter = 2 * per_host * per_host * (host_count - 1)
    assert f"its {inter} inter-node transfers" in suspects[0].evidence[0]
    if noise < 2:  # noisier measurements are not outliers one by one; the host's median still is
        assert f"{inter} of {inter} are outliers on their own" in suspects[0].evidence[0]
    assert drain_list(suspects) == [slow_host]
    slow = {(item.src, item.dst) for item in judged if item.slow}
    assert all(slow_host in (hostnames[a], hostnames[b]) for a, b in slow)


def test_among_three_hosts_one_disturbed_measurement_between_the_good_two_hides_nothing():
    """The bandwidth of a run on test hosts with h1's link slowed (tests/test_fabric_netns.py): half of
    h0's and h2's measurements are with h1, and 0->5 (0.027) was disturbed; a median over each host's own
    measurements put h0 and h2 at 0.02 and named nobody, where the host pairs' medians name h1."""
    matrix = [[None, 0.4548, 0.0130, 0.0106, 0.6024, 0.0272], [0.4588, None, 0.0082, 0.0128, 0.4706, 0.3422],
              [0.0126, 0.0090, None, 0.1442, 0.0111, 0.0123], [0.0129, 0.0111, 0.3158, None, 0.0125, 0.0121],
              [0.7801, 0.5913, 0.0122, 0.0125, None, 0.0659], [0.5912, 0.6858, 0.0128, 0.0111, 0.0355, None]]
    values = {"bandwidth": {(src, dst): value for src, line in enumerate(matrix)
                            for dst, value in enumerate(line) if value is not None}}
    hostnames = _hosts(3, 2)
    suspects, _ = find_suspects(values, hostnames, [], 4.0)
    # and the disturbed measurement, 18x below the other h0-h2 transfers, is a suspect to measure again
    assert [suspect.label for suspect in suspects] == ["host h1", "link 0-5 (h0-h2)"]


@pytest.mark.parametrize("host_count", [4, 2])
def test_a_slow_gpu_names_its_rank_not_its_host(host_count):
    hostnames = _hosts(host_count, 4)
    values = _fabric(hostnames, 1.2)
    _slow_down(values, "bandwidth", lambda a, b: 5 in (a, b), 0.2)
    names = _names(values, hostnames)
    assert names == ["rank 5 (h1)"]


def test_a_slow_link_names_the_link_alone():
    hostnames = _hosts(4, 2)
    values = _fabric(hostnames, 1.2)
    _slow_down(values, "bandwidth", lambda a, b: {a, b} == {2, 7}, 0.2)
    suspects, _ = find_suspects(values, hostnames, [], 2.0)
    assert [(suspect.kind, suspect.name) for suspect in suspects] == [("link", "2-7 (h1-h3)")]
    assert len(suspects[0].evidence) == 2  # both directions
    assert drain_list(suspects) == []  # a link is not a host to drain


def test_with_two_hosts_a_bad_inter_node_link_is_a_link():
    hostnames = _hosts(2, 2)
    values = _fabric(hostnames, 1.1)
    _slow_down(values, "bandwidth", lambda a, b: {a, b} == {0, 3}, 0.1)
    assert _names(values, hostnames) == ["link 0-3 (h0-h1)"]


def test_a_host_with_slow_latency_is_named_on_latency():
    hostnames = _hosts(5, 1)
    values = _fabric(hostnames, 1.2)
    _slow_down(values, "latency", lambda a, b: 2 in (a, b), 6.0)
    suspects, _ = find_suspects(values, hostnames, [], 2.0)
    assert [suspect.name for suspect in suspects] == ["h2"]
    assert "ping-pongs" in suspects[0].evidence[0] and "µs" in suspects[0].evidence[0]


def test_the_slow_factor_is_the_least_gap_that_names_anything():
    hostnames = _hosts(6, 1)
    values = _fabric(hostnames, 1.01)  # a very quiet fabric: a tiny MAD
    _slow_down(values, "bandwidth", lambda a, b: 4 in (a, b), 0.6)
    assert _names(values, hostnames, factor=2.0) == []
    assert _names(values, hostnames, factor=1.5) == ["host h4"]


def test_a_host_whose_intra_node_all_reduce_is_slow_is_named():
    hostnames = _hosts(4, 2)
    nodes = [NodeResult("intra-node", f"h{index}", 2, 30.0 if index != 1 else 6.0, 100.0)
             for index in range(4)]
    suspects, _ = find_suspects(_fabric(hostnames, 1.1), hostnames, nodes, 2.0)
    assert [suspect.name for suspect in suspects] == ["h1"]
    assert "intra-node all_reduce" in suspects[0].evidence[0] and suspects[0].ranks == [2, 3]


def _every_pair(hostnames: list[str], value) -> dict[tuple[int, int], float]:
    return {(src, dst): value(src, dst) for src in range(len(hostnames)) for dst in range(len(hostnames))
            if src != dst}


def test_a_host_slow_on_latency_is_named_in_ping_pongs_against_the_other_hosts():
    # four hosts of one rank, h3's ping-pongs at 80 us and the rest at 8: h3's score is 80, the others' 8
    hostnames = _hosts(4, 1)
    values = {"latency": _every_pair(hostnames, lambda src, dst: 80.0 if 3 in (src, dst) else 8.0)}
    suspects, _ = find_suspects(values, hostnames, [], 2.0)
    assert [suspect.to_dict() for suspect in suspects] == [{
        "kind": "host", "name": "h3", "hosts": ["h3"], "ranks": [3], "score": 0.1,
        "evidence": ["host h3: its 6 inter-node ping-pongs at a median 80.0 µs, 10.00x the median of the "
                     "other hosts (8.0 µs); 6 of 6 are outliers on their own"]}]
    assert [basis.against for basis in suspects[0].bases] == ["the median of the other hosts"]


def test_a_host_named_on_bandwidth_explains_a_rank_of_it_slow_on_latency():
    # h1 (ranks 4-7) slow across hosts on bandwidth; on latency only its rank 5 is slow, a quarter of
    # h1's measurements, which leaves h1's host medians alone: h1 is named once, and nothing more
    hostnames = _hosts(4, 4)
    values = {
        "bandwidth": _every_pair(hostnames, lambda src, dst: 40.0 if hostnames[src] == hostnames[dst]
                                 else 1.0 if "h1" in (hostnames[src], hostnames[dst]) else 10.0),
        "latency": _every_pair(hostnames, lambda src, dst: (2.0 if hostnames[src] == hostnames[dst] else 8.0)
                               * (10.0 if 5 in (src, dst) else 1.0))}
    suspects, _ = find_suspects(values, hostnames, [], 2.0)
    assert [(suspect.label, suspect.evidence) for suspect in suspects] == [("host h1", [
        "host h1: its 96 inter-node transfers at a median 1.000 GB/s, 0.10x the median of the other hosts "
        "(10.000 GB/s); 96 of 96 are outliers on their own"])]


def test_a_rank_named_on_bandwidth_is_not_blamed_again_on_latency():
    # one host of four ranks, rank 0 slow on both: its bandwidth names it; on latency it explains its own
    # measurements, so no second sentence (and no link from them)
    hostnames = _hosts(1, 4)
    values = {"bandwidth": _every_pair(hostnames, lambda src, dst: 1.0 if 0 in (src, dst) else 10.0),
              "latency": _every_pair(hostnames, lambda src, dst: 20.0 if 0 in (src, dst) else 2.0)}
    suspects, _ = find_suspects(values, hostnames, [], 2.0)
    assert [(suspect.label, suspect.evidence) for suspect in suspects] == [("rank 0 (h0)", [
        "rank 0 (h0): its 6 intra-node transfers at a median 1.000 GB/s, 0.10x the median of the other ranks "
        "(10.000 GB/s); 6 of 6 are outliers on their own"])]
    assert drain_list(suspects) == ["h0"]
    # an excused host that ran no rank of this run changes nothing
    again, _ = find_suspects(values, hostnames, [], 2.0, frozenset({"h9"}))
    assert [suspect.to_dict() for suspect in again] == [suspect.to_dict() for suspect in suspects]


def test_only_the_intra_node_all_reduces_of_hosts_not_excused_are_compared():
    hostnames = _hosts(4, 2)
    values = {"bandwidth": _every_pair(hostnames, lambda src, dst: 40.0 if hostnames[src] == hostnames[dst]
                                       else 10.0)}
    nodes = [NodeResult("intra-node", f"h{index}", 2, 6.0 if index == 1 else 30.0, 100.0)
             for index in range(4)]
    nodes += [NodeResult("intra-node", "h5", 2, None, 100.0),  # no bandwidth measured: left out
              NodeResult("inter-node", "", 4, 1.0, 100.0)]  # across hosts: no one host's
    suspects, _ = find_suspects(values, hostnames, nodes, 2.0)
    assert [suspect.to_dict() for suspect in suspects] == [{
        "kind": "host", "name": "h1", "hosts": ["h1"], "ranks": [2, 3], "score": 0.2,
        "evidence": ["host h1: its intra-node all_reduce at 6.000 GB/s bus bandwidth, 0.20x the median of 4 "
                     "hosts (30.000 GB/s)"]}]
    assert drain_list(suspects) == ["h1"]
    # excused (too few CPUs), h1 is neither named nor a reference: the other three agree
    excused, _ = find_suspects(values, hostnames, nodes, 2.0, frozenset({"h1"}))
    assert excused == []
    # a host that ran no listed rank (here h3 of four ranks on two hosts) is still named, with no ranks
    slow_h3 = [NodeResult("intra-node", f"h{index}", 2, 6.0 if index == 3 else 30.0, 100.0)
               for index in range(4)]
    (named,), _ = find_suspects({}, _hosts(2, 2), slow_h3, 2.0)
    assert (named.name, named.hosts, named.ranks) == ("h3", ["h3"], [])


def test_fewer_than_three_peers_judge_nothing():
    hostnames = _hosts(2, 1)  # one pair: two measurements per metric
    values = _fabric(hostnames, 1.0)
    values["bandwidth"][(0, 1)] *= 0.01
    assert _names(values, hostnames) == []


def test_the_rule_works_on_ratios_both_ways():
    assert slow_mask([1.0, 6.0], 10.0, 0.0, BANDWIDTH, 2.0).tolist() == [True, False]
    assert slow_mask([20.0, 15.0], 10.0, 0.0, LATENCY, 2.0).tolist() == [True, False]
    assert slow_mask([1.0], 10.0, 1.0, BANDWIDTH, 2.0).tolist() == [False]  # 10x off, within 4 spreads of ln


def _row(src: int, dst: int, gbps: float, repeat: int) -> Row:
    time_us = 1e6 / gbps / 1e3  # 1 MB
    return Row(collective="p2p_uni", backend="gloo", device="cpu", world_size=4, dtype="uint8", mode="sync",
               op="", size_bytes=10**6, requested_bytes=10**6, count_per_rank=10**6, iters=1, warmup=0,
               time_us_p50=time_us, time_us_p95=time_us, time_us_min=time_us, time_us_max=time_us,
               time_us_mean=time_us, algbw_gbps=gbps, busbw_gbps=gbps, busbw_factor=1.0, pattern=KIND,
               src_rank=src, dst_rank=dst, repeat=repeat, elapsed_s=10.0 * repeat + src)


def test_a_flaky_pair_shows_as_spikes_on_that_pair_only():
    generator = random.Random(7)
    flaky = {(1, 2, 3), (1, 2, 6)}  # pair 1->2 in passes 3 and 6
    rows = []
    for repeat in range(8):
        for src in range(4):
            for dst in set(range(4)) - {src}:
                drop = 0.1 if (src, dst, repeat) in flaky else 1.0
                rows.append(_row(src, dst, 10.0 * 1.2 ** generator.uniform(-1, 1) * drop, repeat))
    spikes = pair_spikes(rows, 2.0)
    assert [(spike_pair(spike), spike.passes) for spike in spikes] == [((1, 2), [3, 6])]
    assert spikes[0].elapsed_s == [31.0, 61.0]
    analysis = analyse(rows, _hosts(4, 1), 2.0)
    assert analysis.suspects == []  # its median over the passes is fine: a spike is a view, not a suspect
    assert len(pass_medians(rows)) == 8


def test_drift_compares_the_first_pass_with_the_last():
    rows = [_row(0, 1, gbps, repeat) for repeat, gbps in enumerate([10.0, 9.0, 8.0])]
    line = drift_line(pass_medians(rows))
    assert line is not None and "10.000 -> 8.000 GB/s over 3 passes (-20.0%" in line
    assert drift_line(pass_medians(rows[:1])) is None


def _pass(hostnames: list[str], slow: dict[tuple[int, int], float], phase: str = "concurrent") -> list[Row]:
    generator = random.Random(3)
    rows = []
    for src in range(len(hostnames)):
        for dst in set(range(len(hostnames))) - {src}:
            rows.append(_row(src, dst, 10.0 * 1.1 ** generator.uniform(-1, 1) * slow.get((src, dst), 1.0), 0))
            rows[-1].phase = phase
    return rows


def _again(hostnames: list[str], slow: dict[tuple[int, int], float], pairs: set[frozenset[int]]) -> list[Row]:
    """A confirmation's rows: ``pairs`` measured again (phase recheck), ``slow`` slowed as before."""
    return [row for row in _pass(hostnames, slow, RECHECK)
            if frozenset((row.src_rank, row.dst_rank)) in pairs]


def _plan(rows: list[Row], hostnames: list[str], excused: frozenset[str] = frozenset()) -> ConfirmationPlan:
    return plan_confirmation(suspects_of(rows, hostnames, 2.0, excused), rows)


def test_a_link_slow_once_is_measured_again_and_only_named_when_slow_every_time():
    hostnames = _hosts(4, 1)
    link = {frozenset((1, 2))}
    first = _pass(hostnames, {(1, 2): 0.1})
    plan = _plan(first, hostnames)
    assert plan == ConfirmationPlan(("link 1-2 (h1-h2)",), ((1, 2),), False)
    assert "confirmation 1 of at most 3: link 1-2 (h1-h2): 1 pair measured again" == plan.note(1)

    cleared = first + _again(hostnames, {}, link)
    assert _plan(cleared, hostnames) == ConfirmationPlan()  # nothing left to measure again
    analysis = analyse(cleared, hostnames, 2.0)
    assert analysis.suspects == []
    assert [item.suspect.label for item in analysis.transients] == ["link 1-2 (h1-h2)"]
    (measured,) = analysis.transients[0].measured
    assert measured.what == "1->2 bandwidth" and measured.against == "the inter-node median"
    assert measured.ratios[0] < 0.15 and 0.8 < measured.ratios[1] < 1.25  # slow once, then not
    lines = analysis.verdict_lines()
    assert lines[0].startswith("verdict: nothing suspicious")
    assert any(line.startswith("transient: link 1-2 (h1-h2): 1->2 bandwidth 0.") and ", then " in line
               for line in lines), lines
    saved = analysis.to_dict()["transient"][0]["measured"][0]
    assert saved["ratios"] == [round(ratio, 4) for ratio in measured.ratios]

    rows = first
    for _ in range(SLOW_IN - 1):  # slow each time: measured again until it has been measured SLOW_IN times
        assert _plan(rows, hostnames).pairs == ((1, 2),)
        rows = rows + _again(hostnames, {(1, 2): 0.1}, link)
    assert _plan(rows, hostnames) == ConfirmationPlan()
    confirmed = analyse(rows, hostnames, 2.0)
    assert [suspect.name for suspect in confirmed.suspects] == ["1-2 (h1-h2)"] and confirmed.transients == []


def test_a_slow_host_is_confirmed_on_every_pair_it_was_named_on():
    hostnames = _hosts(5, 1)
    slow = {(src, dst): 0.1 for src in range(5) for dst in range(5) if 3 in (src, dst)}
    first = _pass(hostnames, slow)
    plan = _plan(first, hostnames)
    assert plan.suspects == ("host h3",) and plan.pairs == ((0, 3), (1, 3), (2, 3), (3, 4))
    pairs = {frozenset(pair) for pair in plan.pairs}

    cleared = analyse(first + _again(hostnames, {}, pairs), hostnames, 2.0)
    assert cleared.suspects == []
    (item,) = cleared.transients
    assert item.suspect.label == "host h3"
    assert item.suspect.evidence[0].startswith("host h3: its 8 inter-node")
    (measured,) = item.measured
    assert measured.what == "bandwidth" and measured.against == "the median of the other hosts"
    assert measured.ratios[0] < 0.15 and measured.ratios[1] > 0.8

    rows = first + _again(hostnames, slow, pairs) + _again(hostnames, slow, pairs)
    assert _plan(rows, hostnames) == ConfirmationPlan()
    confirmed = analyse(rows, hostnames, 2.0)
    assert [suspect.name for suspect in confirmed.suspects] == ["h3"] and confirmed.drain == ["h3"]


def _node_row(host: str, busbw: float, phase: str = "concurrent") -> Row:
    row = _row(0, 1, busbw, 0)
    row.collective, row.src_rank, row.dst_rank, row.busbw_gbps = "all_reduce", None, None, busbw
    row.group_layout, row.host, row.group_size, row.phase = "intra-node", host, 2, phase
    return row


def test_a_host_named_on_its_one_all_reduce_is_confirmed_on_the_all_reduces_and_cleared_by_a_better_one():
    hostnames = _hosts(4, 2)
    rows = _pass(hostnames, {}) + [_node_row(f"h{index}", 3.0 if index == 2 else 9.0) for index in range(4)]
    first = analyse(rows, hostnames, 2.0)
    assert [suspect.name for suspect in first.suspects] == ["h2"]
    assert _plan(rows, hostnames) == ConfirmationPlan(("host h2",), (), True)
    again = rows + [_node_row(f"h{index}", 8.5, RECHECK) for index in range(4)]
    analysis = analyse(again, hostnames, 2.0)
    assert analysis.suspects == []
    (measured,) = analysis.transients[0].measured
    assert measured.what == "intra-node all_reduce" and measured.against == "the median of 4 hosts"
    assert measured.ratios == pytest.approx((3.0 / 9.0, 8.5 / 9.0))


def test_each_pass_of_a_soak_confirms_on_its_own_and_says_which_pass_was_transient():
    hostnames = _hosts(4, 1)
    link = {frozenset((1, 2))}
    rows = []
    for repeat in range(3):
        slow = {(1, 2): 0.1} if repeat == 1 else {}
        measured = _pass(hostnames, slow) + (_again(hostnames, {}, link) if repeat == 1 else [])
        rows += [replace(row, repeat=repeat) for row in measured]
    analysis = analyse(rows, hostnames, 2.0)
    assert analysis.suspects == [] and [item.repeat for item in analysis.transients] == [1]
    assert any(line.startswith("transient: link 1-2 (h1-h2) (pass 1): ") for line in analysis.verdict_lines())


def test_the_verdict_says_the_rule_as_it_was_applied_with_each_class_s_threshold():
    hostnames = _hosts(1, 6)  # one class, intra-node, and a noisy one: its MADs, not 2x, set the bar
    values_rows = []
    generator = random.Random(5)
    for src in range(6):
        for dst in set(range(6)) - {src}:
            values_rows.append(_row(src, dst, 10.0 * 2.2 ** generator.uniform(-1, 1), 0))
    values_rows[0] = _row(values_rows[0].src_rank, values_rows[0].dst_rank, 10.0 / 2.5, 0)  # 2.5x off
    analysis = analyse(values_rows, hostnames, 2.0)
    (bandwidth,) = [part for part in analysis.judged.classes if part.metric is BANDWIDTH]
    # the rule written out: the median and 1.4826 x the median absolute deviation of the logs (test_robust's
    # textbook), slow beyond max(4 of those, ln 2) in log units
    median, sigma = textbook_spread([row.algbw_gbps for row in values_rows])
    assert bandwidth.median == pytest.approx(median)
    assert bandwidth.threshold == pytest.approx(math.exp(max(4 * sigma, math.log(2))))
    assert bandwidth.threshold > 2.5  # so the pair 2.5x off is no outlier: the verdict must not say 2x
    assert analysis.suspects == [] and not analysis.slow
    lines = analysis.verdict_lines()
    assert lines[0] == ("verdict: nothing suspicious: no measurement stayed max(4 scaled MADs, 2x) slower "
                        "than the median of its class")
    assert lines[1] == (f"  intra-node bandwidth: median {bandwidth.median:.3f} GB/s, slow below "
                        f"{bandwidth.median / bandwidth.threshold:.3f} ({bandwidth.threshold:.2f}x)")
    assert len(lines) == 2  # no latency measured here, and one class
    rule = analysis.to_dict()["rule"]
    assert {"metric": "bandwidth", "class": "intra-node", "median": bandwidth.median,
            "factor": bandwidth.threshold} in rule["thresholds"]
    assert (rule["slow_in"], rule["confirmations"]) == (3, 3)  # docs/clusters.md#confirmation


def test_an_oversubscribed_host_is_said_first_and_nothing_on_it_is_named():
    hostnames = _hosts(1, 4)
    rows = _pass(hostnames, {(src, dst): 0.1 for src in range(4) for dst in range(4) if 2 in (src, dst)})
    assert [suspect.label for suspect in analyse(rows, hostnames, 2.0).suspects] == ["rank 2 (h0)"]
    crowded = crowded_hosts(hostnames, {"h0": 2})
    assert crowded == {"h0": (4, 2)}
    analysis = analyse(rows, hostnames, 2.0, crowded)
    assert analysis.suspects == [] and analysis.drain == []
    lines = analysis.verdict_lines()
    assert lines[0].startswith("oversubscribed: h0 runs 4 CPU ranks on 2 CPUs: its times include waits for a "
                               "CPU, so nothing on it is named")
    assert lines[1] == "verdict: nothing named: every host is oversubscribed (above)"
    assert analysis.to_dict()["oversubscribed"] == {"h0": {"ranks": 4, "cpus": 2}}
    assert _plan(rows, hostnames, frozenset(crowded)) == ConfirmationPlan()  # nothing to measure again


def test_a_slow_rank_beside_an_oversubscribed_host_is_still_named():
    hostnames = _hosts(3, 3)
    values = _fabric(hostnames, 1.1)
    _slow_down(values, "bandwidth", lambda a, b: 7 in (a, b), 0.1)  # on h2
    _slow_down(values, "bandwidth", lambda a, b: 1 in (a, b), 0.1)  # on h0, which has too few CPUs
    suspects, _ = find_suspects(values, hostnames, [], 2.0, frozenset({"h0"}))
    assert [suspect.label for suspect in suspects] == ["rank 7 (h2)"]
    analysis = analyse(_pass(hostnames, {}), hostnames, 2.0, {"h0": (3, 2)})
    assert [line for line in analysis.verdict_lines() if line.startswith("verdict: ")] == [
        "verdict: nothing suspicious: no measurement stayed max(4 scaled MADs, 2x) slower than the median "
        "of its class"]
    assert crowded_hosts(hostnames, {"h0": 2, "h1": 3}) == {"h0": (3, 2)}  # h2's CPUs unknown: not judged


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                 max_size=3), max_leaves=12))
def test_the_cpus_of_a_saved_run_s_hosts_are_read_as_untrusted_data(hardware):
    found = usable_cpus_of(hardware)
    assert all(isinstance(host, str) and type(cpus) is int and cpus > 0 for host, cpus in found.items())


def test_the_cpus_of_a_saved_run_s_hosts_come_from_each_host_s_load_record():
    hardware = {"h0": {"load": {"usable_cpus": 2}}, "h1": {"load": {"usable_cpus": True}},
                "h2": {"load": "2"}, "h3": {"load": {"usable_cpus": 64}}}
    assert usable_cpus_of(hardware) == {"h0": 2, "h3": 64}
    rows = _pass(["h0", "h0", "h0", "h3"], {})
    assert run_crowding(rows, ["h0", "h0", "h0", "h3"], hardware) == {"h0": (3, 2)}
    on_gpus = [replace(row, device="cuda") for row in rows]
    assert run_crowding(on_gpus, ["h0", "h0", "h0", "h3"], hardware) == {}


@pytest.mark.processes
def test_reading_a_fabric_result_does_not_import_torch():
    code = ("import sys, commbench.fabric.kind, commbench.fabric.tables, commbench.fabric.heatmap; "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


def _soak_rows(seed: int) -> tuple[list[Row], list[str]]:
    """Passes of every pair (some left out), some pairs measured again (a recheck) with ties among the
    values, and rows in any order: what the columnar pass over rows must read as the rule row by row."""
    generator = random.Random(seed)
    hostnames = _hosts(generator.choice([2, 3, 5]), generator.choice([1, 2]))
    rows = []
    for repeat in range(generator.choice([1, 2, 3, 4])):
        for src in range(len(hostnames)):
            for dst in set(range(len(hostnames))) - {src}:
                for phase in ("concurrent", "recheck"):
                    if generator.random() < (0.1 if phase == "concurrent" else 0.8):
                        continue
                    for collective in ("p2p_uni", "ping_pong"):
                        gbps = generator.choice([1.0, 2.0, 2.0, generator.uniform(0.5, 9)])  # ties too
                        row = _row(src, dst, gbps, repeat)
                        row.collective, row.phase = collective, phase
                        row.elapsed_s = None if generator.random() < 0.1 else row.elapsed_s
                        rows.append(row)
    generator.shuffle(rows)
    return rows, hostnames


@pytest.mark.parametrize("seed", range(12))
def test_the_pass_over_columns_reads_the_rows_as_the_rule_row_by_row(seed):
    import statistics

    from commbench.fabric.matrices import measured_passes, pair_passes, row_value
    from commbench.results.columns import RowBlock, RowColumns
    from commbench.writers.files import readable_json

    rows, hostnames = _soak_rows(seed)
    by_rows = pair_passes(rows)  # each pass's better row, Row by Row
    for collective, table in measured_passes(rows).items():
        expected = by_rows[collective]
        medians = table.medians(len(hostnames))
        assert list(zip(medians.src.tolist(), medians.dst.tolist(), strict=True)) == list(expected)
        assert medians.value.tolist() == [statistics.median(map(row_value, found))
                                          for found in expected.values()]
        assert table.repeat.tolist() == [row.repeat for found in expected.values() for row in found]
        chosen = [row for found in expected.values() for row in found]
        assert [rows[index] for index in table.row.tolist()] == chosen
    kept = RowColumns()
    for start in range(0, len(rows), 7):
        kept.extend(RowBlock.of(rows[start:start + 7]))
    assert readable_json(analyse(kept, hostnames, 2.0).to_dict()) == \
        readable_json(analyse(rows, hostnames, 2.0).to_dict())
