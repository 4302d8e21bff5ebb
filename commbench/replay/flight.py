"""torch's Flight Recorder dumps (pickle or JSON) -> a Trace.

A dump is a dict: ``entries`` (one per operation: profiling_name such as 'gloo:all_reduce' or
'nccl:send 0->1', input_sizes/output_sizes, input_dtypes/output_dtypes, process_group (name, desc),
collective_seq_id, p2p_seq_id, time_created_ns, and duration_ms where NCCL timing was on), ``pg_config``
(group name -> desc and ranks; on gloo in torch 2.13 it does not list the groups) and ``version``.
Group members the dump does not give are inferred from which ranks' files hold the group's operations
(said in a note). Entries are checked field by field: a malformed one is a UsageError naming the file.
"""

import json
from collections import Counter
from pathlib import Path
from typing import Any

from commbench.core.untrusted import INT64, MAX_RECORDED_RANKS, finite_number, shown, whole_number
from commbench.errors import UsageError
from commbench.replay.model import P2P_OPS, RecordedGroup, RecordedOp, Shape, Trace

# Recorded operation names (after 'backend:') -> the name commbench replays them as.
OPERATION_NAMES = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "all_gather": "all_gather", "_all_gather_base": "all_gather", "all_gather_base": "all_gather",
    "all_gather_into_tensor": "all_gather", "all_gather_single": "all_gather", "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all", "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "barrier": "barrier", "all_reduce_barrier": "barrier", "send": "send", "recv": "recv",
}
# Flight Recorder's dtype names (c10's ScalarType names) -> commbench's.
DTYPE_NAMES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
    "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
    "Float8_e4m3fn": "float8_e4m3fn", "Float8_e5m2": "float8_e5m2",
}
_OUTPUT_SHAPED = ("reduce_scatter", "scatter", "recv")  # their per-rank tensor is the output


class EntryError(ValueError):
    pass


def _shapes(entry: dict, key: str) -> tuple[Shape, ...]:
    value = entry.get(key)
    if not isinstance(value, list) or not all(
            isinstance(shape, list) and all(type(part) is int and 0 <= part < INT64 for part in shape)
            for shape in value):
        raise EntryError(f"{key} is not a list of shapes (whole numbers from 0 to 2^63 - 1)")
    return tuple(tuple(shape) for shape in value)


def _strings(entry: dict, key: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise EntryError(f"{key} is not a list of names")
    return value


def _integer(entry: dict, key: str, default: int | None = None) -> int | None:
    value = entry.get(key, default)
    number = whole_number(value)  # the JSON dump writes some as text
    if value is None or number is not None:
        return number
    raise EntryError(f"{key} is {shown(value)}, not a whole number below 2^63")


def _group(entry: dict) -> tuple[str, str]:
    value = entry.get("process_group")
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(part, str) for part in value):
        return value[0], value[1]
    raise EntryError("process_group is not a (name, description) pair")


def _split_name(profiling_name: str) -> tuple[str, int | None]:
    """(operation, peer): ('send', 1) from 'nccl:send 0->1', ('recv', 0) from 'nccl:recv 1<-0' (group
    ranks, this rank's first); (name, None) for collectives."""
    _, _, name = profiling_name.partition(":")
    head, _, meta = name.partition(" ")
    arrow = {"send": "->", "recv": "<-"}.get(head)
    if arrow and arrow in meta:
        return head, whole_number(meta.split(arrow, 1)[1], 0, MAX_RECORDED_RANKS)
    return head, None


def _duration_us(entry: dict) -> float | None:
    value = finite_number(entry.get("duration_ms"))
    return value * 1e3 if value is not None and value >= 0 else None


def parse_entry(entry: Any, rank: int, position: int, skipped: Counter) -> RecordedOp | None:
    """One entry as a RecordedOp; None (counted in ``skipped``) when commbench does not replay it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("profiling_name"), str):
        raise EntryError("not an entry with a profiling_name")
    raw = entry["profiling_name"]
    head, peer = _split_name(raw)
    name = OPERATION_NAMES.get(head)
    inputs, outputs = _shapes(entry, "input_sizes"), _shapes(entry, "output_sizes")
    dtypes = _strings(entry, "input_dtypes") or _strings(entry, "output_dtypes")
    group, _ = _group(entry)
    if name is None or (name in P2P_OPS and peer is None):
        skipped[raw] += 1
        return None
    primary = outputs if name in _OUTPUT_SHAPED else inputs
    if name in P2P_OPS:
        primary = inputs or outputs
    if name != "barrier" and len(primary) != 1:
        skipped[f"{raw} with {len(primary)} tensors"] += 1
        return None
    dtype = DTYPE_NAMES.get(dtypes[0]) if dtypes else ""
    if dtype is None:
        skipped[f"{raw} of dtype {dtypes[0]}"] += 1
        return None
    seq_key = "p2p_seq_id" if name in P2P_OPS else "collective_seq_id"
    return RecordedOp(rank=rank, name=name, raw=raw, group=group,
                      shape=() if name == "barrier" else primary[0], dtype=dtype,
                      input_sizes=inputs, output_sizes=outputs, seq=_integer(entry, seq_key, position) or 0,
                      created_ns=_integer(entry, "time_created_ns"), duration_us=_duration_us(entry),
                      peer=peer)


def _recorded_members(pg_config: Any) -> dict[str, tuple[int, ...]]:
    """Group name -> ranks, for the groups a dump's pg_config lists with members."""
    found: dict[str, tuple[int, ...]] = {}
    if not isinstance(pg_config, dict):
        return found
    for name, item in pg_config.items():
        if not isinstance(item, dict) or not isinstance(item.get("ranks"), str):
            continue
        try:
            ranks = json.loads(item["ranks"])  # a list written as text: '[0, 1]'
        except (ValueError, RecursionError):
            continue
        group = item.get("name") or name
        # gloo's dumps (torch 2.13) hold one unnamed entry that describes no group
        if group and isinstance(group, str) and isinstance(ranks, list) and ranks and all(
                type(rank) is int and 0 <= rank < MAX_RECORDED_RANKS for rank in ranks):
            found[group] = tuple(sorted(ranks))
    return found


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
            name, desc = _group(entry)
        except EntryError as exc:
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
        recorded.update(_recorded_members(payload.get("pg_config")))
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

