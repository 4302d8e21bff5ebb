"""Console output on rank 0: a header (lines of at most 100 columns), then one rich table per collective x
dtype x op, with the α-β fit under it. A row per size and mode: several modes stack, so a table fits
100 columns (TABLE_WIDTH); one wider than the console narrows its columns, its headings wrapping at
their spaces, and is never cut. Off a terminal no line is wrapped, so grep finds every note whole; a
soak's tables say their pass, and its passes end with a table of each measurement across them.

TextTable is the one table model: the console renders it with rich, compare also as Markdown, report as
HTML. (The nccl-tests and JSON-lines console formats are in formats.py.)
"""

import os
import select
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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

from commbench.core.devices import approximate_bytes
from commbench.core.sizes import format_size
from commbench.core.words import plural
from commbench.measure.collectives import REGISTRY
from commbench.measure.impls import REFERENCE_IMPL
from commbench.measure.stats import MIN_SAMPLES_FOR_CI
from commbench.results.fit import SeriesFit, fit_line
from commbench.results.iterations import table_lines
from commbench.results.kinds import LiveRun, kind_named
from commbench.results.model import SKEW_FLOOR_US, Row, RunMeta, skew_percent
from commbench.results.passes import PassSummary, pass_summaries
from commbench.results.side_by_side import unavailable

TABLE_WIDTH = 100  # columns every table fits at its defaults, and the header's lines


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
    """On a terminal: its width, text wrapped at words. Off one (a pipe, a file, a CI log): at least
    TABLE_WIDTH columns for tables (more when COLUMNS says so) and no line wrapped at all, so that grep
    finds every note whole."""
    terminal = sys.stdout.isatty()
    console = _Console(quiet=quiet, highlight=False, soft_wrap=not terminal)
    if not terminal:
        console.width = max(console.width, TABLE_WIDTH)
    return console


def header_lines(meta: RunMeta) -> list[str]:
    """What ran where (versions, backend, device, ranks, hosts, launcher, run id), its parts joined by
    ' · ' into lines of at most TABLE_WIDTH columns (a part longer than that is a line of its own)."""
    hosts = sorted(set(meta.hostnames))
    groups = meta.groups or {}
    group_text = (f" · {groups['count']} groups of {groups['size']} ({groups['layout']})"
                  if groups.get("count", 1) > 1 else "")
    parts = [f"commbench {meta.commbench_version}", f"backend {meta.backend}", f"device {meta.device}",
             f"world size {meta.world_size}{group_text}", f"torch {meta.torch_version}",
             *(f"{name} {version}" for name, version in sorted(meta.versions.items())),
             hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts", f"launcher {meta.launcher}",
             f"run {meta.run_id}", "sizes in binary units (1K = 1024 B)"]
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + len(" · ") + len(part) <= TABLE_WIDTH:
            lines[-1] += f" · {part}"
        else:
            lines.append(part)
    return lines


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


def _heading_width(heading: str, lines: int) -> int:
    """The narrowest width at which ``heading`` wraps at its spaces into at most ``lines`` lines."""
    words = heading.split()
    for width in range(max(map(len, words), default=1), len(heading) + 1):
        count, used = 1, -1
        for word in words:
            if used + 1 + len(word) > width:
                count, used = count + 1, len(word)
            else:
                used += 1 + len(word)
        if count <= lines:
            return width
    return len(heading)


def narrowed_widths(table: TextTable, width: int) -> list[int | None]:
    """Per column, the width that makes the table fit ``width`` columns, or None to leave it as is: the
    columns whose headings are wider than their cells narrow, the most to gain first, their headings
    wrapping at their spaces onto two lines, then onto as many as it takes, until the table fits."""
    cells = [max((len(cells[index]) for cells in table.rows if index < len(cells)), default=1)
             for index in range(len(table.columns))]
    natural = [max(widest, len(column)) for widest, column in zip(cells, table.columns, strict=True)]
    total = sum(natural) + 3 * len(natural) + 1  # a rule and a space either side of each column
    chosen: list[int | None] = [None] * len(natural)
    for lines in (2, 99):
        narrower = [max(widest, _heading_width(column, lines)) for widest, column in
                    zip(cells, table.columns, strict=True)]
        for index in sorted(range(len(natural)), key=lambda index: narrower[index] - natural[index]):
            now = chosen[index] or natural[index]
            if total <= width or narrower[index] >= now:
                continue
            chosen[index] = max(narrower[index], now - (total - width))
            total -= now - chosen[index]
    return chosen


