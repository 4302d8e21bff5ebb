"""Reading recordings: which files, which format, which rank, safely.

Invariants: nothing from a file is ever executed; files are opened, capped and inflated as untrusted
(core/untrusted.py), JSON nesting bounded. Pickles go through PlainDataUnpickler, which refuses
every class and function (so only dicts, lists, tuples, strings, numbers, booleans and None come out);
JSON is parsed by the json module. The format is told from the content, never from the file name. Every
problem is one UsageError naming the file.
"""

import glob
import io
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.core.untrusted import (
    MAX_HASHED_VALUES,
    MAX_NESTING,
    MAX_RECORDED_RANKS,
    RECORDING_BYTES,
    inflate,
    is_directory,
    parse_json,
    pickle_nesting_exceeds,
    present,
    read_bytes,
    shown,
)
from commbench.errors import UsageError
from commbench.replay import chrome, flight
from commbench.replay.model import Trace

FLIGHT_RECORDER = "flight-recorder"
FLIGHT_RECORDER_JSON = "flight-recorder-json"
PROFILER = "profiler"
_TRAILING_NUMBER = re.compile(r"([0-9]+)$")  # the rank, as torch's fr_trace analyzer reads file names


class PlainDataUnpickler(pickle.Unpickler):
    """Loads plain data only: any class, function or persistent id in the stream is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it asks for {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it asks for a persistent object")


def load_plain_pickle(data: bytes, path: Path) -> Any:
    if pickle_nesting_exceeds(data):
        raise UsageError(f"{path}: refused to load: tuples nested more than {MAX_NESTING} deep or holding "
                         f"more than {MAX_HASHED_VALUES:,} values (hashing them would crash or never end)")
    try:
        return PlainDataUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        if str(exc).startswith("it asks for"):
            raise UsageError(f"{path}: refused to load: {exc} (a Flight Recorder dump holds only plain "
                             "data; this pickle would run code)") from None
        raise UsageError(f"{path}: truncated or corrupt pickle ({exc})") from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError,
            RecursionError, OverflowError) as exc:
        raise UsageError(f"{path}: truncated or corrupt pickle ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class RankFile:
    """One file's content: its format, the rank it belongs to, and the parsed payload."""

    path: Path
    format: str
    rank: int
    payload: dict


def expand(sources: list[str]) -> list[Path]:
    """The files named by directories (their files), globs and paths, sorted, each once."""
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        if is_directory(path):
            files = [child for child in path.iterdir() if child.is_file() and not child.name.startswith(".")]
            if not files:
                raise UsageError(f"{source}: the directory holds no trace files")
            found.extend(files)
        elif glob.has_magic(source):
            matched = [Path(name) for name in glob.glob(source) if Path(name).is_file()]
            if not matched:
                raise UsageError(f"{source}: no file matches")
            found.extend(matched)
        elif present(path):  # a path given by name is read, or named for what it is (a FIFO, a device)
            found.append(path)
        else:
            raise UsageError(f"{source}: no such file or directory")
    return sorted(dict.fromkeys(found))


def _rank_from_name(path: Path) -> int | None:
    stem = path.name
    for suffix in (".gz", ".json", ".pkl", ".pickle"):
        stem = stem.removesuffix(suffix)
    found = _TRAILING_NUMBER.search(stem)
    return int(found.group(1)) if found else None  # ASCII digits of a file name: at most 255 of them


def _decode(path: Path) -> tuple[str, dict]:
    """(format, payload) from the bytes, whatever the file is called."""
    # gzip, as torch.profiler writes *.json.gz, inflated up to the same cap
    data = inflate(read_bytes(path, "recording", RECORDING_BYTES), path, "recording", RECORDING_BYTES)
    if not data.strip():
        raise UsageError(f"{path}: the file is empty")
    if data[:1] == b"\x80":  # pickle protocol 2 and later: what torch's Flight Recorder writes
        payload = load_plain_pickle(data, path)
        if isinstance(payload, dict) and "entries" in payload:
            return FLIGHT_RECORDER, payload
        raise UsageError(f"{path}: a pickle, but not a Flight Recorder dump (no 'entries')")
    if data.lstrip()[:1] not in (b"{", b"["):
        raise UsageError(f"{path}: not a Flight Recorder dump or a torch.profiler trace")
    payload = parse_json(data, path, "Flight Recorder dump or torch.profiler trace")
    if isinstance(payload, dict) and "traceEvents" in payload:
        return PROFILER, payload
    if isinstance(payload, dict) and "entries" in payload:
        return FLIGHT_RECORDER_JSON, payload
    raise UsageError(f"{path}: JSON, but neither a Flight Recorder dump ('entries') nor a torch.profiler "
                     "trace ('traceEvents')")


def read_rank_file(path: Path) -> RankFile:
    kind, payload = _decode(path)
    rank = chrome.recorded_rank(payload) if kind == PROFILER else None
    if rank is None:
        rank = _rank_from_name(path)
    if rank is None:
        raise UsageError(f"{path}: cannot tell which rank recorded it: the file name does not end in the "
                         "rank (torch writes PREFIX<rank>)")
    if rank >= MAX_RECORDED_RANKS:
        raise UsageError(f"{path}: rank {shown(rank)} is beyond the {MAX_RECORDED_RANKS:,} ranks a recording "
                         "may have (docs/limits.md)")
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
