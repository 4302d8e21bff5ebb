"""A run's provenance from start to end, in the order launch calls it: NCCL's debug variables before the
backend starts, every host's hardware once the ranks know their host names, the row context once the
results' directory is known, and the verdicts' summary when the rows are in.

Invariants: every rank makes the same calls in the same order (each step that exchanges does so on
every rank); only rank 0 writes metadata or prints; nothing here raises for hardware or logs it cannot
read (the probes and the log reader record what is missing instead).
"""

from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

from commbench.backends.base import Backend
from commbench.config.launch import LaunchConfig
from commbench.provenance.baselines import load_baselines, resolve_expect
from commbench.provenance.gather import hardware_by_host
from commbench.provenance.nccl_debug import NcclLogReader, keep_beside_results, start_nccl_debug
from commbench.provenance.peaks import run_peak
from commbench.provenance.verdicts import Judging, RowContext, below_failure, judged_summary, summary_line
from commbench.results.model import Row
from commbench.running.recording import Recording


class RunProvenance:
    def __init__(self, setup: LaunchConfig, environ: MutableMapping[str, str]) -> None:
        """Before the backend starts: with --nccl-debug, NCCL's variables for this process."""
        self.judging = Judging(resolve_expect(setup.expect) if setup.expect else None, setup.fail_below)
        self.staging = start_nccl_debug(setup.output_dir, environ) if setup.nccl_debug else None
        self.hardware: dict[str, dict[str, Any]] = {}
        self.context = RowContext(judging=self.judging)

    def gather_hardware(self, backend: Backend, hostnames: list[str]) -> dict[str, dict[str, Any]]:
        self.hardware = hardware_by_host(backend, hostnames)
        return self.hardware

    def start_rows(self, backend: Backend, hostnames: list[str], members: list[list[int]],
                   recording: Recording | None) -> RowContext:
        """Once rank 0 knows where results go (``recording`` on rank 0, None elsewhere)."""
        peak = run_peak(self.hardware, hostnames, members, backend.device.type, load_baselines())
        reader = None
        if self.staging is not None:
            results_dir = None if recording is None else str(recording.writer.json_path.parent)
            kept = keep_beside_results(self.staging, Path(backend.broadcast_object(results_dir)))
            every_rank = backend.all_gather_object([str(path) for path in kept])
            if recording is not None:
                recording.writer.meta.nccl_log = {"files": [path for paths in every_rank for path in paths]}
                reader = NcclLogReader(kept)
        self.context = RowContext(peak=peak, judging=self.judging, nccl=reader)
        return self.context

    def finish(self, rows: Sequence[Row], recording: Recording | None) -> str | None:
        """Record and print the verdicts (rank 0); why --fail-below fails the run, on every rank."""
        meta = None if recording is None else recording.writer.meta
        reader = self.context.nccl
        if meta is not None and reader is not None:
            meta.nccl_log.update(version=reader.log.version, lines=reader.log.summary())
        if meta is not None and recording is not None and self.staging is not None \
                and not meta.nccl_log.get("files"):
            recording.note(f"--nccl-debug: no NCCL log was written (backend {meta.backend} does not "
                           "use NCCL)")
        if not self.judging.active:
            return None
        summary = judged_summary(rows, self.judging)
        if recording is not None:
            baseline = self.judging.baseline
            recording.writer.meta.expectations = {**summary, "fail_below": self.judging.fail_below,
                                                  "baseline_source": baseline.source if baseline else ""}
            recording.note(summary_line(summary))
        return below_failure(summary, self.judging)
