"""The outlier rule and the blame on values built here: quiet fabrics name nobody, a slow host, rank or
link is named alone, and a soak's spikes are found on the pair that had them."""

import random
import subprocess
import sys

import pytest

from commbench.fabric.analysis import analyse
from commbench.fabric.drift import drift_line, find_spikes, pass_medians
from commbench.fabric.matrices import KIND, NodeResult
from commbench.fabric.outliers import drain_list, find_suspects
from commbench.measure.robust import BANDWIDTH, LATENCY, is_slow
from commbench.results.model import Row


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


def test_fewer_than_three_peers_judge_nothing():
    hostnames = _hosts(2, 1)  # one pair: two measurements per metric
    values = _fabric(hostnames, 1.0)
    values["bandwidth"][(0, 1)] *= 0.01
    assert _names(values, hostnames) == []


def test_the_rule_works_on_ratios_both_ways():
    assert is_slow(1.0, 10.0, 0.0, BANDWIDTH, 2.0) and not is_slow(6.0, 10.0, 0.0, BANDWIDTH, 2.0)
    assert is_slow(20.0, 10.0, 0.0, LATENCY, 2.0) and not is_slow(15.0, 10.0, 0.0, LATENCY, 2.0)
    assert not is_slow(1.0, 10.0, 1.0, BANDWIDTH, 2.0)  # 10x off, but within 4 spreads of ln


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
    spikes = find_spikes(rows, 2.0)
    assert [(spike.src, spike.dst, spike.passes) for spike in spikes] == [(1, 2, [3, 6])]
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


def test_a_link_slow_once_is_rechecked_and_counts_only_if_slow_again():
    hostnames = _hosts(4, 1)
    first = _pass(hostnames, {(1, 2): 0.1})
    assert analyse(first, hostnames, 2.0).recheck_pairs() == [(1, 2)]

    def recheck(slow: dict[tuple[int, int], float]) -> list[Row]:
        return [row for row in _pass(hostnames, slow, "recheck") if {row.src_rank, row.dst_rank} == {1, 2}]

    assert analyse(first + recheck({}), hostnames, 2.0).suspects == []
    confirmed = analyse(first + recheck({(1, 2): 0.1}), hostnames, 2.0)
    assert [suspect.name for suspect in confirmed.suspects] == ["1-2 (h1-h2)"]


def test_a_slow_host_is_not_rechecked_pair_by_pair():
    hostnames = _hosts(5, 1)
    rows = _pass(hostnames, {(src, dst): 0.1 for src in range(5) for dst in range(5) if 3 in (src, dst)})
    analysis = analyse(rows, hostnames, 2.0)
    assert [suspect.name for suspect in analysis.suspects] == ["h3"] and analysis.recheck_pairs() == []


def _node_row(host: str, busbw: float, phase: str = "concurrent") -> Row:
    row = _row(0, 1, busbw, 0)
    row.collective, row.src_rank, row.dst_rank, row.busbw_gbps = "all_reduce", None, None, busbw
    row.group_layout, row.host, row.group_size, row.phase = "intra-node", host, 2, phase
    return row


def test_a_host_named_on_its_one_all_reduce_is_rechecked_and_cleared_by_a_better_one():
    hostnames = _hosts(4, 2)
    rows = _pass(hostnames, {}) + [_node_row(f"h{index}", 3.0 if index == 2 else 9.0) for index in range(4)]
    first = analyse(rows, hostnames, 2.0)
    assert [suspect.name for suspect in first.suspects] == ["h2"] and first.recheck_nodes()
    assert first.suspects[0].to_dict()["single_measurement"] is True
    again = rows + [_node_row(f"h{index}", 8.5, "recheck") for index in range(4)]
    assert analyse(again, hostnames, 2.0).suspects == []


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
