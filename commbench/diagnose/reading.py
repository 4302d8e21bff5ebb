"""One rank's Flight Recorder dump as a compact summary: columns of small integers per entry, and
tables of the distinct process groups, signatures and stacks they index.

Invariants: an entry's signature is everything the members of its group must agree on, plus what the
verdict shows (the recorded name, sizes, dtypes, the peer of a send or recv); its stack is the Python
stack torch recorded. A dump of thousands of entries has a few dozen distinct ones of each, so an entry
costs a few bytes here, not the dicts and frames the pickle holds: 4,096 ranks of 2,000 entries fit in a
few hundred MB. Every field is checked: a wrong type is a UsageError naming the file, the entry and the
field. Distinct values are checked in full once, when first seen (keyed by their text, which plain data
spells unambiguously). Nothing here imports torch.
"""

import gc
import marshal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import count, repeat
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any

import numpy as np

from commbench.errors import UsageError
from commbench.recordings import flight as fields
from commbench.recordings.files import FLIGHT_RECORDER, FLIGHT_RECORDER_JSON, decode, rank_from_name

Shape = tuple[int, ...]
Frame = tuple[str, str, int]  # (function, file, line)
STATE_CODES = {fields.SCHEDULED: 0, fields.STARTED: 1, fields.COMPLETED: 2}
NO_STACK = -1
SEQ_LIMIT = 2**63  # sequence ids count up from 0, and are held as int64
REQUIRED_FIELDS = ("process_group", "collective_seq_id", "p2p_seq_id", "profiling_name", "input_sizes",
                   "output_sizes", "input_dtypes", "output_dtypes", "state", "retired")
_PICK = itemgetter(*REQUIRED_FIELDS)
_FRAMES = methodcaller("get", "frames", ())


