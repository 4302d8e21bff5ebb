"""Proof of path from NCCL's log (--nccl-debug): whether an implementation's row ran where it meant to,
judged from NCCL's registration lines (REG) and its choice of a symmetric kernel or the copy engines
(TUNING), beside what the row's kernel names said (measure/impls/evidence.py).

Invariants: never raises; a fallback the log shows overrides a verdict from elsewhere, a proof upgrades
'ran' to 'verified'; what the log does not say changes nothing (NCCL before 2.27 logs no symmetric
choice, before 2.29 no copy-engine one).
"""

from typing import Any

from commbench.measure.impls import REGISTRY
from commbench.provenance.nccl_debug import NCCL_FUNCTIONS, NcclLogReader
from commbench.provenance.nccl_log import DATATYPES, TYPE_BYTES
from commbench.results.model import Row


def _verdict(row: Row, reader: NcclLogReader) -> tuple[str, str] | None:
    evidence = REGISTRY[row.impl].evidence if row.impl in REGISTRY else None
    if evidence is None or (not evidence.judged_alone and row.group_size == 1):
        return None  # at one rank NCCL launches nothing of either path: nothing to judge by
    expectation = evidence.nccl_log
    log = reader.log
    if expectation == "registration":
        if log.refused and not log.registered:
            return "fallback", f"NCCL refused registration: {log.refused[0]}"
        if log.registered:
            return "verified", f"NCCL registered {log.registered} buffers so far in this run"
        return None
    if expectation not in ("symmetric", "copy-engine"):
        return None
    function = NCCL_FUNCTIONS.get(row.collective, "")
    element = TYPE_BYTES.get(DATATYPES.get(row.dtype, -1), 0)
    sizes = (row.count_per_rank * element, row.count_per_rank * element * row.group_size)
    paths = [path for path in log.path_for(function, sizes) if path.startswith(expectation)]
    if paths:
        return "verified", f"NCCL chose {paths[0]}"
    if row.nccl_algo:  # a regular choice logged for this call, and no special one
        return "fallback", f"NCCL chose {row.nccl_algo}/{row.nccl_proto}, not {expectation.replace('-', ' ')}"
    return None


def path_columns(row: Row, reader: NcclLogReader) -> dict[str, Any]:
    """The row's impl_status and impl_note as NCCL's log amends them ({} when it says nothing)."""
    if row.error or row.impl_status == "unavailable":  # (the reference expects nothing of the log)
        return {}
    found = _verdict(row, reader)
    if found is None:
        return {}
    status, note = found
    if row.impl_status == "fallback" and status == "verified":
        status = "fallback"  # a fallback seen elsewhere stands
    notes = "; ".join(part for part in (row.impl_note, note) if part)
    return {"impl_status": status, "impl_note": notes}
