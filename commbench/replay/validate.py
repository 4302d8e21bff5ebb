"""Cross-rank checks, as torch's fr_trace analyzer makes them, before anything is replayed.

Invariants of a trace that passes: every rank 0..world-1 has a file; no group's operations imply more
ranks than it has; on every group, the members hold the same operations (same name, sizes and dtype) at
the same sequence ids, an operation recorded by only some members (the ring buffer's start, a step in
flight at the dump, a --select cut) having been dropped and counted in a note; every send has its receive,
in order, with the same shape and dtype; gather and scatter know their root where the sizes tell it.
Any other disagreement is a UsageError naming the group, the position and the differing entries.
"""

from dataclasses import replace

from commbench.core.words import plural
from commbench.errors import UsageError
from commbench.replay.model import P2P_OPS, RecordedOp, Trace, describe_shapes, total_numel

# Where the analyzer lets members' sizes differ: all_to_all's splits, gather's and scatter's root side.
_INPUTS_MAY_DIFFER = ("all_to_all", "scatter")
_OUTPUTS_MAY_DIFFER = ("all_to_all", "gather")


def validate(trace: Trace) -> Trace:
    _check_ranks(trace)
    _check_some_communication(trace)
    _check_group_sizes(trace)
    trace = _align_groups(trace)
    _check_point_to_point(trace)
    if not trace.op_count():
        raise UsageError(f"{trace.source}: no operation is recorded by every member of its group: nothing "
                         "to replay")
    return trace


def _check_ranks(trace: Trace) -> None:
    missing = [rank for rank in range(trace.world_size) if rank not in trace.ops]
    if missing:
        listed = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise UsageError(f"{trace.source}: no file for rank {listed} of a {trace.world_size}-rank job: "
                         "every rank's file is needed")


def _check_some_communication(trace: Trace) -> None:
    if trace.op_count():
        return
    if trace.skipped:
        names = ", ".join(f"{name} x{count}" for name, count in trace.skipped.most_common(5))
        raise UsageError(f"{trace.source}: no operation commbench replays (recorded: {names})")
    raise UsageError(f"{trace.source}: no communication recorded (no collective or point-to-point "
                     "operation in any rank's file)")


def implied_group_size(op: RecordedOp) -> int | None:
    """How many ranks an operation's sizes say its group has, where they say it."""
    inputs, outputs = total_numel(op.input_sizes), total_numel(op.output_sizes)
    if op.name in ("all_gather", "gather") and inputs and outputs:
        return outputs // inputs
    if op.name in ("reduce_scatter", "scatter") and inputs and outputs:
        return inputs // outputs
    return None


def _check_group_sizes(trace: Trace) -> None:
    for ops in trace.ops.values():
        for op in ops:
            size = implied_group_size(op)
            group = trace.group_of(op)
            if size is not None and size > len(group.ranks):
                members = ", ".join(map(str, group.ranks))
                raise UsageError(f"group {group.label}: rank {op.rank}'s {op.name} of "
                                 f"{describe_shapes(op.input_sizes)} -> {describe_shapes(op.output_sizes)} "
                                 f"implies {size} ranks, but only ranks {members} recorded it: a rank's file "
                                 "is missing")


def _collectives_by_group(trace: Trace) -> dict[str, dict[int, dict[int, RecordedOp]]]:
    """Group -> member rank -> seq -> its collective on that group, in one pass over every operation
    (a pass per group would be quadratic in a large job's ranks: it has groups in proportion to them)."""
    found: dict[str, dict[int, dict[int, RecordedOp]]] = {
        name: {rank: {} for rank in group.ranks} for name, group in trace.groups.items()}
    for rank, ops in trace.ops.items():
        for op in ops:
            members = found.get(op.group)
            if op.name not in P2P_OPS and members is not None and rank in members:
                members[rank][op.seq] = op
    return found


def _sizes_agree(first: RecordedOp, other: RecordedOp) -> bool:
    if first.name != other.name:
        return False
    if first.name not in _INPUTS_MAY_DIFFER and first.input_sizes != other.input_sizes:
        return False
    if first.name not in _OUTPUTS_MAY_DIFFER and first.output_sizes != other.output_sizes:
        return False
    return not (first.dtype and other.dtype and first.dtype != other.dtype)


def _entry(op: RecordedOp) -> str:
    return (f"rank {op.rank}: {op.raw} {describe_shapes(op.input_sizes)} -> "
            f"{describe_shapes(op.output_sizes)} {op.dtype or '?'}")


