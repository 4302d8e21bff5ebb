"""Dumps read in worker processes, where a dump that crashes or stalls Python costs only that dump.

A pickle can hold a tuple that kills the process hashing it (nested deeper than the C stack) or that
never finishes hashing (tuples sharing their items through the memo, hashed once per path through
them). Read in diagnose's own process, every pickle is walked first to refuse those
(core/untrusted.pickle_nesting_exceeds: pure Python, about eight times the time the reading itself
takes). Read here, nothing is walked: each worker reads one dump at a time under a limit on its CPU
time, and a worker that dies, of a crash or ended by the kernel at the limit, names the dump it was
reading, refused as any unreadable dump is. The workers are spawned (the caller may be a rank with
torch's threads running, which fork would copy mid-flight) and every one is ended before ``read``
returns or raises.

Invariants: what a worker sends back is a RankDump of checked plain values (reading.py checks every
field), or the UsageError naming the file; the limit is CPU time, not wall time, so a loaded machine
does not refuse a good dump.
"""

import multiprocessing
import os
import resource
import signal
import traceback
from collections import deque
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from commbench.diagnose.reading import RankDump, read_dump
from commbench.errors import UsageError

# CPU seconds a worker may spend on one dump before the kernel ends it. A dump of 2,000 entries
# (0.3 MiB) takes about 10 ms to read, 35 ms per MiB: the limit is thirty times that per MiB, and a
# floor for small dumps (a worker's first dump also pays for warming up), so a good dump is never near
# it while a stalled one costs a few seconds.
CPU_SECONDS = 2.0
CPU_SECONDS_PER_MIB = 1.0
AHEAD = 2  # paths queued per worker, so it never waits for this process between dumps
ENDING_SECONDS = 5.0  # how long an idle worker gets to return before it is killed


def cpu_limit(path: Path) -> float:
    """The CPU seconds reading ``path`` may take in a worker."""
    try:
        size = os.stat(path).st_size
    except (OSError, ValueError):
        size = 0  # reading it will say why it cannot
    return CPU_SECONDS + CPU_SECONDS_PER_MIB * size / (1 << 20)


class _Failure:
    """A worker's unexpected exception (a bug, not the file's fault), as text: raised here as one."""

    def __init__(self, text: str) -> None:
        self.text = text


def serve(connection: Connection) -> None:
    """A worker: reads each path it is sent under the CPU limit and sends back its RankDump, the
    UsageError or a _Failure; returns when sent None or when this process's end closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for diagnose's process: it ends the workers
    signal.signal(signal.SIGPROF, signal.SIG_DFL)  # the kernel's signal at the limit ends the worker
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a dump that crashes it leaves no core file behind
    while True:
        try:
            path = connection.recv()
        except EOFError:
            return
        if path is None:
            return
        result: RankDump | UsageError | _Failure
        signal.setitimer(signal.ITIMER_PROF, cpu_limit(path))
        try:
            result = read_dump(path, isolated=True)
        except UsageError as exc:
            result = exc
        except Exception:  # noqa: BLE001 - shown by diagnose's process, as a bug
            result = _Failure(traceback.format_exc())
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        connection.send(result)


class _Worker:
    """One worker process, its end of the pipe and the indices of the paths it was given, in order."""

    def __init__(self, context: multiprocessing.context.SpawnContext) -> None:
        self.connection, theirs = context.Pipe()
        self.process: BaseProcess = context.Process(target=serve, args=(theirs,), daemon=True,
                                                    name="commbench-diagnose-reader")
        self.process.start()
        theirs.close()  # the worker's end is the worker's only: its death closes the pipe here
        self.reading: deque[int] = deque()

    def give(self, index: int, path: Path) -> None:
        try:
            self.connection.send(path)
        except OSError:  # it died reading an earlier path: receiving from it says which
            return
        self.reading.append(index)

    def end(self) -> None:
        """Ends the worker: an idle one returns when its pipe closes; a busy one, or one that does not
        return, is killed."""
        self.connection.close()
        if not self.reading:
            self.process.join(ENDING_SECONDS)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


def read(paths: list[Path], workers: int) -> list[RankDump]:
    """Each file's summary, in order, read by ``workers`` processes; UsageError naming the first file
    that is not a dump, or whose reading killed its worker or ran past its limit."""
    context = multiprocessing.get_context("spawn")
    found: list[RankDump | None] = [None] * len(paths)
    waiting = deque(range(len(paths)))
    started: list[_Worker] = []
    try:
        for _ in range(min(workers, len(paths))):
            started.append(_Worker(context))
        busy: dict[Connection, _Worker] = {}
        for worker in started:
            while waiting and len(worker.reading) < AHEAD:
                index = waiting.popleft()
                worker.give(index, paths[index])
            busy[worker.connection] = worker
        while busy:
            for connection in wait(list(busy)):
                worker = busy[connection]  # type: ignore[index]
                index = worker.reading.popleft()
                try:
                    result = worker.connection.recv()
                except (EOFError, OSError):  # it died: its end of the pipe closed
                    raise _refusal(paths[index], worker.process) from None
                if isinstance(result, UsageError):
                    raise result
                if isinstance(result, _Failure):
                    raise RuntimeError(f"reading {paths[index]} failed in a worker process:\n{result.text}")
                found[index] = result
                if waiting:
                    index = waiting.popleft()
                    worker.give(index, paths[index])
                if not worker.reading:
                    del busy[worker.connection]
    finally:
        for worker in started:
            worker.end()
    return found  # type: ignore[return-value]


def _refusal(path: Path, process: BaseProcess) -> Exception:
    """Why the worker reading ``path`` died: a signal (a crash, or the kernel at the CPU limit) is the
    file's doing, refused as a UsageError; a worker that exited is not (it could not start, a bug)."""
    process.join(ENDING_SECONDS)
    status = process.exitcode
    if status == -signal.SIGPROF:
        why = (f"reading it took more than {cpu_limit(path):.0f} s of CPU (as tuples that share their items "
               "do: hashing them never ends)")
    elif status is not None and status < 0:
        why = f"reading it crashed its worker process ({_signal_name(-status)}"
        why += ", as tuples nested deeper than Python's stack do)" if -status == signal.SIGSEGV else ")"
    else:
        return RuntimeError(f"the worker process reading {path} ended (exit status {status}); its error is "
                            "above")
    return UsageError(f"{path}: refused to load: {why}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal
        return f"signal {number}"
