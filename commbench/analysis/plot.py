"""plot: busbw against size and latency (p50) against size, log axes, one line per run and series.

A run of several passes (--repeat, --duration) draws each size once: the median over its passes, with a
band from the fastest pass to the slowest, never a line through every pass. Every line has its colour
(a run's lines and a collective's differ by colour, runs by style too); x ticks fall on powers of 4, or
on the sizes measured when the range holds fewer than two of those (a replay's few sizes).

matplotlib is a dependency, imported only when a plot is drawn; it renders off-screen (Agg), so a plot
works on a headless node. The legend sits below the panels, inside the figure (its columns are chosen
so that it fits the width, the figure grows to fit its rows); runs are named in it by what differs
between them (hosts, backend, versions, start time), not by run ids.
"""

import base64
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from commbench.core.words import plural
from commbench.errors import UsageError
from commbench.results.frame import rows_frame
from commbench.results.kinds import drawing_kind
from commbench.results.model import SERIES_FIELDS, Row, default_placement
from commbench.results.saved import SavedRun, load_runs
from commbench.writers.paths import check_file

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
LINE_STYLES = ("-", "--", ":", "-.")
MAX_LEGEND_COLUMNS = 4
FIGURE_WIDTH_IN, PANELS_HEIGHT_IN, LEGEND_ROW_IN = 13.0, 4.8, 0.22
DPI = 110
INSTALL_HINT = "pip install matplotlib"


def matplotlib_missing() -> str | None:
    """Why plots cannot be drawn here (one line with the fix), or None when they can."""
    try:
        import matplotlib  # noqa: F401 - only asking whether it imports
    except ImportError as exc:
        return f"plots need matplotlib, which is not installed ({exc}): {INSTALL_HINT}"
    return None


def require_matplotlib() -> Any:
    """matplotlib's pyplot on the Agg backend, or a UsageError saying how to install it."""
    missing = matplotlib_missing()
    if missing:
        raise UsageError(missing)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


@dataclass
class Line:
    run: SavedRun
    benchmark: str
    series: dict[str, Any]
    rows: list[Row]  # every pass's, sizes ascending

    def points(self) -> list[tuple[int, list[Row]]]:
        """Each size with its rows (one per pass), sizes ascending."""
        by_size: dict[int, list[Row]] = {}
        for row in self.rows:
            by_size.setdefault(row.size_bytes, []).append(row)
        return sorted(by_size.items())


def collect_lines(runs: Iterable[SavedRun], collectives: list[str] | None = None) -> list[Line]:
    """Each run's rows by benchmark and series (collective, dtype, op, mode, ...), sizes ascending."""
    lines: list[Line] = []
    for run in runs:
        frame = rows_frame(run.rows).assign(position=range(len(run.rows)))
        # rows without a time (refused, an implementation unavailable here) draw nothing: no line
        chosen = frame[(frame["size_bytes"] > 0) & frame["time_us_p50"].notna()
                       & (frame["collective"].isin(collectives) if collectives is not None else True)]
        for _, members in chosen.groupby(["benchmark", *SERIES_FIELDS], sort=False, dropna=False):
            rows = [run.rows[position] for position in members.sort_values("size_bytes")["position"]]
            lines.append(Line(run, rows[0].benchmark, rows[0].series(), rows))
    return lines


def _run_facts(run: SavedRun) -> dict[str, str]:
    """What a legend can say about a run, by name, in the order labels list it."""
    meta = run.meta
    hosts = sorted(set(meta.get("hostnames") or []))
    versions = meta.get("versions") or {}
    more_hosts = f"{hosts[0]} +{plural(len(hosts) - 1, 'host')}" if hosts else ""
    facts = {"hosts": hosts[0] if len(hosts) == 1 else more_hosts,
             "backend": str(meta.get("backend", "")), "device": str(meta.get("device", "")),
             "world size": plural(meta["world_size"], "rank") if meta.get("world_size") else "",
             "torch": f"torch {meta['torch_version']}" if meta.get("torch_version") else "",
             **{name: f"{name.upper()} {versions[name]}" for name in ("nccl", "cuda") if versions.get(name)},
             "commbench": f"commbench {meta['commbench_version']}" if meta.get("commbench_version") else ""}
    return {name: value for name, value in facts.items() if value}


