"""--select: a window of a long recording, cut at the same point on every rank.

``all`` keeps everything. ``seq:A-B`` keeps, on every rank, the operations from the world group's
sequence id A to B inclusive and whatever the rank issued on other groups in between. ``last:N`` keeps
each rank's last N steps, a step being the repeating block at the end of the rank's recording that covers
the most operations (a block counts once it repeats at least twice; ties go to the shorter block).
Validation afterwards drops any operation that the window left on only some members of its group.
"""

from dataclasses import dataclass

from commbench.core.untrusted import whole_number
from commbench.core.words import plural
from commbench.errors import UsageError
from commbench.replay.model import P2P_OPS, RecordedOp, Trace, group_order

LONGEST_STEP = 5000  # operations; longer blocks are not looked for (the search is quadratic)


@dataclass(frozen=True)
class Selection:
    kind: str  # all, seq or last
    first: int = 0
    last: int = 0  # seq: the range; last: the number of steps in ``first``

    def describe(self) -> str:
        if self.kind == "seq":
            return f"seq:{self.first}-{self.last}"
        return f"last:{self.first}" if self.kind == "last" else "all"


def parse_selection(text: str) -> Selection:
    """'all', 'seq:A-B' or 'last:N'; UsageError otherwise."""
    value = text.strip().lower()
    if value == "all":
        return Selection("all")
    kind, _, rest = value.partition(":")
    if kind == "seq":
        head, _, tail = rest.partition("-")
        first, last = whole_number(head, 0), whole_number(tail, 0)
        if first is not None and last is not None and first <= last:
            return Selection("seq", first, last)
    elif kind == "last" and whole_number(rest, 1) is not None:
        return Selection("last", int(rest))
    raise UsageError(f"--select {text!r}: give all, seq:A-B (sequence ids of the world group, A <= B) "
                     "or last:N (the last N steps, N >= 1)")


def select(trace: Trace, selection: Selection) -> Trace:
    if selection.kind == "all":
        return trace
    if selection.kind == "seq":
        return _sequence_window(trace, selection)
    return _last_steps(trace, selection.first)


def _world_group(trace: Trace) -> str:
    every = tuple(range(trace.world_size))
    found = sorted((name for name, group in trace.groups.items() if group.ranks == every),
                   key=group_order)
    if not found:
        raise UsageError("--select seq:A-B counts sequence ids of a group of every rank, and this recording "
                         "has none; use --select last:N")
    return found[0]


def _sequence_window(trace: Trace, selection: Selection) -> Trace:
    anchor = _world_group(trace)
    kept: dict[int, list[RecordedOp]] = {}
    for rank, ops in trace.ops.items():
        inside = [index for index, op in enumerate(ops) if op.group == anchor and op.name not in P2P_OPS
                  and selection.first <= op.seq <= selection.last]
        kept[rank] = ops[inside[0]: inside[-1] + 1] if inside else []
    if not any(kept.values()):
        seqs = [op.seq for ops in trace.ops.values() for op in ops if op.group == anchor]
        held = f"{min(seqs)}-{max(seqs)}" if seqs else "none"
        raise UsageError(f"--select {selection.describe()}: no operation of group "
                         f"{trace.groups[anchor].label} has a sequence id in that range (recorded: {held})")
    selected = trace.with_ops(kept)
    label = trace.groups[anchor].label
    selected.notes.append(f"--select {selection.describe()}: sequence ids of group {label}")
    return selected


def step_length(signatures: list[tuple]) -> tuple[int, int]:
    """(operations per step, steps) of the repeating block that covers most of the end; (0, 0) if none."""
    length = len(signatures)
    best = (0, 0)
    for period in range(1, min(length // 2, LONGEST_STEP) + 1):
        if best[0] * best[1] == length:
            break  # nothing covers more than everything
        matched = 0
        while matched < length - period and \
                signatures[length - 1 - matched] == signatures[length - 1 - matched - period]:
            matched += 1
        steps = 1 + matched // period
        if steps >= 2 and steps * period > best[0] * best[1]:
            best = (period, steps)
    return best


def _signature(op: RecordedOp) -> tuple:
    return (op.name, op.group, op.shape, op.dtype, op.peer, op.root)


def _last_steps(trace: Trace, steps: int) -> Trace:
    kept: dict[int, list[RecordedOp]] = {}
    lengths = {}
    for rank, ops in trace.ops.items():
        period, found = step_length([_signature(op) for op in ops])
        if found < steps and ops:
            have = f"only {plural(found, 'repeated step')}" if found else "no repeating step"
            raise UsageError(f"--select last:{steps}: {have} at the end of rank {rank}'s recording; "
                             "use --select seq:A-B or all")
        kept[rank] = ops[len(ops) - period * steps:] if ops else []
        lengths[rank] = period
    selected = trace.with_ops(kept)
    per_step = sorted(set(lengths.values()))
    selected.notes.append(f"--select last:{steps}: steps of {'/'.join(map(str, per_step))} operations "
                          "recognised as the repeating block at the end of each rank's recording")
    return selected
