"""A run's provenance from start to end, in the order launch calls it: NCCL's debug variables before the
backend starts, every host's hardware once the ranks know their host names, the row context once the
results' directory is known, and the verdicts' summary when the rows are in.

Invariants: every rank makes the same calls in the same order (each step that exchanges does so on
every rank); only rank 0 writes metadata or prints; nothing here raises for hardware or logs it cannot
read (the probes and the log reader record what is missing instead).
"""

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.backends.base import Backend
from commbench.provenance.baselines import load_baselines, resolve_expect
from commbench.provenance.gather import hardware_by_host
from commbench.provenance.nccl_debug import NcclLogReader, keep_beside_results, start_nccl_debug
from commbench.provenance.peaks import run_peak
from commbench.provenance.verdicts import Judging, RowContext, below_failure, judged_summary, summary_line
from commbench.results import Row, RunMeta


@dataclass(frozen=True)
class ProvenanceOptions:
    """--nccl-debug, --expect and --fail-below (run-wide settings)."""

    nccl_debug: bool = False
    expect: str | None = None
    fail_below: float | None = None

    @classmethod
    def of(cls, config: Any) -> "ProvenanceOptions":
        """A sweep's RunConfig carries them; pattern configs do not (their runs get hardware only)."""
        from commbench.config import RunConfig

        if isinstance(config, RunConfig):
            return cls(config.nccl_debug, config.expect, config.fail_below)
        return cls()


class RunProvenance:
    def __init__(self, options: ProvenanceOptions, output_dir: str,
                 environ: MutableMapping[str, str]) -> None:
        """Before the backend starts: with --nccl-debug, NCCL's variables for this process."""
        self.options = options
        self.judging = Judging(resolve_expect(options.expect) if options.expect else None, options.fail_below)
        self.staging = start_nccl_debug(output_dir, environ) if options.nccl_debug else None
        self.hardware: dict[str, dict[str, Any]] = {}
        self.context = RowContext(judging=self.judging)

    def gather_hardware(self, backend: Backend, hostnames: list[str]) -> dict[str, dict[str, Any]]:
        self.hardware = hardware_by_host(backend, hostnames)
        return self.hardware

    def start_rows(self, backend: Backend, hostnames: list[str], members: list[list[int]],
                   meta: RunMeta | None, results_dir: Path | None) -> RowContext:
        """Once rank 0 knows where results go (``results_dir`` on rank 0, None elsewhere)."""
        peak = run_peak(self.hardware, hostnames, members, backend.device.type, load_baselines())
        reader = None
        if self.staging is not None:
            where = backend.broadcast_object(None if results_dir is None else str(results_dir))
            kept = keep_beside_results(self.staging, Path(where))
            every_rank = backend.all_gather_object([str(path) for path in kept])
            if meta is not None:
                meta.nccl_log = {"files": [path for paths in every_rank for path in paths]}
                reader = NcclLogReader(kept)
        self.context = RowContext(peak=peak, judging=self.judging, nccl=reader)
        return self.context

    def finish(self, rows: list[Row], meta: RunMeta | None, note: Callable[[str], None] | None) -> str | None:
        """Record and print the verdicts (rank 0); why --fail-below fails the run, on every rank."""
        reader = self.context.nccl
        if meta is not None and reader is not None:
            meta.nccl_log.update(version=reader.log.version, lines=reader.log.summary())
        if meta is not None and self.staging is not None and not meta.nccl_log.get("files") and note:
            note(f"--nccl-debug: no NCCL log was written (backend {meta.backend} does not use NCCL)")
        if not self.judging.active:
            return None
        summary = judged_summary(rows, self.judging)
        if meta is not None:
            baseline = self.judging.baseline
            meta.expectations = {**summary, "fail_below": self.judging.fail_below,
                                 "baseline_source": baseline.source if baseline else ""}
            if note is not None:
                note(summary_line(summary))
        return below_failure(summary, self.judging)
