"""Console output on rank 0: a header line, then one rich table per collective x dtype x op, with the
α-β fit under it. A row per size and mode: several modes stack, so a table fits 100 columns.

TextTable is the one table model: the console renders it with rich, compare also as Markdown, report as
HTML. (The nccl-tests and JSON-lines console formats are in formats.py.)
"""

import os
import select
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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
from commbench.measure.impls import REFERENCE_IMPL
from commbench.results.fit import SeriesFit, fit_line
from commbench.results.kinds import LiveRun, kind_named
from commbench.results.model import SKEW_FLOOR_US, Row, RunMeta, skew_percent
from commbench.results.side_by_side import unavailable


class _Output:
    """Whether this process's stdout lost its reader (`commbench ... | head -2`)."""

    closed = False


def lose_output() -> None:
    """A write found its reader gone (a closed pipe): from now on that stream, stdout or stderr, writes
    to the null device, so nothing more fails, and a run asks its ranks to stop (``output_closed``)."""
    _Output.closed = True
    streams = [stream for stream in (sys.stdout, sys.stderr) if _reader_gone(stream)] or [sys.stdout]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in streams:
            os.dup2(devnull, stream.fileno())
    except (OSError, ValueError):  # a stream without a descriptor (a test's capture): nothing to redirect
        pass
    finally:
        os.close(devnull)


def _reader_gone(stream: Any) -> bool:
    """Whether the pipe or socket behind ``stream`` has no reader (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def output_closed() -> bool:
    return _Output.closed


@contextmanager
def unless_output_closed() -> Iterator[None]:
    """Run console output; when its reader went away, drop the output (lose_output) instead of failing."""
    try:
        yield
    except BrokenPipeError:
        lose_output()


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich's way ends the process (SystemExit); a run keeps its files whole and stops its ranks."""
        lose_output()


def make_console(quiet: bool = False) -> Console:
    # Off a terminal (CI logs, pipes) rich would wrap at 80 columns; tables read better unwrapped.
    width = None if sys.stdout.isatty() else 200
    return _Console(width=width, quiet=quiet, highlight=False, soft_wrap=False)


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


def rich_table(table: TextTable, narrow: bool = False) -> Table:
    """The table for rich; ``narrow``: each column only as wide as its longest cell or heading word, the
    headings wrapping at their spaces, so no cell is cut where the full headings would not fit."""
    shown = Table(title=escape(table.title), title_justify="left", header_style="bold")
    for index, column in enumerate(table.columns):
        widest = max([len(cells[index]) for cells in table.rows if index < len(cells)]
                     + [len(word) for word in column.split()], default=1)
        shown.add_column(escape(column), justify="left" if index < table.left_columns else "right",
                         width=widest if narrow else None)
    for cells in table.rows:
        shown.add_row(*(escape(cell) for cell in cells))
    return shown


def print_table(console: Console, table: TextTable) -> None:
    shown = rich_table(table)
    unbounded = console.options.update_width(1_000_000)  # measure() stops at the console's width
    if console.measure(shown, options=unbounded).maximum > console.width:
        shown = rich_table(table, narrow=True)
    console.print(shown)
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
    parts += [] if row.impl == REFERENCE_IMPL else [row.impl]
    return " · ".join(parts)


@dataclass(frozen=True)
class RowColumn:
    """A column of a run table: its heading and its cell for a row."""

    heading: str
    cell: Callable[[Row], str]


def _has_spread(row: Row) -> bool:
    """More than one timing sample: p50, its interval, p95, min and max differ (one async window: not)."""
    return max(row.samples, len(row.samples_us)) > 1


def _time(value: float | None) -> str:
    """µs to 0.1 below a millisecond, whole µs above: a tenth of a µs on milliseconds is noise."""
    return "-" if value is None else f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def _bandwidth(value: float | None) -> str:
    """GB/s to four significant digits from 1 GB/s (0.001 below): 412.3, 41.23, 4.123, 0.412."""
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) >= 10 else f"{value:.3f}"