def rich_table(table: TextTable, widths: list[int | None] | None = None) -> Table:
    """The table for rich, its columns as wide as ``widths`` says (narrowed_widths), else as their
    cells and headings."""
    shown = Table(title=escape(table.title), title_justify="left", header_style="bold")
    for index, column in enumerate(table.columns):
        shown.add_column(escape(column), justify="left" if index < table.left_columns else "right",
                         width=widths[index] if widths else None)
    for cells in table.rows:
        shown.add_row(*(escape(cell) for cell in cells))
    return shown


def natural_width(console: Console, shown: Table) -> int:
    """The columns a table takes when nothing limits it."""
    unbounded = console.options.update_width(1_000_000)  # measure() stops at the console's width
    return console.measure(shown, options=unbounded).maximum


def print_whole(console: Console, shown: Table) -> None:
    """Print a table uncut: one wider than the console runs past its width rather than losing the ends
    of its cells and headings."""
    needed = natural_width(console, shown)
    if needed <= console.width:
        console.print(shown)
        return
    width = console.width
    console.width = needed
    try:
        console.print(shown)
    finally:
        console.width = width


def print_table(console: Console, table: TextTable) -> None:
    shown = rich_table(table)
    if natural_width(console, shown) > console.width:
        shown = rich_table(table, narrowed_widths(table, console.width))
    print_whole(console, shown)
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
    """'bench · all_reduce · float32 · op sum': what a table of one collective, dtype and op shows (a
    benchmark named after its collective once; no dtype for one that moves no data, the barrier)."""
    parts = [row.benchmark] if row.benchmark and row.benchmark != row.collective else []
    collective = REGISTRY.get(row.collective)
    parts += [row.collective] + ([row.dtype] if collective is None or collective.sized else [])
    parts += [f"op {row.op}"] if row.op else []
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
# their own under the size (sync above async; a soak's passes, 1-based, when one table holds them all,
# as the report's does; the communicator of a --concurrent run), so several modes never double the
# table's width.
VARYING_LABELS = [RowColumn("pass", lambda row: str(row.repeat + 1)), RowColumn("mode", lambda row: row.mode),
                  RowColumn("comm", lambda row: "" if row.communicator is None else str(row.communicator))]
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
CV = RowColumn("CV", lambda row: "-" if row.time_us_cv is None or not _has_spread(row)
               else f"{100 * row.time_us_cv:.1f}%")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _bytes(value: int | None) -> str:
    return "-" if value is None else approximate_bytes(value)


CONTENTION = [RowColumn("alone µs", lambda row: _time(row.alone_us_p50)),
              RowColumn("slowdown", lambda row: _ratio(row.slowdown))]
COMPUTE = [RowColumn("matmul µs", lambda row: _time(row.compute_us)),
           RowColumn("matmul slowdown", lambda row: _ratio(row.compute_slowdown))]
MEMORY = [RowColumn("buffers", lambda row: _bytes(row.mem_user_bytes)),
          RowColumn("beside", lambda row: _bytes(row.mem_internal_bytes))]


def _verdict(row: Row) -> str:
    """'PASS 97%': --expect's (or --fail-below's) verdict and busbw as a percentage of what it was judged
    against; from 10 times it, a multiple ('PASS 14,273x' against a floor, not 1427302%)."""
    if not row.verdict:
        return "-"
    reference = row.judged_against
    if not reference or row.busbw_gbps is None:
        return row.verdict
    ratio = row.busbw_gbps / reference
    return f"{row.verdict} {ratio:,.0f}x" if ratio >= 10 else f"{row.verdict} {100 * ratio:.0f}%"


VERDICT = RowColumn("verdict", _verdict)
ERROR = RowColumn("error", lambda row: row.error)


