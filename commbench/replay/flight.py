"""torch's Flight Recorder dumps (pickle or JSON) -> a Trace.

A dump is a dict: ``entries`` (one per operation: profiling_name such as 'gloo:all_reduce' or
'nccl:send 0->1', input_sizes/output_sizes, input_dtypes/output_dtypes, process_group (name, desc),
collective_seq_id, p2p_seq_id, time_created_ns, and duration_ms where NCCL timing was on), ``pg_config``
(group name -> desc and ranks; on gloo in torch 2.13 it does not list the groups) and ``version``.
Group members the dump does not give are inferred from which ranks' files hold the group's operations
(said in a note). Entries are checked field by field (commbench.recordings.flight's readers, shared with
diagnose): a malformed one is a UsageError naming the file.
"""

from collections import Counter
from pathlib import Path
from typing import Any

from commbench.errors import UsageError
from commbench.recordings import flight as fields
from commbench.replay.model import P2P_OPS, RecordedGroup, RecordedOp, Trace

_OUTPUT_SHAPED = ("reduce_scatter", "scatter", "recv")  # their per-rank tensor is the output


def parse_entry(entry: Any, rank: int, position: int, skipped: Counter) -> RecordedOp | None:
    """One entry as a RecordedOp; None (counted in ``skipped``) when commbench does not replay it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("profiling_name"), str):
        raise fields.EntryError("not an entry with a profiling_name")
    raw = entry["profiling_name"]
    _, head, peer = fields.split_name(raw)
    name = fields.OPERATION_NAMES.get(head)
    inputs, outputs = fields.shapes(entry, "input_sizes"), fields.shapes(entry, "output_sizes")
    dtypes = fields.strings(entry, "input_dtypes") or fields.strings(entry, "output_dtypes")
    group_name, _ = fields.group(entry)
    if name is None or (name in P2P_OPS and peer is None):
        skipped[raw] += 1
        return None
    primary = outputs if name in _OUTPUT_SHAPED else inputs
    if name in P2P_OPS:
        primary = inputs or outputs
    if name != "barrier" and len(primary) != 1:
        skipped[f"{raw} with {len(primary)} tensors"] += 1
        return None
    dtype = fields.DTYPE_NAMES.get(dtypes[0]) if dtypes else ""
    if dtype is None:
        skipped[f"{raw} of dtype {dtypes[0]}"] += 1
        return None
    seq_key = "p2p_seq_id" if name in P2P_OPS else "collective_seq_id"
    return RecordedOp(rank=rank, name=name, raw=raw, group=group_name,
                      shape=() if name == "barrier" else primary[0], dtype=dtype,
                      input_sizes=inputs, output_sizes=outputs,
                      seq=fields.integer(entry, seq_key, position) or 0,
                      created_ns=fields.integer(entry, "time_created_ns"),
                      duration_us=fields.duration_us(entry), peer=peer)


def _parse_dump(path: Path, payload: dict, rank: int, skipped: Counter, descs: dict[str, str]
                ) -> list[RecordedOp]:
    """One rank's operations; ``descs`` gathers each group's description."""
    entries = payload.get("entries")
    if not isinstance(entries, list):
        raise UsageError(f"{path}: 'entries' is not a list: not a Flight Recorder dump")
    ops = []
    for position, entry in enumerate(entries):
        try:
            op = parse_entry(entry, rank, position + 1, skipped)
            name, desc = fields.group(entry)
        except fields.EntryError as exc:
            raise UsageError(f"{path}: entry {position}: {exc}: a corrupt Flight Recorder dump") from None
        descs.setdefault(name, desc)
        if op is not None:
            ops.append(op)
    return ops


def parse_dumps(payloads: dict[int, tuple[Path, dict]], source: str, kind: str) -> Trace:
    """The dumps of one job, by rank."""
    skipped: Counter = Counter()
    descs: dict[str, str] = {}
    ops = {rank: _parse_dump(path, payload, rank, skipped, descs)
           for rank, (path, payload) in payloads.items()}
    recorded: dict[str, tuple[int, ...]] = {}
    for _, payload in payloads.values():
        recorded.update(fields.recorded_members(payload.get("pg_config")))
    holders: dict[str, set[int]] = {}
    for rank, rank_ops in ops.items():
        for op in rank_ops:
            holders.setdefault(op.group, set()).add(rank)
    inferred = sorted(name for name in holders if name not in recorded)
    groups = {name: RecordedGroup(name, descs.get(name, ""), recorded.get(name) or tuple(sorted(members)))
              for name, members in holders.items()}
    world = max([*payloads, *(rank for ranks in recorded.values() for rank in ranks)]) + 1
    trace = Trace(source, kind, world, ops, groups, skipped)
    if inferred:
        labels = ", ".join(groups[name].label for name in inferred)
        trace.notes.append(f"the dumps do not list group members: inferred from which ranks' files hold "
                           f"each group's operations ({labels})")
    return trace

