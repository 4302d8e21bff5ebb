"""Which files, which format, which rank: reading recordings safely.

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
from pathlib import Path
from typing import Any

from commbench.core.untrusted import (
    MAX_HASHED_VALUES,
    MAX_NESTING,
    RECORDING_BYTES,
    inflate,
    is_directory,
    parse_json,
    pickle_nesting_exceeds,
    present,
    read_bytes,
)
from commbench.errors import UsageError

FLIGHT_RECORDER = "flight-recorder"
FLIGHT_RECORDER_JSON = "flight-recorder-json"
PROFILER = "profiler"
_TRAILING_NUMBER = re.compile(r"([0-9]+)$")  # the rank, as torch's fr_trace analyzer reads file names
_RANK_SUFFIXES = (".gz", ".json", ".pkl", ".pickle")


class PlainDataUnpickler(pickle.Unpickler):
    """Loads plain data only: any class, function or persistent id in the stream is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it asks for {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it asks for a persistent object")


def load_plain_pickle(data: bytes, path: Path, isolated: bool = False) -> Any:
    """The plain data a pickle holds; UsageError naming ``path`` for anything else or a broken stream.
    ``isolated``: the caller reads in a process of its own whose crash or stall costs only this file
    (diagnose's workers), so the tuples are not walked first; unpickling or hashing what it holds may
    then crash or stall that process, which the caller names. Any other caller leaves it False."""
    if not isolated and pickle_nesting_exceeds(data):
        raise UsageError(f"{path}: refused to load: tuples nested more than {MAX_NESTING} deep or holding "
                         f"more than {MAX_HASHED_VALUES:,} values (hashing them would crash or never end)")
    # A peekable stream lets the C unpickler read ahead: three times faster than a bare BytesIO, which
    # it would otherwise read an opcode at a time (it matters at thousands of dumps).
    stream = io.BufferedReader(io.BytesIO(data))  # type: ignore[arg-type]
    try:
        return PlainDataUnpickler(stream).load()
    except pickle.UnpicklingError as exc:
        if str(exc).startswith("it asks for"):
            raise UsageError(f"{path}: refused to load: {exc} (a Flight Recorder dump holds only plain "
                             "data; this pickle would run code)") from None
        raise UsageError(f"{path}: truncated or corrupt pickle ({exc})") from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError,
            RecursionError, OverflowError) as exc:
        raise UsageError(f"{path}: truncated or corrupt pickle ({type(exc).__name__}: {exc})") from None


def _folders_that_do(path: Path) -> str:
    """'; its folders ddp, fsdp2 hold files: give one (for example OUT/ddp)', or '': where a recording's
    top folder holds a folder per job (scripts/record_example.py's OUT)."""
    holding = sorted(child for child in path.iterdir() if child.is_dir() and not child.name.startswith(".")
                     and any(item.is_file() for item in child.iterdir()))
    if not holding:
        return ""
    return (f"; its folders {', '.join(child.name for child in holding)} hold files: give one "
            f"(for example {holding[0]})")


def expand(sources: list[str]) -> list[Path]:
    """The files named by directories (their files), globs and paths, sorted, each once."""
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        if is_directory(path):
            files = [child for child in path.iterdir() if child.is_file() and not child.name.startswith(".")]
            if not files:
                raise UsageError(f"{source}: the directory holds no trace files{_folders_that_do(path)}")
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


def rank_from_name(path: Path) -> int | None:
    """The rank a file name ends in (torch writes PREFIX<rank>), before any .json/.gz/.pkl suffix."""
    stem = path.name
    for suffix in _RANK_SUFFIXES:
        stem = stem.removesuffix(suffix)
    found = _TRAILING_NUMBER.search(stem)
    return int(found.group(1)) if found else None  # ASCII digits of a file name: at most 255 of them


def decode(path: Path, isolated: bool = False) -> tuple[str, dict]:
    """(format, payload) from the file's bytes, whatever the file is called (``isolated``: as for
    load_plain_pickle)."""
    # gzip, as torch.profiler writes *.json.gz, inflated up to the same cap
    data = inflate(read_bytes(path, "recording", RECORDING_BYTES), path, "recording", RECORDING_BYTES)
    if not data.strip():
        raise UsageError(f"{path}: the file is empty")
    if data[:1] == b"\x80":  # pickle protocol 2 and later: what torch's Flight Recorder writes
        payload = load_plain_pickle(data, path, isolated)
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
