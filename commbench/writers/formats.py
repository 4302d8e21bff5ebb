"""Console formats of a run (rank 0 only), a registry of reporter classes by --format name: `table`
(console.py's tables), `nccl-tests` and `jsonl`; --quiet's SilentReporter stands apart from them. A class
registers with @console_format(name) and builds itself from the launch settings (``for_settings``);
OUTPUT_FORMATS, the names --format takes, is the registry's keys in the order registered.

nccl-tests: the column layout of NVIDIA's nccl-tests (size, count, type, redop, root, then time, algbw,
busbw and #wrong per column group), so parsers written for all_reduce_perf read commbench's output
unchanged. Its two column groups are out-of-place and in-place; ours are the modes measured (sync,
async), in the order asked for. Lines that are not results start with '#', as there. time is the p50
in µs (the time algbw and busbw are computed from); #wrong is the row's wrong count with --check, N/A
without it. A row the backend rejected shows N/A and its error on a '#' line. Each group ends with
nccl-tests' "# Avg bus bandwidth" line (the mean busbw over its sizes, first mode) and the α-β fit.

jsonl: one JSON object per measured row on stdout as it is measured (results.json's row form); the
header, notes and the files line go to stderr, so stdout is nothing but rows.
"""

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Protocol, TextIO, TypeVar

from commbench.results.fit import SeriesFit, fit_line
from commbench.results.model import Row, RunMeta
from commbench.writers.console import (
    ConsoleReporter,
    ReporterBase,
    group_title,
    header_lines,
    make_console,
    pass_label,
)
from commbench.writers.files import clean_for_json
from commbench.writers.side_by_side import side_by_side_table

# Our dtype and reduce-op names in nccl-tests' spelling.
NCCL_TESTS_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
                    "int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64",
                    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}
NCCL_TESTS_OPS = {"sum": "sum", "prod": "prod", "max": "max", "min": "min", "avg": "avg",
                  "premul_sum": "mulsum", "": "none"}


class ConsoleSettings(Protocol):
    """What the console's format depends on (config.launch.LaunchConfig has it all)."""

    quiet: bool
    output_format: str
    per_rank: bool
    skew_threshold_percent: float


class Reporter(Protocol):
    """What a run reports to (running/recording.py): a console format's reporter, or --quiet's. Subclass
    console.ReporterBase for the hooks a format has no use for."""

    def header(self, meta: RunMeta) -> None: ...
    def note(self, text: str) -> None: ...
    def plan(self, steps: int) -> None: ...
    def working(self, text: str) -> None: ...
    def row(self, row: Row) -> None: ...
    def advance(self) -> None: ...
    def table_done(self, rows: list[Row], fits: list[SeriesFit]) -> None: ...
    def implementations_done(self, rows: list[Row]) -> None: ...
    def passes_done(self, rows: list[Row]) -> None: ...
    def files(self, paths: Iterable[str]) -> None: ...
    def close(self) -> None: ...


class Format(Protocol):
    """A console format's reporter class, as the registry holds it."""

    @classmethod
    def for_settings(cls, setup: ConsoleSettings) -> Reporter: ...


FORMATS: dict[str, type[Format]] = {}  # by --format name, in the order --help lists them
Registered = TypeVar("Registered", bound=type)


def console_format(name: str) -> Callable[[Registered], Registered]:
    """Registers a reporter class under ``name``, the --format value that chooses it."""
    def add(reporter: Registered) -> Registered:
        if name in FORMATS:
            raise ValueError(f"console format {name!r} is already registered")
        FORMATS[name] = reporter
        return reporter
    return add


@console_format("table")
class TableReporter(ConsoleReporter):
    """The default: a rich table per collective, dtype and op (console.py), and implementations side by
    side (side_by_side.py)."""

    @classmethod
    def for_settings(cls, setup: ConsoleSettings) -> "TableReporter":
        return cls(make_console(), per_rank=setup.per_rank, skew_threshold=setup.skew_threshold_percent,
                   side_by_side=side_by_side_table)


def nccl_tests_number(value: float | None, width: int) -> str:
    """A number in ``width`` columns with nccl-tests' precision steps (2, 1, 0 decimals, then e-notation)."""
    if value is None:
        return f"{'N/A':>{width}}"
    digits = len(str(int(abs(value)))) if abs(value) >= 1 else 0
    if digits < width - 2:
        return f"{value:{width}.2f}"
    if digits < width - 1:
        return f"{value:{width}.1f}"
    if digits < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


