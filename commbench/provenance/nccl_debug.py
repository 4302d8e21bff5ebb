"""--nccl-debug: NCCL's INFO log into per-rank files kept beside the results, and rank 0's log read as
the run goes, so each row carries what NCCL chose for it.

The order this follows, and why: NCCL reads NCCL_DEBUG* once, at its first call, and the process group
starts NCCL eagerly, so the variables are set before the backend starts, when the run's directory is
not known yet (rank 0 names the run after the start). Each rank's log therefore starts in its own
staging directory under --output-dir and is moved beside the results once they are known; NCCL keeps
writing to the moved file (renaming an open file keeps it open).

Invariants: nothing here fails a run: a log that cannot be moved stays where it is, and its path is
recorded either way; rank 0 reads only bytes NCCL has written, after flushing C stdio buffers (NCCL
before 2.30 writes the file through a fully buffered FILE).
"""

import ctypes
import os
import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from commbench.provenance.nccl_log import DATATYPES, Choice, NcclLog

DEBUG_VARIABLES = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING,COLL,REG"}
LOG_NAME = "nccl.%h.%p.log"  # NCCL puts the host name for %h and the process id for %p
# commbench collective -> the NCCL function its torch call makes; the others go through Send/Recv.
NCCL_FUNCTIONS = {"all_reduce": "AllReduce", "reduce_scatter": "ReduceScatter",
                  "reduce_scatter_base": "ReduceScatter", "all_gather": "AllGather",
                  "all_gather_base": "AllGather", "broadcast": "Broadcast", "reduce": "Reduce"}


def start_nccl_debug(output_dir: str, environ: MutableMapping[str, str]) -> Path:
    """Set NCCL's debug variables for this process; returns its staging directory."""
    staging = Path(output_dir) / f".nccl-{uuid.uuid4().hex[:12]}"
    staging.mkdir(parents=True, exist_ok=True)
    environ.update(DEBUG_VARIABLES)
    environ["NCCL_DEBUG_FILE"] = str(staging / LOG_NAME)
    return staging


def keep_beside_results(staging: Path, results_dir: Path) -> list[Path]:
    """Move this rank's logs from ``staging`` into ``results_dir``; the paths they have now."""
    kept = []
    for path in sorted(staging.glob("*.log")):
        target = results_dir / path.name
        try:
            results_dir.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
            kept.append(target)
        except OSError:  # another filesystem (--json elsewhere): the log stays, its path recorded
            kept.append(path)
    try:
        staging.rmdir()
    except OSError:
        pass
    return kept


def _flush_c_streams() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


@dataclass
class NcclLogReader:
    """Rank 0's own NCCL log files, read as they grow."""

    paths: list[Path]
    log: NcclLog = field(default_factory=NcclLog)
    _offsets: dict[Path, int] = field(default_factory=dict)
    _partial: dict[Path, str] = field(default_factory=dict)

    def refresh(self) -> None:
        _flush_c_streams()
        for path in self.paths:
            try:
                with open(path, "rb") as handle:
                    handle.seek(self._offsets.get(path, 0))
                    data = handle.read()
            except OSError:
                continue
            self._offsets[path] = self._offsets.get(path, 0) + len(data)
            text = self._partial.pop(path, "") + data.decode(errors="replace")
            complete, _, rest = text.rpartition("\n")
            if rest:
                self._partial[path] = rest  # a line NCCL has not finished writing
            self.log.feed_text(complete)

    def choice_for(self, collective: str, dtype: str, count_per_rank: int, group_size: int) -> Choice | None:
        function = NCCL_FUNCTIONS.get(collective)
        if function is None:
            return self.log.point_to_point(group_size)
        return self.log.choice(function, count_per_rank, DATATYPES.get(dtype), group_size)
