"""Figures of a fabric result: rank x rank heatmaps of bandwidth and latency, and a soak's drift.

Ranks are grouped by host (hosts in order of their first rank), with a line between hosts and the host
names beside the rank numbers; colour is proportional to the value (the scale starts at 0); a slow cell
(outliers.py) is crossed; unmeasured cells (the diagonal, or pairs --sample left out) are blank. A soak
of 2 passes or more adds a third panel: every pair direction's bandwidth against time (elapsed_s), the
per-pass median in black, and the pairs with spikes in colour, so a flaky link stands out from the
fabric's drift.
"""

from typing import Any

import numpy as np

from commbench.core.groups import ranks_by_host
from commbench.fabric.analysis import FabricAnalysis
from commbench.fabric.drift import spike_pair
from commbench.fabric.matrices import BANDWIDTH_COLLECTIVE, pair_series, pass_values, row_value
from commbench.measure.robust import BANDWIDTH, LATENCY, Metric
from commbench.results.model import Row

MAX_RANK_LABELS = 64  # more ranks than this: host names only
MAX_LABELLED_SPIKES = 6


def _host_spans(hostnames: list[str]) -> list[tuple[str, int, int]]:
    """(host, first position, count) along the host-grouped rank order."""
    spans, start = [], 0
    for host, ranks in ranks_by_host(hostnames).items():
        spans.append((host, start, len(ranks)))
        start += len(ranks)
    return spans


def _colour_top(grid: np.ndarray) -> float:
    """The value the colour scale ends at; it starts at 0, so colour is proportional to the value: 1.57
    and 1.605 GB/s look alike, and a link at half the others' bandwidth is half as bright (a scale
    stretched over min..max would paint a 2% difference from one end of the colours to the other)."""
    measured = grid[~np.isnan(grid)]
    return float(measured.max()) if measured.size and measured.max() > 0 else 1.0


def _matrix_panel(axes: Any, figure: Any, analysis: FabricAnalysis, metric: Metric) -> None:
    matrices = analysis.matrices
    order = matrices.ranks_by_host_order()
    grid = (matrices.bandwidth_gbps if metric is BANDWIDTH else matrices.latency_us).grid(order)
    image = axes.imshow(grid, cmap="viridis" if metric.higher_is_better else "viridis_r",
                        interpolation="nearest", vmin=0, vmax=_colour_top(grid))
    figure.colorbar(image, ax=axes, shrink=0.8, label=f"{metric.name} ({metric.unit})")
    position = {rank: index for index, rank in enumerate(order)}
    for item in analysis.slow:
        if item.metric is metric:
            axes.plot(position[item.dst], position[item.src], marker="x", color="red", markersize=7)
    spans = _host_spans(matrices.hostnames)
    for _, start, _count in spans[1:]:
        axes.axhline(start - 0.5, color="white", linewidth=1.5)
        axes.axvline(start - 0.5, color="white", linewidth=1.5)
    if len(order) <= MAX_RANK_LABELS:
        axes.set_xticks(range(len(order)), [str(rank) for rank in order], fontsize="x-small")
        axes.set_yticks(range(len(order)), [str(rank) for rank in order], fontsize="x-small")
    else:
        axes.set_xticks([])
        axes.set_yticks([])
    for host, start, count in spans:  # host names outside the tick labels, centred on their ranks
        middle = start + (count - 1) / 2
        axes.annotate(host, xy=(middle, 0), xycoords=("data", "axes fraction"), xytext=(0, -20),
                      textcoords="offset points", ha="center", va="top", fontsize="small",
                      rotation=90 if len(spans) > 8 else 0)
        axes.annotate(host, xy=(0, middle), xycoords=("axes fraction", "data"), xytext=(-20, 0),
                      textcoords="offset points", ha="right", va="center", fontsize="small")
    sender = "sender" if metric is BANDWIDTH else "leader"
    axes.set_xlabel("receiver rank" if metric is BANDWIDTH else "partner rank", labelpad=22)
    axes.set_ylabel(f"{sender} rank", labelpad=30)
    axes.set_title(f"{metric.name} by pair\n(x: slow)")


def _drift_panel(axes: Any, rows: list[Row], analysis: FabricAnalysis) -> None:
    spiky = {spike_pair(spike) for spike in analysis.spikes if spike.metric is BANDWIDTH}
    labelled = 0
    for (src, dst), measured in sorted(pair_series(rows, BANDWIDTH_COLLECTIVE).items()):
        series = pass_values(measured)
        times = [row.elapsed_s if row.elapsed_s is not None else float(row.repeat) for row in series]
        values = [row_value(row) for row in series]
        if (src, dst) in spiky:
            label = f"{src}->{dst}" if labelled < MAX_LABELLED_SPIKES else None
            labelled += 1
            axes.plot(times, values, marker="o", markersize=3, linewidth=1.2, label=label)
        else:
            axes.plot(times, values, color="0.75", linewidth=0.6)
    medians = analysis.passes
    axes.plot([item.elapsed_s if item.elapsed_s is not None else float(item.repeat) for item in medians],
              [item.bandwidth_gbps for item in medians], color="black", linewidth=2, label="median")
    axes.set_yscale("log")
    axes.set_xlabel("elapsed (s)")
    axes.set_ylabel("bandwidth (GB/s)")
    axes.set_title("soak: bandwidth over time\n(spikes in colour)")
    axes.legend(fontsize="small", frameon=False)
    axes.grid(True, alpha=0.3)


def heatmap_figure(analysis: FabricAnalysis, rows: list[Row], title: str) -> Any:
    """The figure for one fabric result; needs matplotlib (commbench.analysis.plot.require_matplotlib)."""
    from commbench.analysis.plot import require_matplotlib

    pyplot = require_matplotlib()
    soak = len(analysis.passes) > 1
    size = min(6.5, 3.5 + 0.12 * len(analysis.matrices.hostnames))
    # constrained layout keeps titles, host names and colour bars inside (tight_layout clipped them)
    figure, panels = pyplot.subplots(1, 3 if soak else 2, figsize=(size * (3 if soak else 2), size + 1.2),
                                     squeeze=False, layout="constrained")
    for axes, metric in zip(panels[0], (BANDWIDTH, LATENCY), strict=False):
        _matrix_panel(axes, figure, analysis, metric)
    if soak:
        _drift_panel(panels[0][2], rows, analysis)
    figure.suptitle(title)
    figure.get_layout_engine().set(w_pad=0.15)
    return figure
