"""torch's Flight Recorder dump: its fields, and readers that check each one.

Facts of the format (torch 2.11-2.14, dump versions "2.x"; FlightRecorder.hpp and its Detail header):
a dump is a dict with ``version``, ``pg_config`` (group name -> {name, desc, ranks: a list written as
text}; gloo's lists one unnamed entry that describes no group), ``pg_status`` (pg_id -> last enqueued,
started and completed sequence ids; numbers as text in the JSON form), ``comm_lib_version``, on NCCL
``nccl_comm_state``, and ``entries``, one per operation, oldest first (a ring buffer of
TORCH_FR_BUFFER_SIZE entries). An entry has ``record_id`` (per rank), ``pg_id``, ``process_group``
(name, desc), ``collective_seq_id`` (per group, the same on every member: one per collective, or per
coalesced launch), ``p2p_seq_id``, ``op_id``, ``is_p2p``, ``profiling_name`` ('gloo:all_reduce',
'nccl:send 0->1'), ``input_sizes``/``output_sizes`` (lists of shapes), ``input_dtypes``/
``output_dtypes`` (c10 names), ``state`` ('scheduled', 'started', 'completed': NCCL's events; gloo's
stay 'scheduled'), ``retired`` (the backend is done with it: NCCL retires a timed-out entry without
completing it; gloo retires an entry when its work ends, well or not), ``time_created_ns``,
``time_discovered_started_ns``/``_completed_ns`` (None, or 0 in JSON, when not seen), ``timeout_ms``,
``duration_ms`` (NCCL timing on), ``thread_id``, ``thread_name`` and ``frames`` (the Python stack,
innermost first: {name, filename, line}; absent from the JSON form). Nothing records a host or a
reduce op.
"""

import json
from typing import Any

# Entry states, as torch writes them.
SCHEDULED, STARTED, COMPLETED = "scheduled", "started", "completed"
STATES = (SCHEDULED, STARTED, COMPLETED)

# Recorded operation names (after 'backend:') -> the name commbench uses for them.
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
P2P_NAMES = ("send", "recv")

Shape = tuple[int, ...]


class EntryError(ValueError):
    """A field of an entry is missing or of the wrong type (the message names it)."""


def shapes(entry: dict, key: str) -> tuple[Shape, ...]:
    value = entry.get(key)
    if not isinstance(value, list) or not all(
            isinstance(shape, list) and all(type(part) is int and part >= 0 for part in shape)
            for shape in value):
        raise EntryError(f"{key} is not a list of shapes")
    return tuple(tuple(shape) for shape in value)


def strings(entry: dict, key: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise EntryError(f"{key} is not a list of names")
    return value


def integer(entry: dict, key: str, default: int | None = None) -> int | None:
    """An integer field; the JSON form writes some as text."""
    value = entry.get(key, default)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    raise EntryError(f"{key} is not an integer")


def group(entry: dict) -> tuple[str, str]:
    """(name, description) of the entry's process group: a tuple in pickles, a list in JSON."""
    value = entry.get("process_group")
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(part, str) for part in value):
        return value[0], value[1]
    raise EntryError("process_group is not a (name, description) pair")


def split_name(profiling_name: str) -> tuple[str, str, int | None]:
    """(backend, operation, peer): ('nccl', 'send', 1) from 'nccl:send 0->1', ('nccl', 'recv', 0) from
    'nccl:recv 1<-0' (group ranks, this rank's first); peer None for collectives."""
    backend, _, name = profiling_name.partition(":")
    head, _, meta = name.partition(" ")
    arrow = {"send": "->", "recv": "<-"}.get(head)
    if arrow and arrow in meta:
        peer = meta.split(arrow, 1)[1].strip()
        return backend, head, int(peer) if peer.isdigit() else None
    return backend, head, None


def duration_us(entry: dict) -> float | None:
    value = entry.get("duration_ms")
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value) * 1e3
    return None


def recorded_members(pg_config: Any) -> dict[str, tuple[int, ...]]:
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
        label = str(item.get("name") or name)
        # gloo's dumps (torch 2.13) hold one unnamed entry that describes no group
        if label and isinstance(ranks, list) and ranks and all(type(rank) is int for rank in ranks):
            found[label] = tuple(sorted(ranks))
    return found
