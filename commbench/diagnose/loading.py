"""Every rank's dump read and merged into one Job: the ranks' columns index tables shared by all ranks.

Reading is most of diagnose's time at scale (unpickling), so many dumps are read by worker processes,
one per core (up to MAX_WORKERS), each returning compact summaries (isolation.py: there a dump that
crashes or stalls Python costs only its worker, so pickles are not walked first); a few are read here,
each pickle walked first. Merging maps each rank's local tables onto the job's with one numpy take per
column.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from commbench.diagnose import isolation
from commbench.diagnose.reading import NO_STACK, Frame, RankDump, Signature, read_dump
from commbench.errors import UsageError
from commbench.recordings.files import expand

MAX_WORKERS = 16
# Below this many files per worker, starting one costs more than it saves. A worker starts in a few
# tenths of a second of CPU; a dump read here takes some 60 ms more than in a worker (its pickle is
# walked first): 32 dumps take 2.1 s of CPU here, 0.4 s in one worker.
FILES_PER_WORKER = 32


@dataclass
class Job:
    """One job's dumps, by rank, their columns indexing ``groups``, ``signatures`` and ``stacks``."""

    source: str
    dumps: dict[int, RankDump]
    groups: list[tuple[str, str]] = field(default_factory=list)  # (name, description)
    signatures: list[Signature] = field(default_factory=list)
    stacks: list[tuple[Frame, ...]] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.dumps)

    def entries(self) -> int:
        return sum(dump.entries for dump in self.dumps.values())


def workers_for(files: int) -> int:
    """How many worker processes read ``files`` dumps: none (they are read here) for a few."""
    if files < FILES_PER_WORKER:
        return 0
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores, MAX_WORKERS, files // FILES_PER_WORKER))


def read_dumps(paths: list[Path], workers: int | None = None) -> list[RankDump]:
    """Each file's summary, in order: read by ``workers`` processes, or here when 0 (default: by
    count)."""
    workers = workers_for(len(paths)) if workers is None else workers
    if workers == 0:
        return [read_dump(path) for path in paths]
    return isolation.read(paths, workers)


def load_job(sources: list[str], workers: int | None = None) -> Job:
    """The dumps ``sources`` name (directories, globs, files), read and merged; UsageError on any
    problem, naming the file."""
    paths = expand(sources)
    by_rank: dict[int, RankDump] = {}
    for dump in read_dumps(paths, workers):
        if dump.rank in by_rank:
            names = f"{by_rank[dump.rank].path.name}, {dump.path.name}"
            raise UsageError(f"two dumps for rank {dump.rank} ({names}): dumps of two jobs mixed? Give one "
                             "job's dumps")
        by_rank[dump.rank] = dump
    label = sources[0] if len(sources) == 1 else f"{len(paths)} files"
    return merge(label, by_rank)


class _Table:
    """Values in order of first appearance, each with its index."""

    def __init__(self) -> None:
        self.index: dict = {}

    def codes(self, values: list) -> np.ndarray:
        return np.array([self.index.setdefault(value, len(self.index)) for value in values], dtype=np.int32)

    def values(self) -> list:
        return list(self.index)


def merge(source: str, dumps: dict[int, RankDump]) -> Job:
    """The job whose tables every rank's columns index (each rank's local tables folded in)."""
    groups, signatures, stacks = _Table(), _Table(), _Table()
    descriptions: dict[str, str] = {}
    for rank in sorted(dumps):
        dump = dumps[rank]
        for name, desc in dump.groups:
            descriptions.setdefault(name, desc)
        group_codes = groups.codes([name for name, _ in dump.groups])
        signature_codes = signatures.codes(dump.signatures)
        # NO_STACK (-1) takes the last element: the appended NO_STACK
        stack_codes = np.append(stacks.codes(dump.stacks), np.int32(NO_STACK))
        if dump.entries:
            dump.group = group_codes[dump.group]
            dump.signature = signature_codes[dump.signature]
            dump.stack = stack_codes[dump.stack]
        dump.groups, dump.signatures, dump.stacks = [], [], []  # the job's tables stand for them now
    names = groups.values()
    return Job(source, dict(sorted(dumps.items())), [(name, descriptions[name]) for name in names],
               signatures.values(), stacks.values())
