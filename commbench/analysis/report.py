"""report: one self-contained HTML page for saved runs, readable offline.

For each run its metadata, then plots (PNG images embedded as base64 data URIs, one per collective),
the tables with their α-β fits, all fits in one table (with their reliability, docs/fit.md), and with
several runs the comparison of each against the first. Where matplotlib cannot be imported the page is
written without plots and says why. Every piece of text from a results file is HTML-escaped; the page
loads nothing.
"""

import base64
import io
import sys
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from commbench import __version__
from commbench.analysis.compare import compare_runs, pair_tables, summary_table, unmatched_lines
from commbench.analysis.plot import draw, matplotlib_missing, save
from commbench.core.sizes import format_size
from commbench.provenance.html import hardware_table_html, peak_table_html
from commbench.results.fit import ERROR_LIMIT, EXTRAPOLATION_FACTOR, describe_fit, fit_rows, unreliable_text
from commbench.results.frame import rows_frame, runs_frame
from commbench.results.kinds import page_kind
from commbench.results.model import SERIES_FIELDS, Row, describe_row
from commbench.results.passes import SPIKE_FACTOR, soak_lines, time_spikes
from commbench.results.saved import SavedRun, load_runs
from commbench.writers.console import TextTable, run_table
from commbench.writers.paths import check_file

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; }
th { background: #f0f0f0; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
p.footer { margin: -0.6em 0 1em; font-size: 0.9em; }
img { max-width: 100%; }
pre, code { background: #f6f6f6; }
details { margin: 0.5em 0; }
"""


def html_table(table: TextTable) -> str:
    head = "".join(f"<th>{escape(column)}</th>" for column in table.columns)
    body = []
    for cells in table.rows:
        tds = "".join(f"<td>{escape(cell)}</td>" if index < table.left_columns
                      else f'<td class="number">{escape(cell)}</td>' for index, cell in enumerate(cells))
        body.append(f"<tr>{tds}</tr>")
    footer = "".join(f'<p class="footer">{escape(line)}</p>' for line in table.footer)
    return (f"<table><caption>{escape(table.title)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{footer}")


def _key_values(pairs: list[tuple[str, object]]) -> str:
    rows = "".join(f"<tr><th>{escape(key)}</th><td>{escape(str(value))}</td></tr>" for key, value in pairs)
    return f"<table>{rows}</table>"


def metadata_html(run: SavedRun) -> str:
    meta = run.meta
    versions = ", ".join(f"{name} {value}" for name, value in sorted((meta.get("versions") or {}).items()))
    hosts = meta.get("hostnames") or []
    pairs = [
        ("file", run.path), ("run id", meta.get("run_id", "")), ("status", meta.get("status", "")),
        ("error", meta.get("error") or ""), ("started", meta.get("started_at", "")),
        ("finished", meta.get("finished_at") or ""), ("command", " ".join(meta.get("command") or [])),
        ("backend", meta.get("backend", "")), ("device", meta.get("device", "")),
        ("world size", meta.get("world_size", "")), ("launcher", meta.get("launcher", "")),
        ("hosts", ", ".join(sorted(set(hosts)))), ("commbench", meta.get("commbench_version", "")),
        ("torch", meta.get("torch_version", "")), ("python", meta.get("python_version", "")),
        ("libraries", versions), ("rows", len(run.rows)),
    ]
    env = meta.get("env") or {}
    env_html = _key_values(sorted(env.items())) if env else "<p>none recorded</p>"
    benchmarks = meta.get("benchmarks") or ([meta["config"]] if meta.get("config") else [])
    configs = "".join(f"<pre>{escape(_config_text(config))}</pre>" for config in benchmarks)
    return (_key_values(pairs)
            + f"<details><summary>environment ({len(env)} variables)</summary>{env_html}</details>"
            + f"<details><summary>configuration ({len(benchmarks)} benchmarks)</summary>{configs}</details>")


def _config_text(config: dict) -> str:
    return "\n".join(f"{key}: {value}" for key, value in config.items())


def plot_images(runs: list[SavedRun]) -> list[tuple[str, str]]:
    """(collective, PNG as a data URI) per collective found in the runs."""
    frame = runs_frame(runs)
    images = []
    for collective in frame.loc[frame["size_bytes"] > 0, "collective"].unique():
        figure = draw(runs, [collective])
        buffer = io.BytesIO()
        save(figure, buffer, "png")
        encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
        images.append((str(collective), f"data:image/png;base64,{encoded}"))
    return images


def _groups(rows: list[Row]) -> list[list[Row]]:
    """Rows by benchmark, collective, dtype and op (modes side by side), as the console shows them."""
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
    rows = [[describe_row(spike.first), ", ".join(map(str, spike.passes)), str(spike.total),
             f"{spike.median:.1f}", f"{spike.worst_ratio:.2f}x",
             ", ".join(f"{t:.0f}" for t in spike.elapsed_s if t is not None)] for spike in spikes]
    table = TextTable(f"spikes: passes whose p50 is {SPIKE_FACTOR:g}x or more its own median", [
        "measurement", "passes", "of", "median µs", "worst", "at s"], rows, left_columns=2)
    return (f"<h2>Over time: {escape(run.label)}</h2><pre>{escape(chr(10).join(lines[:2]))}</pre>"
            + (html_table(table) if rows else "<p>No spikes.</p>"))


def build_report(runs: list[SavedRun], plots_missing: str | None = None) -> str:
    """The page; ``plots_missing`` says why it has no plots (None: draw them)."""
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    parts = [f"<h1>commbench report</h1><p>{len(runs)} run(s), generated {escape(generated)} by commbench "
             f"{escape(__version__)}: {escape(', '.join(str(run.path) for run in runs))}</p>"]
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
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>commbench report</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


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
