"""Proof of path: what the kernel names of one op (--profile-kernels) say about the path an
implementation ran. Pure: the names come from torch's profiler on the ranks (backends/profiling.py).

A verdict is a status and a note: 'verified' (a kernel that proves the path ran), 'fallback' (a kernel
of another path ran, or none of its own), or 'ran' (nothing to judge by). NCCL's log (--nccl-debug)
adds its own judgement in commbench.provenance.
"""

import re

from commbench.measure.impls.base import Evidence

SHOWN = 3  # kernel names a note quotes


def short_name(name: str) -> str:
    """A kernel's name without its argument list: 'ncclDevKernel_AllReduce_Sum_f32_RING_LL'."""
    return name.split("(", 1)[0].strip()


def judge_kernels(evidence: Evidence, names: list[str], group_size: int) -> tuple[str, str]:
    """(status, note) for the kernel names of one op; ('', '') when there are none to judge."""
    if not names:
        return "", ""
    shown = ", ".join(short_name(name) for name in names[:SHOWN]) + (" ..." if len(names) > SHOWN else "")
    if not evidence.judged_alone and group_size == 1:
        return "ran", f"one rank: NCCL copies locally whatever the path, not judged ({shown})"
    found = [short_name(name) for name in names if evidence.fallback and re.search(evidence.fallback, name)]
    if found:
        return "fallback", f"ran {found[0]}, not {evidence.proof_text or 'its own path'}"
    proven = [short_name(name) for name in names if evidence.proof and re.search(evidence.proof, name)]
    if proven:
        return "verified", f"ran {proven[0]}"
    if evidence.proof:
        return "fallback", f"no {evidence.proof_text} among {shown}"
    return "ran", ""
