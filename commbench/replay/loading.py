"""Reading recordings for the replay: every rank's file, one format, one file per rank.

The safe reading itself (the plain-data unpickler, format detection, the rank from the file name) is
commbench.recordings.files, shared with diagnose; this module picks the rank of a profiler trace from
its content and hands the payloads to the format's parser. Every problem is one UsageError.
"""

from dataclasses import dataclass
from pathlib import Path

from commbench.errors import UsageError
from commbench.recordings.files import PROFILER, decode, expand, load_plain_pickle, rank_from_name
from commbench.replay import chrome, flight
from commbench.replay.model import Trace

__all__ = ["RankFile", "load_plain_pickle", "load_trace", "read_rank_file"]  # load_plain_pickle: its old home


@dataclass(frozen=True)
class RankFile:
    """One file's content: its format, the rank it belongs to, and the parsed payload."""

    path: Path
    format: str
    rank: int
    payload: dict


def read_rank_file(path: Path) -> RankFile:
    kind, payload = decode(path)
    rank = chrome.recorded_rank(payload) if kind == PROFILER else None
    if rank is None:
        rank = rank_from_name(path)
    if rank is None:
        raise UsageError(f"{path}: cannot tell which rank recorded it: the file name does not end in the "
                         "rank (torch writes PREFIX<rank>)")
    return RankFile(path, kind, rank, payload)


def _by_rank(files: list[RankFile]) -> dict[int, RankFile]:
    formats = sorted({item.format for item in files})
    if len(formats) > 1:
        raise UsageError(f"the files mix formats ({', '.join(formats)}): give one recording at a time")
    found: dict[int, RankFile] = {}
    for item in files:
        if item.rank in found:
            names = f"{found[item.rank].path.name}, {item.path.name}"
            raise UsageError(f"two files for rank {item.rank} ({names}): dumps of two jobs mixed? Give one "
                             "job's files")
        found[item.rank] = item
    return found


def load_trace(sources: list[str]) -> Trace:
    """Every rank's recording from the files ``sources`` name; UsageError on any problem."""
    paths = expand(sources)
    by_rank = _by_rank([read_rank_file(path) for path in paths])
    label = sources[0] if len(sources) == 1 else f"{len(paths)} files"
    kind = next(iter(by_rank.values())).format
    payloads = {rank: (item.path, item.payload) for rank, item in sorted(by_rank.items())}
    if kind == PROFILER:
        return chrome.parse_traces(payloads, label)
    return flight.parse_dumps(payloads, label, kind)