@console_format("nccl-tests")
class NcclTestsReporter(ReporterBase):
    """Streams nccl-tests lines: one per size as soon as every mode of that size is measured."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.pending: list[Row] = []  # the modes of the size being measured
        self.header_done = False
        self.run_config: dict = {}  # the run's meta.config (a soak's pass count)

    @classmethod
    def for_settings(cls, setup: ConsoleSettings) -> "NcclTestsReporter":
        return cls(sys.stdout)

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def header(self, meta: RunMeta) -> None:
        self.run_config = dict(meta.config)
        for line in header_lines(meta):
            self._print(f"# {line}")
        self._print(f"# command: {' '.join(meta.command)}")

    def note(self, text: str) -> None:
        self._print(f"# note: {text}")

    def row(self, row: Row) -> None:
        if self.pending and self.pending[0].size_bytes != row.size_bytes:
            self._flush()
        self.pending.append(row)

    def _column_header(self, modes: list[str]) -> None:
        groups = "".join(f"  {mode:^31}" for mode in modes)
        names = "".join(f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}" for _ in modes)
        units = "".join(f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}" for _ in modes)
        self._print(f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}{groups}")
        self._print(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}{names}")
        self._print(f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}{units}")

    def _flush(self) -> None:
        rows, self.pending = self.pending, []
        if not rows:
            return
        first = rows[0]
        if not self.header_done:
            self._print("#")
            label = pass_label(first, self.run_config)
            self._print(f"# {group_title(first)}{f' · {label}' if label else ''}")
            self._column_header([row.mode for row in rows])
            self.header_done = True
        line = (f"{first.size_bytes:12d}  {first.count_per_rank:12d}  "
                f"{NCCL_TESTS_TYPES.get(first.dtype, first.dtype):>8}  "
                f"{NCCL_TESTS_OPS.get(first.op, first.op):>6}  {first.root:6d}")
        for row in rows:
            wrong = "N/A" if row.wrong is None else str(row.wrong)
            line += (f"  {nccl_tests_number(row.time_us_p50, 7)}  {nccl_tests_number(row.algbw_gbps, 6)}"
                     f"  {nccl_tests_number(row.busbw_gbps, 6)}  {wrong:>6}")
        self._print(line)
        for row in rows:
            if row.error:
                self._print(f"# error: {row.mode}: {row.error}")

    def table_done(self, rows: list[Row], fits: list[SeriesFit]) -> None:
        self._flush()
        self.header_done = False
        if not rows:
            return
        first_mode = rows[0].mode
        busbw = [row.busbw_gbps for row in rows if row.mode == first_mode and row.busbw_gbps is not None]
        if busbw:
            self._print(f"# {'Avg bus bandwidth':<20} : {sum(busbw) / len(busbw):g} ")
        modes = {row.mode for row in rows}
        for fit in fits:
            self._print(f"# {fit_line(fit, with_mode=len(modes) > 1)}")

    def files(self, paths: Iterable[str]) -> None:
        self._print("#")
        self._print(f"# results: {', '.join(paths)}")


@console_format("jsonl")
class JsonLinesReporter(ReporterBase):
    """Rows as JSON lines on stdout, everything else on stderr."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err

    @classmethod
    def for_settings(cls, setup: ConsoleSettings) -> "JsonLinesReporter":
        return cls(sys.stdout, sys.stderr)

    def header(self, meta: RunMeta) -> None:
        for line in header_lines(meta):
            print(line, file=self.err, flush=True)

    def note(self, text: str) -> None:
        print(f"note: {text}", file=self.err, flush=True)

    def row(self, row: Row) -> None:
        print(json.dumps(clean_for_json(asdict(row))), file=self.out, flush=True)

    def table_done(self, rows: list[Row], fits: list[SeriesFit]) -> None:
        pass

    def files(self, paths: Iterable[str]) -> None:
        print(f"results: {', '.join(paths)}", file=self.err, flush=True)


class SilentReporter(ReporterBase):
    """--quiet: nothing on stdout; the one line saying where the files are goes to stderr."""

    def header(self, meta: RunMeta) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def row(self, row: Row) -> None:
        pass

    def table_done(self, rows: list[Row], fits: list[SeriesFit]) -> None:
        pass

    def files(self, paths: Iterable[str]) -> None:
        print(f"results: {', '.join(paths)}", file=sys.stderr, flush=True)


OUTPUT_FORMATS = FORMATS.keys()  # live: a format registered later is one --format takes


def make_reporter(setup: ConsoleSettings) -> Reporter:
    """The reporter --quiet or --format (config.launch checked the name) asks for."""
    if setup.quiet:
        return SilentReporter()
    return FORMATS[setup.output_format].for_settings(setup)