def run_columns(rows: list[Row]) -> list[RowColumn]:
    """The columns a table of these rows shows: what varies among them, the times (five with several
    samples, one without; with --per-iteration the CV), the bandwidths, contention's slowdowns and
    --memory's bytes when measured, and --check's, --expect's and the backend's verdicts when any row has
    one."""
    columns = [*SIZE_LABELS, *(column for column in VARYING_LABELS
                               if len({column.cell(row) for row in rows}) > 1)]
    columns += SPREAD_TIMES if any(_has_spread(row) for row in rows) else ONE_TIME
    columns += [CV] if any(row.iteration_us for row in rows) else []  # --per-iteration: nccl-tests' -I
    columns += BANDWIDTHS
    columns += CONTENTION if any(row.slowdown is not None for row in rows) else []
    columns += COMPUTE if any(row.compute_slowdown is not None for row in rows) else []
    columns += MEMORY if any(row.mem_user_bytes is not None for row in rows) else []
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
    no_interval = no_interval_line(rows) if SPREAD_TIMES[1] in columns else None
    footer += [no_interval] if no_interval else []
    if any(row.group_size == 1 and row.busbw_gbps == 0 for row in rows):
        footer.append("busbw 0: at 1 rank nothing crosses a link (the bus factor, 2(n-1)/n for all_reduce, "
                      "is 0; docs/measurement.md#bandwidth)")
    return TextTable(group_title(rows[0]), [column.heading for column in columns], cells, footer=footer)


def no_interval_line(rows: list[Row]) -> str | None:
    """Why ±95% shows '-' in some rows: they have fewer samples than the median's interval needs (one
    async window has no spread at all); None when every row has an interval."""
    missing = [row for row in rows if row.time_us_p50 is not None and _interval(row) == "-"]
    if not missing:
        return None
    sizes = list(dict.fromkeys(format_size(row.size_bytes) for row in missing))
    where = ", ".join(sizes) if len(sizes) <= 3 else f"{sizes[0]} to {sizes[-1]}, {len(sizes)} sizes"
    fewest = min(max(row.samples, len(row.samples_us)) for row in missing)
    return (f"±95% -: {plural(len(missing), 'row')} ({where}) had as few as {plural(fewest, 'sample')}; the "
            f"median's 95% interval needs {MIN_SAMPLES_FOR_CI}")


def per_rank_table(rows: Iterable[Row], hostnames: list[str], group_of: dict[int, int]) -> Table:
    """Each rank's own mean time and arrival skew, a section per size and mode."""
    rows = list(rows)
    table = Table(title=f"per rank · {group_title(rows[0])}", title_justify="left", header_style="bold")
    for name in ("size", "mode", "rank", "host", *(("group",) if group_of else ()), "mean µs", "skew µs",
                 "straggler"):
        table.add_column(name, justify="left" if name in ("mode", "host", "straggler") else "right")
    for row in rows:
        for rank, (mean, skew) in enumerate(zip(row.rank_mean_us, row.rank_skew_us, strict=True)):
            host = hostnames[rank] if rank < len(hostnames) else "?"
            cells = [format_size(row.size_bytes), row.mode, str(rank), host]
            if group_of:
                cells.append(str(group_of.get(rank, "")))
            cells += [_number(mean, 1), _number(skew, 1), "arrived last" if rank == row.slowest_rank else ""]
            table.add_row(*cells, end_section=rank == len(row.rank_mean_us) - 1)
    return table


def straggler_line(rows: list[Row], hostnames: list[str], threshold_percent: float) -> str | None:
    """One line naming the rank the others waited for, when it means something: in three quarters of the
    table's sync rows or more, three at least (async skews say nothing, docs/measurement.md), that one
    rank arrived last and the first waited for it more than ``threshold_percent`` of the p50 time (and
    SKEW_FLOOR_US). Skews scattered over ranks, as on a busy host, name nobody."""
    sync = [row for row in rows if row.mode != "async"]
    over = [(percent, row) for row in sync
            if (percent := skew_percent(row)) is not None and percent > threshold_percent
            and (row.skew_us_max or 0.0) >= SKEW_FLOOR_US and row.slowest_rank is not None]
    if len(sync) < 3 or not over:  # two rows show no pattern
        return None
    rank, last = Counter(row.slowest_rank for _, row in over).most_common(1)[0]
    if 4 * last < 3 * len(sync):
        return None
    percent, worst = max((item for item in over if item[1].slowest_rank == rank), key=lambda item: item[0])
    host = hostnames[rank] if rank is not None and rank < len(hostnames) else "?"
    share = f"{percent / 100:.0f}x" if percent >= 1000 else f"{percent:.0f}% of"
    return (f"straggler: rank {rank} ({host}) arrived last in {last} of {plural(len(sync), 'size')}: the "
            f"others waited for it up to {_time(worst.skew_us_max)} µs per op ({share} the p50 time, at "
            f"{format_size(worst.size_bytes)})")


def pass_label(row: Row, config: dict[str, Any]) -> str:
    """'pass 3 of 10' for a row of a soak (--repeat, --duration: the count is unknown then), else ''."""
    passes, duration = config.get("passes"), config.get("duration_s")
    if not duration and (passes or 1) < 2:
        return ""
    return f"pass {row.repeat + 1}" + ("" if duration or not passes else f" of {passes}")


