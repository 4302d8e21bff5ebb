"""Fabric's result kind (results/kinds.py): its rows on the console, and the commands that read saved
files (plot, report, compare) on a fabric result.

A fabric result is a results.json whose rows are fabric's (Row.pattern 'fabric'). Its conclusions are
recomputed from its rows and host names (commbench.fabric.analysis), never read back from the file's
`fabric` part, so what is drawn always follows from the rows; the rows' ranks are checked against the
host list first, since a file from elsewhere is not to be trusted.
"""

from html import escape
from typing import Any

from rich.console import Console

from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.errors import UsageError
from commbench.fabric.analysis import FabricAnalysis, analyse, recorded_slow_factor, run_crowding
from commbench.fabric.heatmap import heatmap_figure
from commbench.fabric.matrices import KIND, fabric_rows
from commbench.fabric.tables import closing_lines, fabric_tables, print_fabric_rows, size_texts
from commbench.provenance.html import hardware_table_html
from commbench.results.kinds import LiveRun, ResultKind
from commbench.results.model import Row
from commbench.results.saved import SavedRun
from commbench.writers.html import html_table, metadata_html, page


def is_fabric_run(run: SavedRun) -> bool:
    return any(row.pattern == KIND for row in run.rows)


def load_analysis(run: SavedRun) -> FabricAnalysis:
    """A saved fabric run's analysis, with the slow factor it was run with; UsageError on a file whose
    rows do not fit its host list."""
    hostnames = run.meta.get("hostnames")
    if not isinstance(hostnames, list) or not all(isinstance(name, str) for name in hostnames):
        raise UsageError(f"{run.path}: a fabric result without its ranks' host names (meta.hostnames)")
    for row in fabric_rows(run.rows):
        for rank in (row.src_rank, row.dst_rank):
            if rank is not None and not (isinstance(rank, int) and 0 <= rank < len(hostnames)):
                raise UsageError(f"{run.path}: a fabric row names rank {rank!r}, outside the "
                                 f"{plural(len(hostnames), 'rank')} of its host list")
    return analyse(run.rows, hostnames, recorded_slow_factor(run.meta.get("config") or {}),
                   run_crowding(run.rows, hostnames, run.meta.get("hardware")))


def _title(run: SavedRun) -> str:
    config = run.meta.get("config") or {}
    size = config.get("size")
    at = f" at {format_size(size)}" if isinstance(size, int) else ""
    return f"fabric {run.describe()}{at}"


def draw_fabric(runs: list[SavedRun]) -> Any:
    """`commbench plot` on a fabric result: its heatmaps."""
    if len(runs) > 1:
        raise UsageError("plot draws one fabric result at a time (a figure of its heatmaps); "
                         f"got {len(runs)} files")
    run = runs[0]
    return heatmap_figure(load_analysis(run), run.rows, _title(run))


def fabric_report_page(runs: list[SavedRun], plots_missing: str | None = None) -> str:
    """`commbench report` on fabric results: a page of each one's metadata, hardware, heatmaps (or why
    there are none: ``plots_missing``), verdict and tables."""
    from commbench.analysis.plot import png_data_uri  # matplotlib: only when a page is written

    parts = ["<h1>commbench fabric report</h1>"]
    for run in runs:
        analysis = load_analysis(run)
        parts.append(f"<h2>{escape(_title(run))}</h2>{metadata_html(run)}{hardware_table_html(run.meta)}")
        if plots_missing:
            parts.append(f"<p>No heatmaps: {escape(plots_missing)}</p>")
        else:
            parts.append(f'<img alt="bandwidth and latency by pair" '
                         f'src="{png_data_uri(heatmap_figure(analysis, run.rows, _title(run)))}">')
        parts.append(f"<pre>{escape(chr(10).join(closing_lines(analysis)))}</pre>")
        sizes = size_texts(run.meta.get("config") or {})
        parts.extend(html_table(table) for table in fabric_tables(analysis, *sizes))
    return page("commbench fabric report", parts)


def print_live_fabric(console: Console, rows: list[Row], run: LiveRun) -> None:
    print_fabric_rows(console, rows, run.hostnames, run.config, run.hardware)


# registered with the fabric feature (command.py)
FABRIC = ResultKind(name=KIND, console=print_live_fabric, figure=draw_fabric, report_page=fabric_report_page,
                    compares_alone=True)
