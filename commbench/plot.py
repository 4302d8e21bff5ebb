"""plot: busbw against size and latency (p50) against size, log axes, one line per run and series.

matplotlib is an optional extra (`pip install 'commbench[plot]'`); it renders off-screen (Agg), so a
plot works on a headless node.
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from commbench.errors import UsageError
from commbench.results import Row, SavedRun, load_run

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
LINE_STYLES = ("-", "--", ":", "-.")
LEGEND_COLUMNS = 3


def require_matplotlib() -> Any:
    """matplotlib's pyplot on the Agg backend, or a UsageError saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("plots need matplotlib, which is not installed: pip install 'commbench[plot]'") \
            from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


@dataclass
class Line:
    run: SavedRun
    benchmark: str
    series: dict[str, Any]
    rows: list[Row]


def collect_lines(runs: Iterable[SavedRun], collectives: list[str] | None = None) -> list[Line]:
    """Each run's rows by benchmark and series (collective, dtype, op, mode, ...), sizes ascending."""
    lines: list[Line] = []
    for run in runs:
        found: dict[tuple, Line] = {}
        for row in run.rows:
            if row.size_bytes <= 0 or (collectives is not None and row.collective not in collectives):
                continue
            key = (row.benchmark, tuple(row.series().items()))
            if key not in found:
                found[key] = Line(run, row.benchmark, row.series(), [])
            found[key].rows.append(row)
        for line in found.values():
            line.rows.sort(key=lambda row: row.size_bytes)
        lines.extend(found.values())
    return lines


def line_labels(lines: list[Line]) -> list[str]:
    """Labels that name what tells the lines apart: the run (when several), the collective, and any
    other part of the series that varies."""
    several_runs = len({id(line.run) for line in lines}) > 1
    varying = [name for name in lines[0].series if name == "collective"
               or len({str(line.series.get(name)) for line in lines}) > 1] if lines else []
    several_benchmarks = len({line.benchmark for line in lines}) > 1
    labels = []
    for line in lines:
        parts = [line.run.label] if several_runs else []
        parts += [line.benchmark] if several_benchmarks and line.benchmark else []
        parts += [_series_part(name, line.series[name]) for name in varying]
        labels.append(" ".join(part for part in parts if part))
    return labels


def _series_part(name: str, value: Any) -> str:
    if name == "world_size":
        return f"{value} ranks"
    if name == "op":
        return f"op {value}" if value else ""
    return str(value)


def plot_title(runs: list[SavedRun]) -> str:
    described = list(dict.fromkeys(
        f"backend {run.meta.get('backend', '?')} · device {run.meta.get('device', '?')} · "
        f"world size {run.meta.get('world_size', '?')}" for run in runs))
    return described[0] if len(described) == 1 else " | ".join(
        f"{run.label}: {run.meta.get('backend', '?')}, {run.meta.get('device', '?')}, "
        f"{run.meta.get('world_size', '?')} ranks" for run in runs)


def short_size(num_bytes: float) -> str:
    """Axis labels: 1K, 64K, 1M, 2G (powers of 1024), bytes below 1K."""
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if num_bytes >= scale:
            value = num_bytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{num_bytes:.0f}"


def draw(runs: list[SavedRun], collectives: list[str] | None = None, title: str | None = None) -> Any:
    """A figure with the two panels; UsageError when no row has a size to plot."""
    pyplot = require_matplotlib()
    from matplotlib.ticker import FuncFormatter, LogLocator

    lines = collect_lines(runs, collectives)
    if not lines:
        which = f" for {', '.join(collectives)}" if collectives else ""
        raise UsageError(f"nothing to plot{which}: no rows with a message size in "
                         f"{', '.join(str(run.path) for run in runs)}")
    labels = line_labels(lines)
    legend_rows = math.ceil(len(lines) / LEGEND_COLUMNS)
    figure, (bandwidth, latency) = pyplot.subplots(1, 2, figsize=(13, 4.8 + 0.25 * legend_rows))
    # The same series has the same colour in every run; runs differ by line style.
    colours: dict[tuple, str] = {}
    run_index = {id(run): index for index, run in enumerate(runs)}
    palette = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
    for line, label in zip(lines, labels, strict=True):
        key = (line.benchmark, tuple(line.series.items()))
        colour = colours.setdefault(key, palette[len(colours) % len(palette)])
        style = {"color": colour, "linestyle": LINE_STYLES[run_index[id(line.run)] % len(LINE_STYLES)],
                 "marker": "o", "markersize": 3, "label": label}
        with_bw = [(row.size_bytes, row.busbw_gbps) for row in line.rows if row.busbw_gbps]
        if with_bw:
            bandwidth.plot(*zip(*with_bw, strict=True), **style)
        latency.plot([row.size_bytes for row in line.rows], [row.time_us_p50 for row in line.rows], **style)
    for axes, name in ((bandwidth, "busbw (GB/s)"), (latency, "p50 time (µs)")):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.xaxis.set_major_locator(LogLocator(base=4))
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: short_size(value)))
        axes.set_xlabel("size (bytes)")
        axes.set_ylabel(name)
        axes.grid(True, which="major", alpha=0.3)
    bandwidth.set_title("bus bandwidth")
    latency.set_title("latency")
    handles, names = latency.get_legend_handles_labels()
    legend_height = (0.2 * legend_rows + 0.1) / figure.get_figheight()
    figure.legend(handles, names, loc="lower center", ncol=LEGEND_COLUMNS, fontsize="small", frameon=False)
    figure.suptitle(title or plot_title(runs))
    figure.tight_layout(rect=(0, legend_height, 1, 1))
    return figure


def save(figure: Any, target: Path | BinaryIO, image_format: str | None = None) -> None:
    """Write the figure (to a path, or a binary stream with ``image_format``) and release it."""
    import matplotlib.pyplot as pyplot

    try:
        figure.savefig(target, format=image_format, dpi=110)
    finally:
        pyplot.close(figure)


def plot_command(paths: list[str], output: str, collectives: list[str] | None) -> None:
    target = Path(output)
    if target.suffix.lower() not in IMAGE_SUFFIXES:
        raise UsageError(f"--output {output}: the image type comes from the suffix: "
                         f"{', '.join(IMAGE_SUFFIXES)}")
    require_matplotlib()
    runs = [load_run(path) for path in paths]
    from commbench.fabric.hooks import draw_fabric  # a fabric result draws its heatmaps

    figure = draw_fabric(runs) or draw(runs, collectives)
    target.parent.mkdir(parents=True, exist_ok=True)
    save(figure, target)
    print(f"plot: {target}")
