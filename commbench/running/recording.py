"""Rank 0's record of a run: its metadata, its files and its console.

``Recording`` is the Output rank 0 measures into: every row goes to the files the moment it arrives
(results.ResultWriter: CSV appended and fsynced, JSON rewritten atomically), then to the console reporter
(whose output, once its reader goes away, `| head`, is dropped: the files matter more, and the ranks
stop at the next size, writers.console.output_closed);
each finished table's α-β fits go to both. ``finish`` records how the run ended (complete, failed,
interrupted) so a reader of results.json always knows.
"""

import platform
import shlex
import signal
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from commbench import __version__
from commbench.backends.base import Backend
from commbench.config.launch import Benchmark, LaunchConfig
from commbench.core.groups import GroupPlan
from commbench.core.words import plural
from commbench.provenance.explain.engine import MODEL_VERSION, explain_run
from commbench.provenance.explain.text import console_line
from commbench.results.columns import RowBlock, RowColumns
from commbench.results.fit import SeriesFit, fit_rows
from commbench.results.kinds import kind_named
from commbench.results.model import Row, RunMeta
from commbench.writers.console import unless_output_closed
from commbench.writers.files import ResultWriter
from commbench.writers.formats import Reporter, make_reporter

RECORDED_ENV_PREFIXES = ("COMMBENCH_", "NCCL_", "TORCH_", "GLOO_", "UCC_", "UCX_", "CUDA_VISIBLE_DEVICES",
                         "OMP_NUM_THREADS")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def make_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def config_record(benchmark: Benchmark) -> dict[str, Any]:
    """A benchmark's configuration as results.json records it: one flat mapping, launch settings
    included, the command line left out (it is recorded once, as the command)."""
    values = asdict(benchmark)  # type: ignore[call-overload]
    launch = values.pop("launch")
    return {key: value for key, value in {**values, **launch}.items() if key != "argv"}


def build_meta(benchmarks: list[Benchmark], backend: Backend, hostnames: list[str],
               environ: Mapping[str, str], plan: GroupPlan, launcher: str, run_id: str | None = None
               ) -> RunMeta:
    setup = benchmarks[0].launch
    import torch

    return RunMeta(
        run_id=run_id or make_run_id(),
        started_at=now(),
        command=["commbench", *setup.argv],
        commbench_version=__version__,
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        backend=backend.name,
        device=str(backend.device.type),
        world_size=backend.world_size,
        launcher=launcher,
        hostnames=hostnames,
        versions=backend.versions(),
        env={key: value for key, value in sorted(environ.items()) if key.startswith(RECORDED_ENV_PREFIXES)},
        config=config_record(benchmarks[0]),
        benchmarks=[config_record(benchmark) for benchmark in benchmarks],
        groups=plan.as_dict(),
    )


def run_directory(setup: LaunchConfig, run_id: str) -> Path:
    return Path(setup.output_dir) / run_id


def result_paths(setup: LaunchConfig, run_id: str) -> tuple[Path, Path]:
    run_dir = run_directory(setup, run_id)
    csv_path = Path(setup.csv_path) if setup.csv_path else run_dir / "results.csv"
    json_path = Path(setup.json_path) if setup.json_path else run_dir / "results.json"
    return csv_path, json_path


def launcher_status_note(launcher: str, signal_name: str) -> str:
    """What the exit status after a signal will be where the launcher, not commbench, decides it: torchrun
    exits 1 when a signal stops it, whatever its ranks return."""
    if launcher != "torchrun":
        return ""
    status = 128 + signal.Signals[signal_name].value
    return (f" (the ranks exit {status}; torchrun's own status after a signal is 1 by its rule: "
            "results.json's meta.status says interrupted)")


