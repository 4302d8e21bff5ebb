"""Fabric's tables and closing lines, as text: the console prints them (ConsoleReporter.table_done, at
the end of a run or of what an interrupted one measured), report renders them as HTML.

Ranks are grouped by host (hosts in order of their first rank); a slow cell carries a '*'. The rank x
rank matrices are shown up to MAX_RANK_COLUMNS ranks; beyond that only the host matrices (the JSON
always has both).
"""

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from commbench.core.sizes import format_size
from commbench.fabric.analysis import FabricAnalysis, analyse, recorded_slow_factor, run_crowding
from commbench.fabric.drift import describe_spike
from commbench.measure.robust import BANDWIDTH, LATENCY, Metric
from commbench.results.model import Row
from commbench.writers.console import TextTable, print_table

MAX_RANK_COLUMNS = 32
MAX_SLOW_SHOWN = 10
Matrix = list[list[float | None]]


def _cell(value: float | None, metric: Metric, slow: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.{metric.digits}f}" + ("*" if slow else "")


def rank_table(analysis: FabricAnalysis, metric: Metric, matrix: Matrix, what: str) -> TextTable:
    hostnames = analysis.matrices.hostnames
    order = analysis.matrices.ranks_by_host_order()
    slow = {(item.src, item.dst) for item in analysis.slow if item.metric is metric}
    rows = [[str(src), hostnames[src],
             *(_cell(matrix[src][dst], metric, (src, dst) in slow) for dst in order)] for src in order]
    footer = ["* slow: an outlier of its class (docs/clusters.md: the outlier rule)"] if slow else []
    return TextTable(f"{metric.name} {metric.unit}, {what}", ["rank", "host", *map(str, order)], rows,
                     left_columns=2, footer=footer)


def host_table(analysis: FabricAnalysis, metric: Metric, matrix: Matrix) -> TextTable:
    hosts = analysis.matrices.hosts
    rows = [[host, *(_cell(value, metric) for value in matrix[index])] for index, host in enumerate(hosts)]
    return TextTable(f"host x host {metric.name} {metric.unit}: the median over rank pairs, sender host "
                     "(row) -> receiver host (column); the diagonal is intra-node", ["host", *hosts], rows,
                     left_columns=1)


def nodes_table(analysis: FabricAnalysis) -> TextTable | None:
    nodes = analysis.matrices.nodes
    if not nodes:
        return None
    rows = [[node.layout, node.host or "one rank per host", str(node.ranks),
             _cell(node.busbw_gbps, BANDWIDTH), f"{node.time_us:.1f}"] for node in nodes]
    return TextTable("all_reduce within each node and across nodes", ["groups", "host", "ranks",
                     "busbw GB/s", "p50 µs"], rows, left_columns=2)


def slow_table(analysis: FabricAnalysis) -> TextTable | None:
    slow = analysis.slow
    if not slow:
        return None
    hostnames = analysis.matrices.hostnames
    rows = [[f"{item.src}->{item.dst}", f"{hostnames[item.src]}->{hostnames[item.dst]}", item.pair_class,
             item.metric.name, _cell(item.value, item.metric), _cell(item.median, item.metric),
             f"{item.ratio:.2f}x"] for item in slow[:MAX_SLOW_SHOWN]]
    more = len(slow) - MAX_SLOW_SHOWN
    return TextTable(f"slow measurements ({len(slow)}), the worst first",
                     ["ranks", "hosts", "class", "metric", "value", "class median", "ratio"], rows,
                     left_columns=4, footer=[f"... and {more} more in results.json"] if more > 0 else [])


def fabric_tables(analysis: FabricAnalysis, size_text: str, latency_size_text: str) -> list[TextTable]:
    """The matrices (rank x rank when small enough, host x host with 2 hosts or more), the node
    all_reduces and the slow measurements."""
    matrices = analysis.matrices
    tables = []
    if len(matrices.hostnames) <= MAX_RANK_COLUMNS:
        tables.append(rank_table(analysis, BANDWIDTH, matrices.bandwidth_gbps,
                                 f"{size_text} messages: sender (row) -> receiver (column)"))
        tables.append(rank_table(analysis, LATENCY, matrices.latency_us,
                                 f"half a {latency_size_text} round trip: leader (row) -> partner (column)"))
    if len(matrices.hosts) > 1:
        tables.append(host_table(analysis, BANDWIDTH, matrices.host_bandwidth_gbps))
        tables.append(host_table(analysis, LATENCY, matrices.host_latency_us))
    tables += [table for table in (nodes_table(analysis), slow_table(analysis)) if table is not None]
    return tables


def closing_lines(analysis: FabricAnalysis) -> list[str]:
    """Spikes and drift of a soak, then the verdict."""
    hostnames = analysis.matrices.hostnames
    lines = [f"spikes: {describe_spike(spike, hostnames)}" for spike in analysis.spikes[:MAX_SLOW_SHOWN]]
    drift = analysis.drift()
    if drift:
        lines.append(drift)
    return lines + analysis.verdict_lines()


def print_fabric(console: Console, analysis: FabricAnalysis, size_text: str, latency_size_text: str) -> None:
    for table in fabric_tables(analysis, size_text, latency_size_text):
        print_table(console, table)
    for line in closing_lines(analysis):
        style = "bold" if line.startswith("verdict") else ""
        console.print(f"[{style}]{escape(line)}[/{style}]" if style else escape(line))


def size_texts(config: Mapping[str, Any]) -> tuple[str, str]:
    """A run's --size and --latency-size as text, from its recorded configuration ('?' where missing)."""
    size, latency_size = (format_size(value) if isinstance(value, int) else "?"
                          for value in (config.get("size"), config.get("latency_size")))
    return size, latency_size


def print_fabric_rows(console: Console, rows: list[Row], hostnames: list[str], config: Mapping[str, Any],
                      hardware: Mapping[str, Any]) -> None:
    """A run's fabric rows on the console: its matrices, slow pairs, spikes and verdict, concluded with
    the --slow-factor it recorded (``config``: the run's meta.config) and the hosts' CPUs (``hardware``:
    its meta.hardware)."""
    analysis = analyse(rows, hostnames, recorded_slow_factor(config), run_crowding(rows, hostnames, hardware))
    print_fabric(console, analysis, *size_texts(config))
