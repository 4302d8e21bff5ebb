"""torch.profiler chrome traces (one per rank) -> a Trace.

What a trace carries (torch 2.13): ``distributedInfo`` (backend, rank, world_size, and pg_config: a list
of {pg_name, pg_desc, pg_size, ranks}); ``c10d::`` cpu_op events on the calling thread, in call order,
whose ``Input Dims``/``Input type``/``Concrete Inputs`` give each argument's shape, dtype and scalar
value (a root or peer rank), but neither the process group nor a dtype for tensor lists; the backend's
own events ('gloo:all_reduce', on gloo's worker threads or, for send/recv, the calling thread) with the
tensor's dtype and how long the backend worked on it; and, on NCCL, ``record_param_comms`` events with
the collective, element counts, dtype and the process group.

When record_param_comms events exist they are the source; otherwise the c10d:: events are, each matched
to the first unused backend event that starts after it with the same tensor shape (for the dtype of a
tensor list and the duration), and each assumed to run on the world group (said in a note).
"""

import bisect
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from commbench.core.words import plural
from commbench.errors import UsageError
from commbench.recordings.flight import DTYPE_NAMES, OPERATION_NAMES
from commbench.replay.model import P2P_OPS, RecordedGroup, RecordedOp, Shape, Trace

# The profiler's type names (c10's C++ names) -> commbench's dtype names.
PROFILER_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8",
    "unsigned char": "uint8", "bool": "bool", "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
}


@dataclass(frozen=True)
class C10dOp:
    """Where a c10d:: operator keeps what the replay needs: the argument holding the per-rank tensor
    (a list of tensors when ``listed``), and the arguments holding the root or the peer (group ranks)."""

    name: str
    tensor_arg: int
    listed: bool
    root_arg: int | None = None
    peer_arg: int | None = None
    splits_args: tuple[int, ...] = ()


C10D_OPS = {
    "c10d::allreduce_": C10dOp("all_reduce", 0, True),
    "c10d::_allgather_base_": C10dOp("all_gather", 1, False),
    "c10d::allgather_": C10dOp("all_gather", 1, True),
    "c10d::_reduce_scatter_base_": C10dOp("reduce_scatter", 0, False),
    "c10d::reduce_scatter_": C10dOp("reduce_scatter", 0, True),
    "c10d::alltoall_base_": C10dOp("all_to_all", 1, False, splits_args=(3, 4)),
    "c10d::broadcast_": C10dOp("broadcast", 0, True, root_arg=2),
    "c10d::reduce_": C10dOp("reduce", 0, True, root_arg=3),
    "c10d::gather_": C10dOp("gather", 1, True, root_arg=3),
    "c10d::scatter_": C10dOp("scatter", 0, True, root_arg=3),
    "c10d::barrier": C10dOp("barrier", 0, False),
    "c10d::send": C10dOp("send", 0, True, peer_arg=2),
    "c10d::recv_": C10dOp("recv", 0, True, peer_arg=2),
}
WORLD_GROUP = "0"  # torch names the default group '0'


def recorded_rank(payload: dict) -> int | None:
    info = payload.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _events(path: Path, payload: dict) -> list[dict]:
    events = payload.get("traceEvents")
    if not isinstance(events, list):
        raise UsageError(f"{path}: 'traceEvents' is not a list: a corrupt profiler trace")
    found = []
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X" and isinstance(event.get("name"), str) \
                and isinstance(event.get("ts"), int | float):
            found.append(event)
    return sorted(found, key=lambda event: event["ts"])


def _args(event: dict) -> dict:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _argument(event: dict, key: str, index: int) -> Any:
    values = _args(event).get(key)
    return values[index] if isinstance(values, list) and index < len(values) else None


def _as_shape(value: Any) -> Shape | None:
    if isinstance(value, list) and all(isinstance(part, int) and part >= 0 for part in value):
        return tuple(value)
    return None


def _as_int(value: Any) -> int | None:
    text = str(value).strip()
    return int(text) if text.lstrip("-").isdigit() else None