@dataclass(frozen=True)
class Signature:
    """What an entry issued: the operation (commbench's name, or the recorded one when commbench has
    none), as recorded, its sizes and dtypes, and for a send or recv the peer (a group rank)."""

    op: str
    raw: str
    inputs: tuple[Shape, ...]
    outputs: tuple[Shape, ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    peer: int | None = None

    @property
    def is_p2p(self) -> bool:
        return self.op in fields.P2P_NAMES

    def agreement(self) -> tuple:
        """What every member must hold at the same sequence id. What legitimately differs by rank is left
        out: an all-to-all's splits, a gather's output and a scatter's input (the root's only)."""
        inputs, input_dtypes = self.inputs, self.input_dtypes
        outputs, output_dtypes = self.outputs, self.output_dtypes
        if self.op in ("all_to_all", "scatter"):
            inputs = ()
        if self.op in ("all_to_all", "gather"):
            outputs = ()
        if self.op == "scatter":
            input_dtypes = ()
        if self.op == "gather":
            output_dtypes = ()
        return (self.raw, inputs, outputs, input_dtypes, output_dtypes)

    def sizes(self) -> str:
        text = ", ".join("x".join(str(part) for part in shape) or "scalar" for shape in self.inputs) or "-"
        if self.outputs != self.inputs:
            text += " -> " + (", ".join("x".join(str(part) for part in shape) or "scalar"
                                        for shape in self.outputs) or "-")
        return text

    def dtype(self) -> str:
        names = dict.fromkeys(self.input_dtypes + self.output_dtypes)
        return "/".join(names) or "-"

    def describe(self) -> str:
        """'all_reduce [4] Float', 'send to 1 [2x8] BFloat16'."""
        peer = "" if self.peer is None else f" {'to' if self.op == 'send' else 'from'} {self.peer}"
        return f"{self.op}{peer} [{self.sizes()}] {self.dtype()}"


@dataclass
class RankDump:
    """One rank's dump, summarised. Columns hold one value per entry, oldest first; ``group``,
    ``signature`` and ``stack`` index the tables (local to this dump until loading.merge makes them
    shared by all ranks)."""

    rank: int
    path: Path
    version: str
    backend: str  # from the entries' names: 'gloo', 'nccl', ... ('' when it holds none)
    members: dict[str, tuple[int, ...]]  # pg_config's groups that list their ranks
    groups: list[tuple[str, str]]  # (name, description)
    signatures: list[Signature]
    stacks: list[tuple[Frame, ...]]
    group: np.ndarray  # int32
    seq: np.ndarray  # int64: collective_seq_id, or p2p_seq_id for a send or recv
    signature: np.ndarray  # int32
    state: np.ndarray  # int8: STATE_CODES
    retired: np.ndarray  # bool
    stack: np.ndarray  # int32, NO_STACK where none was recorded

    @property
    def entries(self) -> int:
        return len(self.seq)


def read_dump(path: Path, isolated: bool = False) -> RankDump:
    """The summary of the Flight Recorder dump at ``path``; UsageError for anything else. ``isolated``:
    read in a worker process whose crash or stall costs only this dump (recordings.files.decode)."""
    with _collector_paused():
        return _read_dump(path, isolated)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a dump's tens of thousands of containers are made and
    freed (plain data from a pickle holds no cycle to collect): a fifth of the time it takes to read."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_dump(path: Path, isolated: bool) -> RankDump:
    kind, payload = decode(path, isolated)
    if kind not in (FLIGHT_RECORDER, FLIGHT_RECORDER_JSON):
        raise UsageError(f"{path}: a torch.profiler trace, not a Flight Recorder dump (diagnose reads the "
                         "Flight Recorder's dumps)")
    rank = rank_from_name(path)
    if rank is None:
        raise UsageError(f"{path}: cannot tell which rank dumped it: the file name does not end in the "
                         "rank (torch writes PREFIX<rank>)")
    return summarise(payload, path, rank)


def summarise(payload: dict, path: Path, rank: int) -> RankDump:
    entries = payload.get("entries")
    if not isinstance(entries, list):
        raise UsageError(f"{path}: 'entries' is not a list: not a Flight Recorder dump")
    version = payload.get("version")
    columns = _Columns()
    try:
        columns.read(entries)
    except fields.EntryError as exc:
        raise UsageError(f"{path}: entry {columns.position}: {exc}: a corrupt Flight Recorder dump") from None
    return RankDump(rank=rank, path=path, version=version if isinstance(version, str) else "?",
                    backend=columns.backend, members=fields.recorded_members(payload.get("pg_config")),
                    groups=columns.groups,
                    signatures=columns.signatures, stacks=columns.stacks,
                    **columns.arrays())


def _distinct(keys: list) -> tuple[list[int], list[int]]:
    """(the position each distinct key first appears at, in order of first appearance; each key's
    code, its index in that list). Each key is hashed once: a stack's key is a tuple of a dozen ids,
    whose hash Python does not keep."""
    seen: dict = {}
    firsts = list(map(seen.setdefault, keys, count()))  # each key's first position
    code_of = dict(zip(seen.values(), count()))
    return list(seen.values()), list(map(code_of.__getitem__, firsts))


def _hashable(values: tuple) -> list:
    """Keys for ``values``: themselves when all hash (a pickle's tuples), else their marshalled bytes
    (JSON's lists)."""
    try:
        set(values)
    except TypeError:
        return list(map(marshal.dumps, values))
    return list(values)


class _Columns:
    """The per-entry columns of one dump. The columns are pulled out of the entries with C-level maps
    (itemgetter, marshal): a Python loop per entry would cost more than the unpickling. Values that
    repeat (groups, signatures, stacks) are keyed by their marshalled bytes (a stack by the identity of
    its frames, which torch's pickle shares between entries) and checked in full once, on the entry
    where each first appears; a failure anywhere falls back to checking entry by entry, for a message
    that names the entry and the field."""

    def __init__(self) -> None:
        self.position = 0
        self.backend = ""
        self.groups: list[tuple[str, str]] = []
        self.signatures: list[Signature] = []
        self.stacks: list[tuple[Frame, ...]] = []
        self.columns: dict[str, np.ndarray] = {}

    def read(self, entries: list) -> None:
        try:
            self._read(entries)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as exc:
            for position, entry in enumerate(entries):
                self.position = position
                problem = _problem(entry)
                if problem:
                    raise fields.EntryError(problem) from None
            raise fields.EntryError(f"unreadable ({type(exc).__name__})") from None

    def _read(self, entries: list) -> None:
        rows = list(map(_PICK, entries))
        (groups, collective, p2p, names, inputs, outputs, input_dtypes, output_dtypes, states,
         retired) = zip(*rows, strict=True) if rows else ((),) * len(REQUIRED_FIELDS)
        for values, name, kind in ((collective, "collective_seq_id", int), (p2p, "p2p_seq_id", int),
                                   (retired, "retired", bool)):
            if not set(map(type, values)) <= {kind}:
                raise TypeError(name)
            if kind is int and values and not 0 <= min(values) <= max(values) < SEQ_LIMIT:
                raise ValueError(name)
        first, group_codes = _distinct(_hashable(groups))
        self.groups = [fields.group(entries[position]) for position in first]
        first, signature_codes = _distinct(list(map(marshal.dumps, zip(
            names, inputs, outputs, input_dtypes, output_dtypes, strict=True))))
        self.signatures = [self._signature(entries[position]) for position in first]
        frame_lists = list(map(_FRAMES, entries))
        first, stack_codes = _distinct(list(map(tuple, map(map, repeat(id), frame_lists))))
        self.stacks = [_stack(frame_lists[position]) for position in first]
        empty = self.stacks.index(()) if () in self.stacks else None
        signature = np.array(signature_codes, dtype=np.int32)
        is_p2p = np.array([item.is_p2p for item in self.signatures], dtype=np.bool_)
        stack = np.array(stack_codes, dtype=np.int32)
        if empty is not None:  # no frames recorded (the JSON form): no stack, not an empty one
            stack[stack == empty] = NO_STACK
        self.columns = {
            "group": np.array(group_codes, dtype=np.int32),
            "seq": np.where(is_p2p[signature] if len(signature) else np.zeros(0, np.bool_),
                            np.array(p2p, dtype=np.int64), np.array(collective, dtype=np.int64)),
            "signature": signature,
            "state": np.array(list(map(STATE_CODES.__getitem__, states)), dtype=np.int8),
            "retired": np.array(retired, dtype=np.bool_), "stack": stack}

    def _signature(self, entry: dict) -> Signature:
        raw = entry["profiling_name"]
        if not isinstance(raw, str):
            raise fields.EntryError("profiling_name is not a name")
        backend, head, peer = fields.split_name(raw)
        self.backend = self.backend or backend
        return Signature(op=fields.OPERATION_NAMES.get(head, head), raw=raw,
                         inputs=fields.shapes(entry, "input_sizes"),
                         outputs=fields.shapes(entry, "output_sizes"),
                         input_dtypes=tuple(fields.strings(entry, "input_dtypes")),
                         output_dtypes=tuple(fields.strings(entry, "output_dtypes")), peer=peer)

    def arrays(self) -> dict[str, np.ndarray]:
        return self.columns


def _stack(frames: Any) -> tuple[Frame, ...]:
    if not isinstance(frames, list | tuple) or not all(
            isinstance(frame, dict) and isinstance(frame.get("name"), str)
            and isinstance(frame.get("filename"), str) and type(frame.get("line")) is int
            for frame in frames):
        raise fields.EntryError("frames is not a list of {name, filename, line}")
    return tuple((frame["name"], frame["filename"], frame["line"]) for frame in frames)


def _problem(entry: Any) -> str | None:
    """What is wrong with ``entry``, field by field; None when every field reads."""
    if not isinstance(entry, dict):
        return "not an entry (a dict of fields)"
    for key in REQUIRED_FIELDS:
        if key not in entry:
            return f"{key} is missing"
    if not isinstance(entry["state"], str) or entry["state"] not in STATE_CODES:
        return f"state is not one of {', '.join(STATE_CODES)}"
    for key in ("collective_seq_id", "p2p_seq_id"):
        if type(entry[key]) is not int:
            return f"{key} is not an integer"
        if not 0 <= entry[key] < SEQ_LIMIT:
            return f"{key} is not a sequence id (0 to 2**63 - 1)"
    if type(entry["retired"]) is not bool:
        return "retired is not true or false"
    if not isinstance(entry["profiling_name"], str):
        return "profiling_name is not a name"
    try:
        fields.group(entry)
        fields.shapes(entry, "input_sizes")
        fields.shapes(entry, "output_sizes")
        fields.strings(entry, "input_dtypes")
        fields.strings(entry, "output_dtypes")
        _stack(entry.get("frames", ()))
    except fields.EntryError as found:
        return str(found)
    return None
