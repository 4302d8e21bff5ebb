"""What a recording says, in one form for every input format.

Invariants: a Trace holds, per recorded global rank, its operations in the order that rank issued them.
Sizes are as recorded (shapes); ``shape`` is the one per-rank tensor shape the replay needs (see
RecordedOp). Roots and peers are ranks within the operation's group. Nothing here talks to torch.
"""

import math
from collections import Counter
from dataclasses import dataclass, field, replace

from commbench.core.untrusted import whole_number

# The operations commbench replays, by the name every loader normalises to.
PATTERN = "replay"  # the pattern column of replay rows
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                  "gather", "scatter", "barrier")
P2P_OPS = ("send", "recv")
ROOTED_OPS = ("broadcast", "reduce", "gather", "scatter")

Shape = tuple[int, ...]


def numel(shape: Shape) -> int:
    return math.prod(shape)


def total_numel(shapes: tuple[Shape, ...]) -> int:
    return sum(numel(shape) for shape in shapes)


@dataclass(frozen=True)
class RecordedOp:
    """One operation as one rank issued it.

    ``shape`` is the per-rank tensor that stays the same at any group size: the tensor of all_reduce,
    broadcast, reduce, all_to_all, send and recv; the input (this rank's contribution) of all_gather and
    gather; the output (this rank's part) of reduce_scatter and scatter; () for barrier.
    ``seq`` orders a group's operations on every member (Flight Recorder's collective_seq_id or
    p2p_seq_id; the position in the rank's list where a format has none).
    """

    rank: int
    name: str  # one of COLLECTIVE_OPS or P2P_OPS
    raw: str  # as recorded: 'gloo:all_reduce', 'c10d::allreduce_'
    group: str  # the recorded process group's name ('0'); see Trace.groups
    shape: Shape
    dtype: str  # 'float32', 'bfloat16', 'int64', ... ('' when the recording does not say)
    input_sizes: tuple[Shape, ...] = ()
    output_sizes: tuple[Shape, ...] = ()
    seq: int = 0
    created_ns: int | None = None  # when the rank issued it, for --keep-gaps
    duration_us: float | None = None  # how long it took, where the recording measured it
    root: int | None = None  # group rank of the root, where recorded (or inferred)
    peer: int | None = None  # group rank of the other side of a send or recv

    def signature(self) -> tuple:
        """What the members of a group must agree on at the same position."""
        return (self.name, self.input_sizes, self.output_sizes, self.dtype)

    def describe(self) -> str:
        sizes = "x".join(str(part) for part in self.shape) or "-"
        peer = "" if self.peer is None else f" {'to' if self.name == 'send' else 'from'} {self.peer}"
        return f"{self.name}{peer} [{sizes}] {self.dtype or '?'}"


@dataclass(frozen=True)
class RecordedGroup:
    """A recorded process group: its name, description and members (global ranks, sorted)."""

    name: str
    desc: str
    ranks: tuple[int, ...]

    @property
    def label(self) -> str:
        """'1:mesh_dp', or the bare name when the recording gave no description."""
        return self.name if self.desc in ("", "undefined") else f"{self.name}:{self.desc}"

    def global_rank(self, group_rank: int) -> int:
        return self.ranks[group_rank]

    def group_rank(self, global_rank: int) -> int:
        return self.ranks.index(global_rank)


@dataclass
class Trace:
    """A loaded recording: every rank's operations and the groups they ran on.

    ``skipped`` counts recorded operations commbench does not replay, by recorded name, so they are
    listed, never silently dropped; ``notes`` say what the format could not tell and what was assumed.
    """

    source: str
    format: str  # 'flight-recorder', 'flight-recorder-json' or 'profiler'
    world_size: int
    ops: dict[int, list[RecordedOp]]
    groups: dict[str, RecordedGroup]
    skipped: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def op_count(self) -> int:
        return sum(len(ops) for ops in self.ops.values())

    def with_ops(self, ops: dict[int, list[RecordedOp]]) -> "Trace":
        return replace(self, ops=ops, skipped=Counter(self.skipped), notes=list(self.notes))

    def group_of(self, op: RecordedOp) -> RecordedGroup:
        return self.groups[op.group]

    def peer_global(self, op: RecordedOp) -> int:
        """The global rank on the other side of a send or recv."""
        assert op.peer is not None
        return self.groups[op.group].global_rank(op.peer)


def describe_shapes(shapes: tuple[Shape, ...]) -> str:
    return "[" + ", ".join("[" + ", ".join(str(part) for part in shape) + "]" for shape in shapes) + "]"


def group_order(name: str) -> tuple:
    """Recorded groups by their names: numbered ones ('0', '1': torch's) first, by number, then the others
    by name (a name is whatever the file says: '²' or 5,000 digits are names, not numbers)."""
    number = whole_number(name, 0)
    return (number is None, number or 0, name)