class Recording:
    """Rank 0's Output: the files first, then the console, in the format asked for."""

    def __init__(self, meta: RunMeta, setup: LaunchConfig) -> None:
        self.reporter: Reporter = make_reporter(setup)
        with unless_output_closed():
            self.reporter.header(meta)
        csv_path, json_path = result_paths(setup, meta.run_id)
        self.writer = ResultWriter(meta, csv_path, json_path)
        self.table_rows = RowColumns()  # the rows of the table being measured
        self.explained: dict[tuple, dict[str, Any]] = {}  # results.json's explain.series: each series' latest

    def note(self, text: str) -> None:
        with unless_output_closed():
            self.reporter.note(text)

    def plan(self, steps: int) -> None:
        with unless_output_closed():
            self.reporter.plan(steps)

    def working(self, text: str) -> None:
        with unless_output_closed():
            self.reporter.working(text)

    def row(self, row: Row) -> None:
        self.writer.add(row)
        self._shown([row])
        self.table_rows.append(row)

    def batch(self, rows: RowBlock) -> None:
        self.writer.add_block(rows)
        self._shown(rows)
        self.table_rows.extend(rows)  # the block's columns, shared

    def _shown(self, rows: Iterable[Row]) -> None:
        for row in rows:
            with unless_output_closed():
                self.reporter.row(row)
                self.reporter.advance()

    def table_done(self, rows: Sequence[Row]) -> None:
        self.table_rows = RowColumns()
        kind = kind_named(rows[0].pattern) if rows else None
        fits = fit_rows(rows) if kind is None or kind.fitted else []
        with self.writer.one_rewrite():  # the table's fits and its explanation
            if fits:
                self.writer.add_fits([fit.to_dict() for fit in fits])
            with unless_output_closed():
                self.reporter.table_done(rows, fits)
            self.explain(rows, fits)

    def explain(self, rows: Sequence[Row], fits: list[SeriesFit]) -> None:
        """explain's line under the table and its part of results.json (docs/explain.md). The rows are
        saved before: a fault in explaining them is a note, never a lost run."""
        meta = {field.name: getattr(self.writer.meta, field.name) for field in fields(self.writer.meta)}
        try:
            explained = explain_run(meta, rows, fits)
        except Exception as exc:  # the measured rows matter more than their explanation
            self.note(f"explain: could not explain this table ({type(exc).__name__}: {exc})")
            return
        if not explained:
            return
        for series in explained:  # a soak's later pass replaces its series' explanation
            self.explained[(series.benchmark, *sorted(series.series.items()))] = series.to_dict()
        self.writer.set_section("explain", {"model": MODEL_VERSION, "series": list(self.explained.values())})
        line = console_line(explained[0])
        if line:
            self.note(line)

    def implementations_done(self, rows: list[Row]) -> None:
        with unless_output_closed():
            self.reporter.implementations_done(rows)

    def passes_done(self, rows: list[Row]) -> None:
        with unless_output_closed():
            self.reporter.passes_done(rows)

    def section(self, name: str, payload: dict) -> None:
        self.writer.set_section(name, payload)

    def unavailable(self, reasons: dict[str, str]) -> None:
        self.writer.meta.unavailable.update(reasons)  # written with the next row, and at the end

    def close_console(self) -> None:
        with unless_output_closed():
            self.reporter.close()

    def finish(self, status: str, error: str | None = None) -> None:
        """Record how the run ended (running -> complete, failed or interrupted)."""
        with unless_output_closed():
            self.reporter.close()
        self.writer.finish(status, now(), error)

    def show_files(self) -> None:
        paths = [shlex.quote(str(self.writer.csv_path)), shlex.quote(str(self.writer.json_path))]
        with unless_output_closed():
            self.reporter.files(paths)

    def interrupted(self, signal_name: str) -> None:
        """A signal stopped the run: show what was measured of the table in progress, say so, record it
        and say where the rows are."""
        with unless_output_closed():
            self.reporter.close()
        if self.table_rows:
            with unless_output_closed():
                self.reporter.table_done(self.table_rows, [])  # no fit: the table is incomplete
        kept = plural(self.writer.row_count, "row")
        with unless_output_closed():
            self.reporter.note(f"interrupted by {signal_name}: {kept} measured and kept"
                               + launcher_status_note(self.writer.meta.launcher, signal_name))
        self.finish("interrupted", f"stopped by {signal_name}")
        self.show_files()
