"""Console output on rank 0: a header line, then one rich table per collective x dtype x op.

With several modes the table puts them side by side, one column group per mode, a row per size.
"""

import sys
from collections.abc import Iterable

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


def rows_table(rows: Iterable[Row]) -> Table:
    """One table for rows of a single collective, dtype and op, any number of modes."""
    rows = list(rows)
    first = rows[0]
    modes = list(dict.fromkeys(row.mode for row in rows))
    title = f"{first.collective} · {first.dtype}" + (f" · op {first.op}" if first.op else "")
    table = Table(title=title, title_justify="left", header_style="bold")
    table.add_column("size", justify="right")
    table.add_column("elems/rank", justify="right")
    # A mode measured with one sample per size (one async window) shows one time, not four equal ones.
    spread = {mode: any(len(row.samples_us) > 1 for row in rows if row.mode == mode) for mode in modes}
    for mode in modes:
        prefix = f"{mode} " if len(modes) > 1 else ""
        times = ("p50 µs", "±95%", "p95 µs", "min µs", "max µs") if spread[mode] else ("µs/op",)
        for name in (*times, "algbw GB/s", "busbw GB/s"):
            table.add_column(prefix + name, justify="right")
    by_size: dict[int, dict[str, Row]] = {}
    for row in rows:
        by_size.setdefault(row.size_bytes, {})[row.mode] = row
    for size, per_mode in by_size.items():
        cells = [format_size(size), str(next(iter(per_mode.values())).count_per_rank)]
        for mode in modes:
            row = per_mode.get(mode)
            if row is None:
                cells.extend(["-"] * (7 if spread[mode] else 3))
                continue
            if spread[mode]:
                interval = "-" if row.ci95_rel is None else f"{100 * row.ci95_rel:.1f}%"
                cells.extend([_number(row.time_us_p50, 1), interval, _number(row.time_us_p95, 1),
                              _number(row.time_us_min, 1), _number(row.time_us_max, 1)])
            else:
                cells.append(_number(row.time_us_p50, 1))
            cells.extend([_number(row.algbw_gbps, 3), _number(row.busbw_gbps, 3)])
        table.add_row(*cells)
    return table


class ConsoleReporter:
    """Prints what the runner reports; only rank 0 has one.

    On a terminal a progress bar (what is being measured, how far, ETA) sits below the tables; off a
    terminal, or with --quiet, there is none.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
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
        self.console.print(escape(header_line(meta)))

    def note(self, text: str) -> None:
        self.console.print(f"[dim]note:[/dim] {escape(text)}")

    def group_done(self, rows: list[Row]) -> None:
        if rows and rows[0].pattern:  # a workload pattern's rows have tables of their own
            from commbench.patterns.tables import pattern_tables

            for renderable in pattern_tables(rows):
                self.console.print(renderable)
        elif rows:
            self.console.print(rows_table(rows))

    def files(self, paths: Iterable[str]) -> None:
        self.console.print(escape("results: " + ", ".join(paths)))