class BackendEvents:
    """The backend's own events ('gloo:all_reduce', ...) of a rank, by start time, each matched at most
    once, to an operation that started before it and within LOOKAHEAD of its successors."""

    LOOKAHEAD = 64  # backend events looked at per operation (the backend runs operations in order)

    def __init__(self, events: list[dict]) -> None:
        self.events = [event for event in events if event.get("cat") == "user_annotation"
                       and event["name"].partition(":")[0] in ("gloo", "nccl")]
        self.starts = [event["ts"] for event in self.events]
        self.used = [False] * len(self.events)

    def match(self, start: float, shape: Shape) -> dict | None:
        first = bisect.bisect_left(self.starts, start)
        for index in range(first, min(first + self.LOOKAHEAD, len(self.events))):
            if not self.used[index] and _as_shape(_argument(self.events[index], "Input Dims", 0)) == shape:
                self.used[index] = True
                return self.events[index]
        return None


def _top_level(events: list[dict]) -> list[dict]:
    """The c10d:: events not nested inside another c10d:: event of the same thread."""
    ends: dict[Any, float] = {}
    kept = []
    for event in events:
        if not event["name"].startswith("c10d::"):
            continue
        thread = (event.get("pid"), event.get("tid"))
        if event["ts"] < ends.get(thread, float("-inf")):
            continue
        ends[thread] = event["ts"] + float(event.get("dur") or 0)
        kept.append(event)
    return kept


def _c10d_op(event: dict, rank: int, backend_events: BackendEvents, skipped: Counter) -> RecordedOp | None:
    spec = C10D_OPS.get(event["name"])
    if spec is None:
        skipped[event["name"]] += 1
        return None
    if any(str(_argument(event, "Concrete Inputs", index)).strip() not in ("", "[]")
           for index in spec.splits_args):
        skipped[f"{event['name']} with uneven splits"] += 1
        return None
    dims = _argument(event, "Input Dims", spec.tensor_arg)
    if spec.name == "barrier":
        shape: Shape | None = ()
    else:
        shape = _as_shape(dims[0] if spec.listed and isinstance(dims, list) and len(dims) == 1 else
                          None if spec.listed else dims)
    if shape is None:
        skipped[f"{event['name']} without one tensor shape"] += 1
        return None
    matched = backend_events.match(event["ts"], shape) if spec.name != "barrier" else None
    dtype = "" if spec.name == "barrier" else \
        PROFILER_DTYPES.get(str(_argument(event, "Input type", spec.tensor_arg)), "")
    if not dtype and matched is not None:
        dtype = PROFILER_DTYPES.get(str(_argument(matched, "Input type", 0)), "")
    root = _as_int(_argument(event, "Concrete Inputs", spec.root_arg)) if spec.root_arg else None
    peer = _as_int(_argument(event, "Concrete Inputs", spec.peer_arg)) if spec.peer_arg else None
    if spec.name in P2P_OPS and peer is None:
        skipped[f"{event['name']} without a peer"] += 1
        return None
    duration = float(matched["dur"]) if matched is not None and isinstance(matched.get("dur"), int | float) \
        else None
    sizes = (shape,) if spec.name != "barrier" else ()
    return RecordedOp(rank=rank, name=spec.name, raw=event["name"], group=WORLD_GROUP, shape=shape,
                      dtype=dtype, input_sizes=sizes, output_sizes=sizes,
                      created_ns=int(event["ts"] * 1e3), duration_us=duration, root=root, peer=peer)


def _param_comms_op(event: dict, rank: int, skipped: Counter) -> RecordedOp | None:
    """An NCCL record_param_comms event (collective, element counts, dtype, group)."""
    args = _args(event)
    raw = str(args.get("Collective name", ""))
    name = OPERATION_NAMES.get(raw.lstrip("_")) or OPERATION_NAMES.get(raw)
    count_in, count_out = _as_int(args.get("In msg nelems")), _as_int(args.get("Out msg nelems"))
    dtype = PROFILER_DTYPES.get(str(args.get("dtype")), DTYPE_NAMES.get(str(args.get("dtype")), ""))
    if name is None or name in P2P_OPS or count_in is None or count_out is None or not dtype:
        skipped[f"record_param_comms {raw or '?'}"] += 1
        return None
    per_rank = count_out if name in ("reduce_scatter", "scatter") else count_in
    return RecordedOp(rank=rank, name=name, raw=f"record_param_comms {raw}",
                      group=str(args.get("Process Group Name", WORLD_GROUP)),
                      shape=() if name == "barrier" else (per_rank,), dtype=dtype,
                      input_sizes=((count_in,),), output_sizes=((count_out,),),
                      created_ns=int(event["ts"] * 1e3))