def _start_times(runs: list[SavedRun]) -> list[str]:
    """Each run's start (UTC) as precisely as it takes to tell the runs apart: the time alone when they
    started on one day, the date when that is enough."""
    started = [str(run.meta.get("started_at") or "").replace("T", " ")[:19] for run in runs]
    distinct = len(set(started))
    same_day = len({text[:10] for text in started}) == 1
    for cut in ((11, 16), (11, 19)) if same_day else ((0, 10), (0, 16), (0, 19)):
        shown = [text[slice(*cut)] for text in started]
        if len(set(shown)) == distinct:
            return shown
    return started


def run_labels(runs: list[SavedRun]) -> list[str]:
    """Per run, what differs between the runs (hosts, backend, versions, start time), for legends; the
    file name when nothing recorded differs."""
    facts = [_run_facts(run) for run in runs]
    names = list(dict.fromkeys(name for found in facts for name in found))
    differing = [name for name in names if len({found.get(name, "") for found in facts}) > 1]
    labels = [[found[name] for name in differing if name in found] for found in facts]
    starts = _start_times(runs)
    if len(set(starts)) > 1:
        labels = [parts + [start] for parts, start in zip(labels, starts, strict=True)]
    joined = [", ".join(parts) for parts in labels]
    if len(set(joined)) == len(runs):
        return joined
    files = [run.path.name for run in runs]
    return files if len(set(files)) == len(runs) else [str(run.path) for run in runs]


def line_labels(lines: list[Line]) -> list[str]:
    """Labels that name what tells the lines apart: the run (when several, by what differs between the
    runs), the collective, and any other part of the series that varies."""
    runs = list({id(line.run): line.run for line in lines}.values())
    run_label = dict(zip((id(run) for run in runs), run_labels(runs), strict=True))
    varying = [name for name in lines[0].series if name == "collective"
               or len({str(line.series.get(name)) for line in lines}) > 1] if lines else []
    several_benchmarks = len({line.benchmark for line in lines}) > 1
    labels = []
    for line in lines:
        parts = [line.benchmark] if several_benchmarks and line.benchmark else []
        parts += [_series_part(name, line.series[name]) for name in varying
                  if name != "placement" or line.series[name] != default_placement(line.series["collective"])]
        series = " ".join(part for part in parts if part)
        labels.append(f"{run_label[id(line.run)]} · {series}" if len(runs) > 1 else series)
    return labels


def _series_part(name: str, value: Any) -> str:
    if name == "world_size":
        return plural(value, "rank")
    if name == "op":
        return f"op {value}" if value else ""
    return str(value)


def plot_title(runs: list[SavedRun]) -> str:
    """What every run shares (backend, device, world size); what differs is in the legend."""
    shared = []
    for name, key in (("backend", "backend"), ("device", "device"), ("world size", "world_size")):
        values = {str(run.meta.get(key, "?")) for run in runs}
        if len(values) == 1:
            shared.append(f"{name} {values.pop()}")
    return " · ".join(shared) or f"{len(runs)} runs"


def short_size(num_bytes: float) -> str:
    """Axis labels: 1K, 64K, 1M, 2G (powers of 1024), bytes below 1K."""
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if num_bytes >= scale:
            value = num_bytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{num_bytes:.0f}"


def line_colours(count: int) -> list[Any]:
    """``count`` colours, all different: matplotlib's ten, then twenty, then as many from a wide map."""
    import matplotlib

    for name, size in (("tab10", 10), ("tab20", 20)):
        if count <= size:
            return [matplotlib.colormaps[name](index) for index in range(count)]
    spread = matplotlib.colormaps["turbo"]
    return [spread(index / max(1, count - 1)) for index in range(count)]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _draw_lines(panels: tuple[Any, Any], lines: list[Line], runs: list[SavedRun]) -> None:
    """Each line on both panels, in a colour of its own; runs differ by style too. A size measured in
    several passes is their median, with a band from the fastest to the slowest."""
    bandwidth, latency = panels
    run_index = {id(run): index for index, run in enumerate(runs)}
    for line, label, colour in zip(lines, line_labels(lines), line_colours(len(lines)), strict=True):
        style = {"color": colour, "linestyle": LINE_STYLES[run_index[id(line.run)] % len(LINE_STYLES)],
                 "marker": "o", "markersize": 3, "label": label}
        points = line.points()
        sizes = [size for size, _ in points]
        times = [[row.time_us_p50 for row in rows] for _, rows in points]
        latency.plot(sizes, [_median(found) for found in times], **style)
        with_bw = [(size, [row.busbw_gbps for row in rows if row.busbw_gbps]) for size, rows in points]
        with_bw = [(size, found) for size, found in with_bw if found]
        if with_bw:
            bandwidth.plot([size for size, _ in with_bw], [_median(found) for _, found in with_bw], **style)
        if any(len(rows) > 1 for _, rows in points):  # passes: their range as a band
            latency.fill_between(sizes, [min(found) for found in times], [max(found) for found in times],
                                 color=colour, alpha=0.15, linewidth=0)
            if with_bw:
                bandwidth.fill_between([size for size, _ in with_bw], [min(found) for _, found in with_bw],
                                       [max(found) for _, found in with_bw], color=colour, alpha=0.15,
                                       linewidth=0)


