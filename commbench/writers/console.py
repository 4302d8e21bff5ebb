"""Console output on rank 0: a header line, then one rich table per collective x dtype x op, with the
α-β fit under it. With several modes the table puts them side by side, a row per size.

TextTable is the one table model: the console renders it with rich, compare also as Markdown, report as
HTML. (The nccl-tests and JSON-lines console formats are in formats.py.)
"""

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from commbench.core.sizes import format_size
from commbench.results.fit import SeriesFit, fit_line
from commbench.results.kinds import LiveRun, kind_named
from commbench.results.model import DEFAULT_IMPL, Row, RunMeta
from commbench.results.side_by_side import unavailable


def make_console(quiet: bool = False) -> Console:
    # Off a terminal (CI logs, pipes) rich would wrap at 80 columns; tables read better unwrapped.
    width = None if sys.stdout.isatty() else 200
    return Console(width=width, quiet=quiet, highlight=False, soft_wrap=False)


def header_line(meta: RunMeta) -> str:
    versions = "".join(f" · {name} {version}" for name, version in sorted(meta.versions.items()))
    hosts = sorted(set(meta.hostnames))
    host_text = hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts"
    groups = meta.groups or {}
    group_text = (f" · {groups['count']} groups of {groups['size']} ({groups['layout']})"
                  if groups.get("count", 1) > 1 else "")
    return (f"commbench {meta.commbench_version} · backend {meta.backend} · device {meta.device} · "
            f"world size {meta.world_size}{group_text} · torch {meta.torch_version}{versions} · "
            f"{host_text} · launcher {meta.launcher} · run {meta.run_id} · "
            "sizes in binary units (1K = 1024 B)")


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
    parts += [row.placement] if row.placement else []
    parts += [] if row.impl == DEFAULT_IMPL else [row.impl]
    return " · ".join(parts)


def run_table(rows: Iterable[Row], fits: Iterable[SeriesFit] = ()) -> TextTable:
    """One table for rows of a single collective, dtype, op and placement, any number of modes side by
    side. With --check each mode gets a ``wrong`` column (wrong elements over all ranks); rows the
    backend rejected show ``-`` for their numbers and the reason in an ``error`` column."""
    rows = list(rows)
    modes = list(dict.fromkeys(row.mode for row in rows))
    columns = ["size", "elems/rank"]
    # A mode measured with one sample per size (one async window) shows one time, not four equal ones.
    spread = {mode: any(len(row.samples_us) > 1 for row in rows if row.mode == mode) for mode in modes}
    checked = {mode: any(row.wrong is not None for row in rows if row.mode == mode) for mode in modes}
    for mode in modes:
        prefix = f"{mode} " if len(modes) > 1 else ""
        times = ("p50 µs", "±95%", "p95 µs", "min µs", "max µs") if spread[mode] else ("µs/op",)
        columns.extend(prefix + name for name in (*times, "algbw GB/s", "busbw GB/s",
                                                  *(("wrong",) if checked[mode] else ())))
    errors = any(row.error for row in rows)
    if errors:
        columns.append("error")
    by_size: dict[int, dict[str, Row]] = {}
    for row in rows:
        by_size.setdefault(row.size_bytes, {})[row.mode] = row
    cells_by_size = []
    for size, per_mode in by_size.items():
        cells = [format_size(size), str(next(iter(per_mode.values())).count_per_rank)]
        for mode in modes:
            row = per_mode.get(mode)
            if row is None:
                cells.extend(["-"] * ((7 if spread[mode] else 3) + checked[mode]))
                continue
            if spread[mode]:
                interval = "-" if row.ci95_rel is None else f"{100 * row.ci95_rel:.1f}%"
                cells.extend([_number(row.time_us_p50, 1), interval, _number(row.time_us_p95, 1),
                              _number(row.time_us_min, 1), _number(row.time_us_max, 1)])
            else:
                cells.append(_number(row.time_us_p50, 1))
            cells.extend([_number(row.algbw_gbps, 3), _number(row.busbw_gbps, 3)])
            if checked[mode]:
                cells.append("-" if row.wrong is None else str(row.wrong))
        if errors:
            cells.append(next((row.error for row in per_mode.values() if row.error), ""))
        cells_by_size.append(cells)
    fits = list(fits)
    footer = [fit_line(fit, with_mode=len(modes) > 1) for fit in fits]
    return TextTable(group_title(rows[0]), columns, cells_by_size, footer=footer)


def per_rank_table(rows: Iterable[Row], hostnames: list[str], group_of: dict[int, int]) -> Table:
    """Each rank's own mean time and arrival skew, a section per size and mode."""
    rows = list(rows)
    table = Table(title=f"per rank · {group_title(rows[0])}", title_justify="left", header_style="bold")
    for name in ("size", "mode", "rank", "host", *(("group",) if group_of else ()), "mean µs", "skew µs",
                 ""):
        table.add_column(name, justify="left" if name in ("mode", "host", "") else "right")
    for row in rows:
        for rank, (mean, skew) in enumerate(zip(row.rank_mean_us, row.rank_skew_us, strict=True)):
            host = hostnames[rank] if rank < len(hostnames) else "?"
            cells = [format_size(row.size_bytes), row.mode, str(rank), host]
            if group_of:
                cells.append(str(group_of.get(rank, "")))
            cells += [_number(mean, 1), _number(skew, 1), "last in" if rank == row.slowest_rank else ""]
            table.add_row(*cells, end_section=rank == len(row.rank_mean_us) - 1)
    return table


