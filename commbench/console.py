"""Console output on rank 0: a header line, then one rich table per collective x dtype x op, with the
α-β fit under it. With several modes the table puts them side by side, a row per size.

TextTable is the one table model: the console renders it with rich, compare also as Markdown, report as
HTML. (The nccl-tests and JSON-lines console formats are in formats.py.)
"""

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from commbench.fit import SeriesFit, fit_line
from commbench.results import Row, RunMeta
from commbench.sizes import format_size


def make_console(quiet: bool = False) -> Console:
    # Off a terminal (CI logs, pipes) rich would wrap at 80 columns; tables read better unwrapped.
    width = None if sys.stdout.isatty() else 200
    return Console(width=width, quiet=quiet, highlight=False, soft_wrap=False)


def header_line(meta: RunMeta) -> str:
    versions = "".join(f" · {name} {version}" for name, version in sorted(meta.versions.items()))
    hosts = sorted(set(meta.hostnames))
    host_text = hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts"
    return (f"commbench {meta.commbench_version} · backend {meta.backend} · device {meta.device} · "
            f"world size {meta.world_size} · torch {meta.torch_version}{versions} · {host_text} · "
            f"launcher {meta.launcher} · run {meta.run_id}")


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@dataclass
class TextTable:
    """A table as text cells, rendered for the console (rich), Markdown or HTML by whoever shows it."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    left_columns: int = 0  # the first N columns are labels, aligned left; numbers align right
    footer: list[str] = field(default_factory=list)  # lines under the table (the α-β fit, ...)


def rich_table(table: TextTable) -> Table:
    shown = Table(title=escape(table.title), title_justify="left", header_style="bold")
    for index, column in enumerate(table.columns):
        shown.add_column(escape(column), justify="left" if index < table.left_columns else "right")
    for cells in table.rows:
        shown.add_row(*(escape(cell) for cell in cells))
    return shown


def print_table(console: Console, table: TextTable) -> None:
    console.print(rich_table(table))
    for line in table.footer:
        console.print(escape(line))


def markdown_table(table: TextTable) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    align = [":--" if index < table.left_columns else "--:" for index in range(len(table.columns))]
    lines = [f"**{cell(table.title)}**", "", "| " + " | ".join(cell(c) for c in table.columns) + " |",
             "| " + " | ".join(align) + " |"]
    lines.extend("| " + " | ".join(cell(c) for c in cells) + " |" for cells in table.rows)
    if table.footer:
        lines.append("")
        lines.extend(f"{cell(line)}  " for line in table.footer)
    return "\n".join(lines) + "\n"


def group_title(row: Row) -> str:
    """'bench · all_reduce · float32 · op sum': what a table of one collective, dtype and op shows."""
    parts = [row.benchmark] if row.benchmark else []
    parts += [row.collective, row.dtype] + ([f"op {row.op}"] if row.op else [])
    return " · ".join(parts)


def run_table(rows: Iterable[Row], fits: Iterable[SeriesFit] = ()) -> TextTable:
    """One table for rows of a single collective, dtype and op, any number of modes side by side."""
    rows = list(rows)
    modes = list(dict.fromkeys(row.mode for row in rows))
    columns = ["size", "elems/rank"]
    # A mode measured with one sample per size (one async window) shows one time, not four equal ones.
    spread = {mode: any(len(row.samples_us) > 1 for row in rows if row.mode == mode) for mode in modes}
    for mode in modes:
        prefix = f"{mode} " if len(modes) > 1 else ""
        times = ("p50 µs", "p95 µs", "min µs", "max µs") if spread[mode] else ("µs/op",)
        columns.extend(prefix + name for name in (*times, "algbw GB/s", "busbw GB/s"))
    by_size: dict[int, dict[str, Row]] = {}
    for row in rows:
        by_size.setdefault(row.size_bytes, {})[row.mode] = row
    cells_by_size = []
    for size, per_mode in by_size.items():
        cells = [format_size(size), str(next(iter(per_mode.values())).count_per_rank)]
        for mode in modes:
            row = per_mode.get(mode)
            width = 6 if spread[mode] else 3
            if row is None:
                cells.extend(["-"] * width)
                continue
            times = [row.time_us_p50, row.time_us_p95, row.time_us_min, row.time_us_max]
            cells.extend(_number(value, 1) for value in times[: width - 2])
            cells.extend([_number(row.algbw_gbps, 3), _number(row.busbw_gbps, 3)])
        cells_by_size.append(cells)
    fits = list(fits)
    footer = [fit_line(fit, with_mode=len(modes) > 1) for fit in fits]
    return TextTable(group_title(rows[0]), columns, cells_by_size, footer=footer)


def rows_table(rows: Iterable[Row]) -> Table:
    return rich_table(run_table(rows))


class ConsoleReporter:
    """Prints what the runner reports; only rank 0 has one."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def header(self, meta: RunMeta) -> None:
        self.console.print(escape(header_line(meta)))

    def note(self, text: str) -> None:
        self.console.print(f"[dim]note:[/dim] {escape(text)}")

    def row(self, row: Row) -> None:
        pass  # the table waits for its group

    def group_done(self, rows: list[Row], fits: list[SeriesFit]) -> None:
        if rows:
            print_table(self.console, run_table(rows, fits))

    def files(self, paths: Iterable[str]) -> None:
        self.console.print(escape("results: " + ", ".join(paths)))
