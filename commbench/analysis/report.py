"""report: one self-contained HTML page for saved runs, readable offline.

For each run its metadata, then plots (PNG images embedded as base64 data URIs, one per collective),
the tables with their α-β fits, all fits in one table (with their reliability, docs/fit.md), and with
several runs the comparison of each against the first; a soak's passes, numbered from 1 as the console
numbers them, with each measurement across them. Where matplotlib cannot be imported the page is
written without plots and says why. Every piece of text from a results file is HTML-escaped; the page
loads nothing.
"""

import sys
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from commbench import __version__
from commbench.analysis.compare import compare_runs, pair_tables, summary_table, unmatched_lines
from commbench.analysis.plot import draw, matplotlib_missing, png_data_uri
from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.provenance.explain.engine import explain_run
from commbench.provenance.explain.text import html_section
from commbench.provenance.html import hardware_table_html, peak_table_html
from commbench.results.fit import ERROR_LIMIT, EXTRAPOLATION_FACTOR, describe_fit, fit_rows, unreliable_text
from commbench.results.frame import rows_frame, runs_frame
from commbench.results.kinds import page_kind
from commbench.results.model import SERIES_FIELDS, Row, describe_row
from commbench.results.passes import SPIKE_FACTOR, PassSummary, pass_summaries, soak_lines, time_spikes
from commbench.results.saved import SavedRun, load_runs
from commbench.writers.console import TextTable, passes_table, run_table
from commbench.writers.html import html_table, metadata_html, page
from commbench.writers.paths import check_file


def plot_images(runs: list[SavedRun]) -> list[tuple[str, str]]:
    """(collective, PNG as a data URI) per collective found in the runs."""
    frame = runs_frame(runs)
    return [(str(collective), png_data_uri(draw(runs, [collective])))
            for collective in frame.loc[frame["size_bytes"] > 0, "collective"].unique()]


def _groups(rows: list[Row]) -> list[list[Row]]:
    """Rows by benchmark, collective, dtype and op (modes, and a soak's passes, stacked under each size
    with a column saying which), as the console shows them."""
    frame = rows_frame(rows).assign(position=range(len(rows)))
    by = ["benchmark", *(name for name in SERIES_FIELDS if name != "mode")]
    return [[rows[position] for position in members["position"]]
            for _, members in frame.groupby(by, sort=False, dropna=False)]


def fits_table(runs: list[SavedRun]) -> TextTable:
    several = len(runs) > 1
    columns = (["run"] if several else []) + ["benchmark", "collective", "dtype", "op", "mode", "α µs",
                                              "β GB/s", "bus β GB/s", "rms error", "sizes", "fit",
                                              "reliability"]
    rows = []
    for run in runs:
        for fit in fit_rows(run.rows):
            beta = fit.fit.beta_gbps
            cells = [run.label] if several else []
            cells += [fit.benchmark, str(fit.series.get("collective", "")), str(fit.series.get("dtype", "")),
                      str(fit.series.get("op", "")), str(fit.series.get("mode", "")),
                      f"{fit.fit.alpha_us:.2f}", "-" if beta is None else f"{beta:.4g}",
                      "-" if fit.beta_bus_gbps is None else f"{fit.beta_bus_gbps:.4g}",
                      f"{fit.fit.rms_relative_error:.1%}",
                      f"{format_size(fit.min_size_bytes)} - {format_size(fit.max_size_bytes)}",
                      describe_fit(fit.fit.alpha_us, beta, fit.beta_bus_gbps),
                      unreliable_text(fit.fit) or "ok"]
            rows.append(cells)
    return TextTable("α-β fits: t(size) = α + size/β, weighted least squares on p50 with weights 1/t² "
                     "(relative error)", columns, rows, left_columns=6 if several else 5,
                     footer=[f"unreliable: β above {EXTRAPOLATION_FACTOR:g}x the highest algbw measured "
                             "(the sweep stopped below the half-bandwidth size α·β: β is extrapolated), or "
                             f"rms error above {ERROR_LIMIT:.0%} (docs/fit.md)"])