def _spread_time(field_name: str) -> Callable[[Row], str]:
    return lambda row: _time(getattr(row, field_name)) if _has_spread(row) else "-"


def _interval(row: Row) -> str:
    return "-" if row.ci95_rel is None or not _has_spread(row) else f"{100 * row.ci95_rel:.1f}%"


# Label columns shown only when the table's rows differ in them: each stacks its values as rows of
# their own under the size (sync above async), so several modes never double the table's width.
VARYING_LABELS = [RowColumn("mode", lambda row: row.mode)]
SIZE_LABELS = [RowColumn("size", lambda row: format_size(row.size_bytes)),
               RowColumn("elems per rank", lambda row: str(row.count_per_rank))]
SPREAD_TIMES = [RowColumn("p50 µs", lambda row: _time(row.time_us_p50)), RowColumn("±95%", _interval),
                RowColumn("p95 µs", _spread_time("time_us_p95")),
                RowColumn("min µs", _spread_time("time_us_min")),
                RowColumn("max µs", _spread_time("time_us_max"))]
ONE_TIME = [RowColumn("µs/op", lambda row: _time(row.time_us_p50))]
BANDWIDTHS = [RowColumn("algbw GB/s", lambda row: _bandwidth(row.algbw_gbps)),
              RowColumn("busbw GB/s", lambda row: _bandwidth(row.busbw_gbps))]
WRONG = RowColumn("wrong", lambda row: "-" if row.wrong is None else str(row.wrong))


def _verdict(row: Row) -> str:
    """'PASS 97%': --expect's (or --fail-below's) verdict and busbw as a percentage of what it was judged
    against."""
    if not row.verdict:
        return "-"
    reference = row.judged_against
    percent = f" {100 * row.busbw_gbps / reference:.0f}%" if reference and row.busbw_gbps is not None else ""
    return row.verdict + percent


VERDICT = RowColumn("verdict", _verdict)
ERROR = RowColumn("error", lambda row: row.error)


def run_columns(rows: list[Row]) -> list[RowColumn]:
    """The columns a table of these rows shows: what varies among them, the times (five with several
    samples, one without), the bandwidths, and --check's, --expect's and the backend's verdicts when any
    row has one."""
    columns = [*SIZE_LABELS, *(column for column in VARYING_LABELS
                               if len({column.cell(row) for row in rows}) > 1)]
    columns += SPREAD_TIMES if any(_has_spread(row) for row in rows) else ONE_TIME
    columns += BANDWIDTHS
    columns += [WRONG] if any(row.wrong is not None for row in rows) else []
    columns += [VERDICT] if any(row.verdict for row in rows) else []
    columns += [ERROR] if any(row.error for row in rows) else []
    return columns


def run_table(rows: Iterable[Row], fits: Iterable[SeriesFit] = ()) -> TextTable:
    """One table for rows of a single collective, dtype, op and placement: a row per size and mode, the
    modes of a size one above the other (its size written once), so it fits 100 columns whatever is
    measured. With --check a ``wrong`` column (wrong elements over all ranks); rows the backend rejected
    show ``-`` for their numbers and the reason in an ``error`` column."""
    rows = list(rows)
    columns = run_columns(rows)
    varying = [column for column in columns if column in VARYING_LABELS]
    seen = {column.heading: list(dict.fromkeys(column.cell(row) for row in rows)) for column in varying}
    by_size: dict[int, list[Row]] = {}
    for row in rows:
        by_size.setdefault(row.size_bytes, []).append(row)
    cells: list[list[str]] = []
    for size_rows in by_size.values():
        size_rows.sort(key=lambda row: [seen[column.heading].index(column.cell(row)) for column in varying])
        for index, row in enumerate(size_rows):
            cells.append(["" if index and column in SIZE_LABELS else column.cell(row) for column in columns])
    footer = [fit_line(fit, with_mode=len({row.mode for row in rows}) > 1) for fit in fits]
    return TextTable(group_title(rows[0]), [column.heading for column in columns], cells, footer=footer)


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
