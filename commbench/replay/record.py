"""--record PREFIX: one more pass, untimed, recorded the way the input was, so the replay can be
compared with the job operation by operation.

Flight Recorder input: the pass's entries of this rank's Flight Recorder (the entries created after a
dump taken just before the pass) are written as a dump, to PREFIX<rank>. Profiler input: the pass runs
under torch.profiler and its chrome trace goes to PREFIX<rank>.json. Both load with `commbench replay`
like the originals. This module is the one place the replay reads torch's recorders.
"""

import os
import pickle
import tempfile
from pathlib import Path

import torch

from commbench.backends.base import Backend
from commbench.errors import UsageError
from commbench.measure.timing import make_timer
from commbench.recordings.files import PROFILER, load_plain_pickle
from commbench.replay.execute import GapClock, Step, run_pass


def _flight_recorder_dump() -> dict:
    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)
    if dump is None:
        raise UsageError(f"--record needs torch's Flight Recorder, which torch {torch.__version__} lacks")
    return load_plain_pickle(dump(), Path("this rank's Flight Recorder"))


def _last_record_id(dump: dict) -> int:
    return max((entry.get("record_id", -1) for entry in dump.get("entries", [])), default=-1)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


def record_pass(steps: list[Step], backend: Backend, prefix: str, input_format: str) -> Path:
    """Run one recorded pass on this rank; the file written."""
    timer = make_timer(backend, max(1, len(steps)))
    backend.barrier()
    if input_format == PROFILER:
        path = Path(f"{prefix}{backend.rank}.json")
        activities = [torch.profiler.ProfilerActivity.CPU]
        if backend.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities, record_shapes=True) as profiler:
            run_pass(steps, timer, 0, GapClock(False), backend.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(path))
        return path
    before = _last_record_id(_flight_recorder_dump())
    run_pass(steps, timer, 0, GapClock(False), backend.rank)
    backend.sync_device()
    dump = _flight_recorder_dump()
    dump["entries"] = [entry for entry in dump.get("entries", []) if entry.get("record_id", -1) > before]
    path = Path(f"{prefix}{backend.rank}")
    _write_atomic(path, pickle.dumps(dump))
    return path