def skew_percent(row: Row) -> float | None:
    """A row's largest arrival skew as a percentage of its p50 time."""
    if row.skew_us_max is None or not row.time_us_p50 or row.time_us_p50 <= 0:
        return None
    return 100.0 * row.skew_us_max / row.time_us_p50


SKEW_FLOOR_US = 20.0  # smaller skews are host scheduling jitter, whatever the op time


def straggler_line(rows: list[Row], hostnames: list[str], threshold_percent: float) -> str | None:
    """One line naming the rank the others waited for, when some row's skew passes the threshold."""
    over = [(percent, row) for row in rows
            if (percent := skew_percent(row)) is not None and percent > threshold_percent
            and (row.skew_us_max or 0.0) >= SKEW_FLOOR_US]
    if not over:
        return None
    percent, worst = max(over, key=lambda item: item[0])
    rank = worst.slowest_rank
    host = hostnames[rank] if rank is not None and rank < len(hostnames) else "?"
    same = sum(1 for _, row in over if row.slowest_rank == rank)
    return (f"straggler: {group_title(worst)}: rank {rank} ({host}) arrived last, {worst.skew_us_max:.1f} µs "
            f"after the first rank at {format_size(worst.size_bytes)} {worst.mode} ({percent:.0f}% of "
            f"p50); {len(over)} of {len(rows)} rows above {threshold_percent:g}%, rank {rank} last in {same}")


class ReporterBase:
    """What every console format gets from the run; the hooks a format has no use for do nothing."""

    def plan(self, steps: int) -> None:
        pass

    def working(self, text: str) -> None:
        pass

    def advance(self) -> None:
        pass

    def close(self) -> None:
        pass

    def implementations_done(self, rows: list[Row]) -> None:
        pass


class ConsoleReporter(ReporterBase):
    """Prints what the runner reports; only rank 0 has one.

    On a terminal a progress bar (what is being measured, how far, ETA) sits below the tables; off a
    terminal, or with --quiet, there is none.
    """

    def __init__(self, console: Console, per_rank: bool = False, skew_threshold: float = 25.0,
                 side_by_side: Callable[[list[Row]], TextTable] | None = None) -> None:
        self.console = console
        self.side_by_side = side_by_side  # implementations compared (writers/side_by_side.py)
        self.per_rank = per_rank
        self.skew_threshold = skew_threshold
        self.hostnames: list[str] = []
        self.group_of: dict[int, int] = {}
        self.run_config: dict[str, Any] = {}  # the run's meta.config (fabric concludes with its settings)
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def plan(self, steps: int) -> None:
        if not self.console.is_terminal or self.console.quiet or steps == 0:
            return
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                  console=self.console, transient=True)
        self._task = self._progress.add_task("starting", total=steps)
        self._progress.start()

    def working(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=escape(text))

    def advance(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def header(self, meta: RunMeta) -> None:
        self.hostnames = list(meta.hostnames)
        self.run_config = dict(meta.config)
        members = (meta.groups or {}).get("members", [])
        if len(members) > 1:
            self.group_of = {rank: index for index, ranks in enumerate(members) for rank in ranks}
        self.console.print(escape(header_line(meta)))

    def note(self, text: str) -> None:
        self.console.print(f"[dim]note:[/dim] {escape(text)}")

    def row(self, row: Row) -> None:
        pass  # the table waits for its group

    def table_done(self, rows: list[Row], fits: list[SeriesFit]) -> None:
        if not rows:
            return
        kind = kind_named(rows[0].pattern)  # fabric's matrices, a pattern's steps: tables of their own
        if kind is not None and kind.console is not None:
            kind.console(self.console, rows, LiveRun(self.hostnames, self.run_config))
            return
        reason = unavailable(rows)
        if reason:  # an implementation that cannot run here: a line, not a table of dashes
            self.console.print(f"[dim]{escape(group_title(rows[0]))} unavailable: {escape(reason)}[/dim]")
            return
        print_table(self.console, run_table(rows, fits))
        if self.per_rank and rows[0].rank_skew_us:
            self.console.print(per_rank_table(rows, self.hostnames, self.group_of))
        line = straggler_line(rows, self.hostnames, self.skew_threshold)
        if line:
            self.console.print(f"[yellow]{escape(line)}[/yellow]")

    def implementations_done(self, rows: list[Row]) -> None:
        if self.side_by_side is not None:
            print_table(self.console, self.side_by_side(rows))

    def files(self, paths: Iterable[str]) -> None:
        self.console.print(escape("results: " + ", ".join(paths)))