def _groups(payloads: dict[int, tuple[Path, dict]], world_size: int) -> dict[str, RecordedGroup]:
    groups: dict[str, RecordedGroup] = {}
    for _, payload in payloads.values():
        info = payload.get("distributedInfo")
        for item in (info.get("pg_config") if isinstance(info, dict) else None) or []:
            if not isinstance(item, dict):
                continue
            ranks = item.get("ranks")
            if isinstance(ranks, list) and ranks and all(isinstance(r, int) for r in ranks):
                name = str(item.get("pg_name", ""))
                groups[name] = RecordedGroup(name, str(item.get("pg_desc", "")), tuple(sorted(ranks)))
    groups.setdefault(WORLD_GROUP, RecordedGroup(WORLD_GROUP, "default_pg", tuple(range(world_size))))
    return groups


def _world_size(payloads: dict[int, tuple[Path, dict]]) -> int:
    sizes = set()
    for path, payload in payloads.values():
        info = payload.get("distributedInfo")
        size = info.get("world_size") if isinstance(info, dict) else None
        if not isinstance(size, int) or size < 1:
            raise UsageError(f"{path}: a profiler trace without distributedInfo.world_size: was the "
                             "process group initialised before profiling?")
        sizes.add(size)
    if len(sizes) > 1:
        raise UsageError(f"the traces disagree on the world size ({', '.join(map(str, sorted(sizes)))}): "
                         "traces of two jobs mixed? Give one job's traces")
    return sizes.pop()


def _number_positions(ops: list[RecordedOp]) -> list[RecordedOp]:
    """Sequence numbers per group, in the rank's order (the format has none of its own)."""
    counters: Counter = Counter()
    numbered = []
    for op in ops:
        key = (op.group, op.name in P2P_OPS)
        counters[key] += 1
        numbered.append(replace(op, seq=counters[key]))
    return numbered


def parse_traces(payloads: dict[int, tuple[Path, dict]], source: str) -> Trace:
    """One job's profiler traces, by rank."""
    world_size = _world_size(payloads)
    skipped: Counter = Counter()
    ops: dict[int, list[RecordedOp]] = {}
    uses_param_comms = False
    for rank, (path, payload) in payloads.items():
        events = _events(path, payload)
        comms = [event for event in events if event["name"] == "record_param_comms"]
        if comms:
            uses_param_comms = True
            found = [_param_comms_op(event, rank, skipped) for event in comms]
        else:
            backend_events = BackendEvents(events)
            found = [_c10d_op(event, rank, backend_events, skipped)
                     for event in _top_level(events)]
        ops[rank] = _number_positions([op for op in found if op is not None])
    trace = Trace(source, "profiler", world_size, ops, _groups(payloads, world_size), skipped)
    if not uses_param_comms and trace.op_count():
        trace.notes.append("the profiler's c10d:: events do not say which group an operation ran on: "
                           "every operation is assumed to run on the world group (0:default_pg)")
    untyped = sum(1 for rank_ops in ops.values() for op in rank_ops if not op.dtype and op.name != "barrier")
    if untyped:
        trace.notes.append(f"{plural(untyped, 'operation')} without a recorded dtype (no backend event "
                           "matched): assumed float32")
        trace.ops = {rank: [op if op.dtype or op.name == "barrier" else _typed(op) for op in rank_ops]
                     for rank, rank_ops in ops.items()}
    return trace


def _typed(op: RecordedOp) -> RecordedOp:
    return replace(op, dtype="float32")
