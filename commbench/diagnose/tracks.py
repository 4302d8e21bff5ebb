"""Each rank's collectives per process group, as sorted arrays the engine compares across ranks.

A Track is one member's collectives on one group: sequence ids (increasing, one per collective; the
entries of one coalesced launch, which share a sequence id, are one), what the members must agree on at
each (an id per distinct Signature.agreement()), and where each sits in the rank's dump. ``done`` says
per entry whether the backend finished it (see engine.py's docstring for the rule).
"""

import re
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np

from commbench.diagnose.loading import Job
from commbench.diagnose.reading import STATE_CODES, Frame, RankDump, Shape, Signature

COMPLETED = STATE_CODES["completed"]
STATEFUL_BACKENDS = ("nccl", "xccl")  # their entries' state says whether the work completed
LIBRARY = re.compile(r"/lib/python3[^/]*/|/site-packages/|/dist-packages/|^<")  # not the job's own code
WINDOW_TRACKS = 4  # sequence ids compared: this many times the longest track, back from the furthest


@dataclass
class Track:
    rank: int
    seq: np.ndarray  # int64, increasing
    key: np.ndarray  # int32: what must agree
    position: np.ndarray  # the entry's index in the rank's dump

    def index(self, seq: int) -> int | None:
        found = int(np.searchsorted(self.seq, seq))
        return found if found < len(self.seq) and self.seq[found] == seq else None

    def key_at(self, seq: int) -> int | None:
        found = self.index(seq)
        return None if found is None else int(self.key[found])

    def position_of(self, seq: int) -> int | None:
        found = self.index(seq)
        return None if found is None else int(self.position[found])


class Tracks:
    """Every rank's tracks, by group; which entries completed; the sends and receives in flight."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.keys: dict[tuple, int] = {}
        self.key = np.array([self._key(item.agreement()) for item in job.signatures], dtype=np.int32)
        self.is_p2p = np.array([item.is_p2p for item in job.signatures], dtype=np.bool_)
        self.by_group: dict[int, dict[int, Track]] = {group: {} for group in range(len(job.groups))}
        self.signatures_on: dict[int, set[int]] = {group: set() for group in range(len(job.groups))}
        self.done: dict[int, np.ndarray] = {}
        self.pending_p2p: dict[int, np.ndarray] = {}
        for rank, dump in job.dumps.items():
            self._add(rank, dump)

    def _key(self, agreement: tuple) -> int:
        return self.keys.setdefault(agreement, len(self.keys))

    def _add(self, rank: int, dump: RankDump) -> None:
        done = dump.state == COMPLETED
        if dump.backend not in STATEFUL_BACKENDS and not bool((dump.state > 0).any()):
            done = dump.retired.copy()  # gloo leaves every entry 'scheduled': retired is its word
        p2p = self.is_p2p[dump.signature] if dump.entries else np.zeros(0, dtype=np.bool_)
        order = np.argsort(dump.group, kind="stable")
        for positions in np.split(order, np.flatnonzero(np.diff(dump.group[order])) + 1):
            if not len(positions):
                continue
            group = int(dump.group[positions[0]])
            self.signatures_on[group].update(np.unique(dump.signature[positions]).tolist())
            collectives = positions[~p2p[positions]]
            if len(collectives):
                # a group's collectives complete in order: one before a completed one completed too
                done[collectives] = np.maximum.accumulate(done[collectives][::-1])[::-1]
                self.by_group[group][rank] = self._track(rank, dump, collectives)
        self.done[rank] = done
        self.pending_p2p[rank] = np.flatnonzero(p2p & ~done)

    def _track(self, rank: int, dump: RankDump, positions: np.ndarray) -> Track:
        seq, key = dump.seq[positions], self.key[dump.signature[positions]]
        if len(seq) > 1 and bool(np.any(np.diff(seq) <= 0)):
            order = np.argsort(seq, kind="stable")
            positions, seq, key = positions[order], seq[order], key[order]
            unique, starts = np.unique(seq, return_index=True)
            ends = np.append(starts[1:], len(seq))
            key = np.array([key[start] if end - start == 1 else self._key(tuple(key[start:end].tolist()))
                            for start, end in zip(starts, ends, strict=True)], dtype=np.int32)
            positions, seq = positions[ends - 1], unique
        return Track(rank, seq, key, positions)

    def group_id(self, name: str) -> int | None:
        return next((index for index, (group, _) in enumerate(self.job.groups) if group == name), None)

    def implied_size(self, group: int) -> int:
        """The members the group's all_gathers and reduce_scatters imply (1 when none does)."""
        sizes = [1]
        for index in self.signatures_on[group]:
            signature = self.job.signatures[index]
            if len(signature.inputs) != 1 or len(signature.outputs) != 1:
                continue
            if signature.op == "all_gather":
                sizes.append(_ratio(signature.outputs[0], signature.inputs[0]))
            elif signature.op == "reduce_scatter":
                sizes.append(_ratio(signature.inputs[0], signature.outputs[0]))
        return max(sizes)

    def peer_of(self, rank: int, position: int) -> tuple[int, int | None, str]:
        """(group, the global rank on the other side, 'send' or 'recv') of a send or receive."""
        dump = self.job.dumps[rank]
        group = int(dump.group[position])
        signature: Signature = self.job.signatures[dump.signature[position]]
        members = dump.members.get(self.job.groups[group][0])
        peer = signature.peer
        if peer is not None and members is not None:
            peer = members[peer] if peer < len(members) else None
        elif peer is not None and self.job.groups[group][0] != "0":
            peer = None  # a subgroup's rank, and the dump does not list the subgroup's members
        return group, peer, signature.op

    @staticmethod
    def first_divergence(tracks: list[Track]) -> int | None:
        """The lowest sequence id at which two tracks that both recorded it disagree."""
        if len(tracks) < 2:
            return None
        highest = max(int(track.seq[-1]) for track in tracks)
        lowest = max(min(int(track.seq[0]) for track in tracks),
                     highest - WINDOW_TRACKS * max(len(track.seq) for track in tracks))
        matrix = np.full((len(tracks), highest - lowest + 1), -1, dtype=np.int32)
        for row, track in enumerate(tracks):
            kept = track.seq >= lowest
            matrix[row, track.seq[kept] - lowest] = track.key[kept]
        recorded = matrix >= 0
        top = matrix.max(axis=0)
        np.putmask(matrix, ~recorded, np.iinfo(np.int32).max)
        bottom = matrix.min(axis=0)
        differ = np.flatnonzero((recorded.sum(axis=0) >= 2) & (top != bottom))
        return int(lowest + differ[0]) if len(differ) else None


def _ratio(whole: Shape, part: Shape) -> int:
    """How many ``part``s make ``whole``: [n, *part] (gloo) or [n * part[0], *part[1:]] (NCCL)."""
    if len(whole) == len(part) + 1 and whole[1:] == part:
        return whole[0]
    if len(whole) == len(part) >= 1 and whole[1:] == part[1:] and part[0] > 0 and whole[0] % part[0] == 0:
        return whole[0] // part[0]
    return 1


def describe_stack(stack: tuple[Frame, ...]) -> str:
    """Where the job issued the operation ('train.py:41 step'): the innermost frame outside torch and
    the libraries (the standard library, site-packages); the innermost outside torch when all are."""
    outside_torch = [frame for frame in stack if "/torch/" not in frame[1].replace("\\", "/")]
    own = [frame for frame in outside_torch if not LIBRARY.search(frame[1].replace("\\", "/"))]
    chosen = (own or outside_torch)[:1]
    return "".join(f"{PurePath(filename).name}:{line} {name}" for name, filename, line in chosen)