def _different_jobs_hint(trace: Trace, ranks: list[int]) -> str:
    spans = []
    for rank in ranks:
        times = [op.created_ns for op in trace.ops[rank] if op.created_ns is not None]
        if times:
            spans.append((min(times), max(times), rank))
    spans.sort()
    for (_, end, rank), (start, _, later) in zip(spans, spans[1:], strict=False):
        if start > end:
            return (f" (rank {rank}'s recording ends before rank {later}'s starts: dumps of two different "
                    "jobs?)")
    return ""


def _root_from_sizes(ops: list[RecordedOp]) -> int | None:
    """The group rank whose gather output (scatter input) is not empty, when only one's is."""
    sides = [op.output_sizes if op.name == "gather" else op.input_sizes for op in ops]
    holding = [index for index, side in enumerate(sides) if total_numel(side)]
    return holding[0] if len(holding) == 1 else None


def _check_position(trace: Trace, label: str, position: int, seq: int, ops: list[RecordedOp]) -> None:
    first = ops[0]
    for other in ops[1:]:
        if not _sizes_agree(first, other):
            hint = _different_jobs_hint(trace, [first.rank, other.rank])
            raise UsageError(f"group {label}, operation {position} (seq {seq}): the members differ: "
                             f"{_entry(first)}; {_entry(other)}{hint}")


def _align_groups(trace: Trace) -> Trace:
    dropped: dict[str, int] = {}
    kept_keys: set[tuple[int, str, int]] = set()
    roots: dict[tuple[str, int], int] = {}
    by_group = _collectives_by_group(trace)
    for name, group in trace.groups.items():
        by_member = by_group[name]
        seqs = [set(ops) for ops in by_member.values()]
        if not any(seqs):
            continue
        common = set.intersection(*seqs)
        dropped[group.label] = len(set.union(*seqs) - common)
        for position, seq in enumerate(sorted(common), start=1):
            ops = [by_member[rank][seq] for rank in group.ranks]
            _check_position(trace, group.label, position, seq, ops)
            if ops[0].name in ("gather", "scatter") and ops[0].root is None:
                root = _root_from_sizes(ops)
                if root is not None:
                    roots[(name, seq)] = root
        kept_keys.update((rank, name, seq) for rank in group.ranks for seq in common)
    kept = {rank: [_with_root(op, roots) for op in ops
                   if op.name in P2P_OPS or (rank, op.group, op.seq) in kept_keys]
            for rank, ops in trace.ops.items()}
    aligned = trace.with_ops(kept)
    lost = {label: count for label, count in dropped.items() if count}
    if lost:
        listed = ", ".join(f"{count} in {label}" for label, count in lost.items())
        aligned.notes.append(f"dropped operations recorded by only some members of their group ({listed}): "
                             "the ring buffer's start, a step in flight at the dump, or the --select cut")
    return aligned


def _with_root(op: RecordedOp, roots: dict[tuple[str, int], int]) -> RecordedOp:
    """The operation with the root its sizes told, copied only where that changes it (a copy of every
    operation of a large job took most of the validation's time)."""
    root = roots.get((op.group, op.seq), op.root)
    return op if root == op.root else replace(op, root=root)


def _check_point_to_point(trace: Trace) -> None:
    sends: dict[tuple[int, int], list[RecordedOp]] = {}
    receives: dict[tuple[int, int], list[RecordedOp]] = {}
    for rank, ops in trace.ops.items():
        for op in ops:
            if op.name not in P2P_OPS:
                continue
            peer = trace.peer_global(op)
            if op.name == "send":
                sends.setdefault((rank, peer), []).append(op)
            else:
                receives.setdefault((peer, rank), []).append(op)
    for pair in sorted(set(sends) | set(receives)):
        sent, received = sends.get(pair, []), receives.get(pair, [])
        source, destination = pair
        if len(sent) != len(received):
            raise UsageError(f"point-to-point {source} -> {destination}: rank {source} sends "
                             f"{plural(len(sent), 'message')}, rank {destination} receives {len(received)}")
        for index, (send, receive) in enumerate(zip(sent, received, strict=True), start=1):
            if send.shape != receive.shape or (send.dtype and receive.dtype and send.dtype != receive.dtype):
                raise UsageError(f"point-to-point {source} -> {destination}, message {index}: rank {source} "
                                 f"sends {send.describe()}, rank {destination} receives {receive.describe()}")