def soak_html(run: SavedRun) -> str:
    """A soak's drift and every measurement that spiked, recomputed from the rows ('' for one pass)."""
    lines = soak_lines(run.rows)
    if not lines:
        return ""
    spikes = time_spikes(run.rows)
    rows = [[describe_row(spike.first), ", ".join(str(index + 1) for index in spike.passes), str(spike.total),
             f"{spike.median:.1f}", f"{spike.worst_ratio:.2f}x",
             ", ".join(f"{t:.0f}" for t in spike.elapsed_s if t is not None)] for spike in spikes]
    table = TextTable(f"spikes: passes (from 1) whose p50 is {SPIKE_FACTOR:g}x or more its own median", [
        "measurement", "passes", "of", "median µs", "worst", "at s"], rows, left_columns=2)
    summaries: dict[tuple, list[PassSummary]] = {}
    for summary in pass_summaries(run.rows):
        summaries.setdefault(summary.table_key, []).append(summary)
    return (f"<h2>Over time: {escape(run.label)}</h2><pre>{escape(chr(10).join(lines[:2]))}</pre>"
            + (html_table(table) if rows else "<p>No spikes.</p>")
            + "".join(html_table(passes_table(found)) for found in summaries.values()))


def build_report(runs: list[SavedRun], plots_missing: str | None = None) -> str:
    """The page; ``plots_missing`` says why it has no plots (None: draw them)."""
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    parts = [f"<h1>commbench report</h1><p>{plural(len(runs), 'run')}, generated {escape(generated)} by "
             f"commbench {escape(__version__)}: {escape(', '.join(str(run.path) for run in runs))}</p>"]
    parts.append("<h2>Runs</h2>")
    for run in runs:
        parts.append(f"<h3>{escape(run.describe())}</h3>{metadata_html(run)}"
                     f"{hardware_table_html(run.meta)}")
    parts.append("<h2>Plots</h2>")
    if plots_missing:
        parts.append(f"<p>No plots: {escape(plots_missing)}</p>")
    for collective, uri in [] if plots_missing else plot_images(runs):
        parts.append(f'<h3>{escape(collective)}</h3><img alt="{escape(collective)}: busbw and latency '
                     f'against size" src="{uri}">')
    parts.extend(peak_table_html(run.rows, run.label) for run in runs)
    parts.extend(html_section(explain_run(run.meta, run.rows), run.label) for run in runs)
    parts.extend(soak_html(run) for run in runs)
    parts.append(f"<h2>α-β fits</h2>{html_table(fits_table(runs))}")
    parts.append("<h2>Results</h2>")
    for run in runs:
        parts.append(f"<h3>{escape(run.label)}</h3>")
        for group in _groups(run.rows):
            parts.append(html_table(run_table(group, fit_rows(group))))
    for new in runs[1:]:
        comparison = compare_runs(runs[0], new)
        parts.append(f"<h2>Comparison: {escape(comparison.new.label)} against {escape(comparison.base.label)}"
                     "</h2>")
        parts.extend(html_table(table) for table in pair_tables(comparison))
        if comparison.pairs:
            parts.append(html_table(summary_table(comparison)))
        unmatched = unmatched_lines(comparison)
        if unmatched:
            parts.append(f"<pre>{escape(chr(10).join(unmatched))}</pre>")
    return page("commbench report", parts)


def report_command(paths: list[str], output: str) -> None:
    target = Path(output)
    check_file("--output", target, "the report")
    runs = load_runs(paths)
    plots_missing = matplotlib_missing()
    kind = page_kind(runs)  # fabric results get a page of their own
    page = kind.report_page(runs, plots_missing) if kind is not None and kind.report_page is not None \
        else build_report(runs, plots_missing)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    if plots_missing:
        print(f"commbench: note: the report has no plots: {plots_missing}", file=sys.stderr)
    print(f"report: {target}")