KEY_LINE = "key: µs per op, the slowest rank's · ±95%: the p50's 95% interval · GB/s: 10^9 bytes/s"
SUMMARY_KEY = "p50: the median of the passes' p50s · spread: how far they differ (about their CV)"


def passes_table(summaries: list[PassSummary]) -> TextTable:
    """One table's measurements across a soak's passes: per size (and mode) the median of the passes'
    p50s, their spread, the fastest and slowest pass and the median busbw."""
    modes = len({summary.first.mode for summary in summaries}) > 1
    columns = ["size", *(["mode"] if modes else []), "passes", "p50 µs", "spread", "fastest µs",
               "slowest µs", "busbw GB/s"]
    cells = [[format_size(summary.first.size_bytes), *([summary.first.mode] if modes else []),
              str(summary.passes), _time(summary.p50_us),
              "-" if summary.spread_pct is None else f"{summary.spread_pct:.1f}%", _time(summary.fastest_us),
              _time(summary.slowest_us), _bandwidth(summary.busbw_gbps)] for summary in summaries]
    passes = max(summary.passes for summary in summaries)
    return TextTable(f"{group_title(summaries[0].first)} · across {plural(passes, 'pass')}", columns, cells,
                     footer=[SUMMARY_KEY])


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

    def passes_done(self, rows: list[Row]) -> None:
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
        self.group_members: list[list[int]] = []
        self.run_config: dict[str, Any] = {}  # the run's meta.config (fabric concludes with its settings)
        self.run_hardware: dict[str, Any] = {}  # the run's meta.hardware (fabric: hosts with too few CPUs)
        self.key_shown = False  # what the columns mean: said under the run's first table
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
        self.run_hardware = dict(meta.hardware or {})
        members = (meta.groups or {}).get("members", [])
        self.group_members = [list(ranks) for ranks in members]
        if len(members) > 1:
            self.group_of = {rank: index for index, ranks in enumerate(members) for rank in ranks}
        for line in header_lines(meta):
            self.console.print(escape(line))

    def note(self, text: str) -> None:
        self.console.print(f"[dim]note:[/dim] {escape(text)}")

    def row(self, row: Row) -> None:
        pass  # the table waits for its group

    def table_done(self, rows: list[Row], fits: list[SeriesFit]) -> None:
        if not rows:
            return
        kind = kind_named(rows[0].pattern)  # fabric's matrices, a pattern's steps: tables of their own
        if kind is not None and kind.console is not None:
            kind.console(self.console, rows, LiveRun(self.hostnames, self.run_config, self.run_hardware))
            return
        reason = unavailable(rows)
        if reason:  # an implementation that cannot run here: a line, not a table of dashes
            self.console.print(f"[dim]{escape(group_title(rows[0]))} unavailable: {escape(reason)}[/dim]")
            return
        table = run_table(rows, fits)
        label = pass_label(rows[0], self.run_config)
        table.title += f" · {label}" if label else ""
        if not self.key_shown:
            table.footer.append(KEY_LINE)
            self.key_shown = True
        print_table(self.console, table)
        if self.per_rank and rows[0].rank_skew_us:
            self.console.print(per_rank_table(rows, self.hostnames, self.group_of))
        line = straggler_line(rows, self.hostnames, self.skew_threshold)
        if line:
            self.console.print(f"[yellow]{escape(line)}[/yellow]")
        for line in table_lines(rows, self.hostnames, self.group_members or None):  # --per-iteration
            self.console.print(f"[dim]iterations:[/dim] {escape(line)}")

    def implementations_done(self, rows: list[Row]) -> None:
        if self.side_by_side is not None:
            print_table(self.console, self.side_by_side(rows))

    def passes_done(self, rows: list[Row]) -> None:
        """A soak's passes are all in: each table's measurements across them."""
        tables: dict[tuple, list[PassSummary]] = {}
        for summary in pass_summaries(rows):
            if kind_named(summary.first.pattern) is None:  # a feature's rows conclude in its own way
                tables.setdefault(summary.table_key, []).append(summary)
        for index, summaries in enumerate(tables.values()):
            table = passes_table(summaries)
            print_table(self.console, replace(table, footer=table.footer if index == 0 else []))

    def files(self, paths: Iterable[str]) -> None:
        self.console.print(escape("results: " + ", ".join(paths)))