def _format_axes(panels: tuple[Any, Any], sizes: list[int]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

    low, high = min(sizes), max(sizes)
    powers_of_4 = [4**exponent for exponent in range(64) if low <= 4**exponent <= high]
    for axes, name, title in zip(panels, ("busbw (GB/s)", "p50 time (µs)"), ("bus bandwidth", "latency"),
                                 strict=True):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        if len(powers_of_4) >= 2:
            axes.xaxis.set_major_locator(LogLocator(base=4))
        else:  # a narrow range: label the sizes measured, at most eight of them
            shown = sorted(set(sizes))
            step = max(1, -(-len(shown) // 8))
            axes.xaxis.set_major_locator(FixedLocator(shown[::step]))
            axes.xaxis.set_minor_locator(NullLocator())
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: short_size(value)))
        axes.set_xlabel("size (bytes)")
        axes.set_ylabel(name)
        axes.set_title(title)
        axes.grid(True, which="major", alpha=0.3)


def _place_legend(figure: Any, handles: list[Any], names: list[str]) -> Any:
    """The legend below the panels in as many columns as fit the figure's width; the figure grows by its
    rows, and the layout engine keeps it clear of the panels."""
    renderer = figure.canvas.get_renderer()
    for columns in range(min(MAX_LEGEND_COLUMNS, len(names)), 0, -1):
        figure.set_figheight(PANELS_HEIGHT_IN + LEGEND_ROW_IN * -(-len(names) // columns))
        legend = figure.legend(handles, names, loc="outside lower center", ncol=columns, fontsize="small",
                               frameon=False)
        if columns == 1 or legend.get_window_extent(renderer).width <= 0.98 * figure.bbox.width:
            break
        legend.remove()
    return legend


def draw(runs: list[SavedRun], collectives: list[str] | None = None, title: str | None = None) -> Any:
    """A figure with the two panels and the legend below them; UsageError when no row has a size."""
    pyplot = require_matplotlib()
    lines = collect_lines(runs, collectives)
    if not lines:
        which = f" for {', '.join(collectives)}" if collectives else ""
        raise UsageError(f"nothing to plot{which}: no rows with a message size in "
                         f"{', '.join(str(run.path) for run in runs)}")
    figure = pyplot.figure(figsize=(FIGURE_WIDTH_IN, PANELS_HEIGHT_IN), layout="constrained")
    panels = tuple(figure.subplots(1, 2))
    _draw_lines(panels, lines, runs)
    _format_axes(panels, [row.size_bytes for line in lines for row in line.rows])
    figure.suptitle(title or plot_title(runs))
    _place_legend(figure, *panels[1].get_legend_handles_labels())
    return figure


def save(figure: Any, target: Path | BinaryIO, image_format: str | None = None) -> None:
    """Write the figure (to a path, or a binary stream with ``image_format``) and release it."""
    import matplotlib.pyplot as pyplot

    try:
        figure.savefig(target, format=image_format, dpi=DPI)
    finally:
        pyplot.close(figure)


def png_data_uri(figure: Any) -> str:
    """The figure as a PNG in a data URI, for a page that loads nothing; the figure is released."""
    buffer = io.BytesIO()
    save(figure, buffer, "png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def plot_command(paths: list[str], output: str, collectives: list[str] | None) -> None:
    target = Path(output)
    if target.suffix.lower() not in IMAGE_SUFFIXES:
        raise UsageError(f"--output {output}: the image type comes from the suffix: "
                         f"{', '.join(IMAGE_SUFFIXES)}")
    check_file("--output", target, "the image")
    require_matplotlib()
    runs = load_runs(paths)
    kind = drawing_kind(runs)  # a fabric result draws its heatmaps
    figure = kind.figure(runs) if kind is not None and kind.figure is not None else draw(runs, collectives)
    target.parent.mkdir(parents=True, exist_ok=True)
    save(figure, target)
    print(f"plot: {target}")
