"""Spawning and supervising local ranks when no launcher started commbench.

``spawn_local`` re-runs the command line as N local ranks (the environment launcher's variables set for
each) and returns their exit status; it forwards signals, tells the survivors which rank died (on a
board of files, coordination/board.py: no torch is imported here), and stops ranks that hang after a failure.
``run_on_local_ranks`` runs a Python function on N fresh processes joined in a gloo group, for scripts
and tests that drive commbench's pieces directly.

On Linux both fork their ranks from one server process that imported torch and commbench once
(multiprocessing's forkserver, preloading rank_start.PRELOAD): importing torch costs seconds of CPU, and
N ranks each importing it on a laptop's few cores was most of a small run's time (scripts/bench_spawn.py
measures both ways). Elsewhere (macOS: forking a process that loaded Apple's frameworks is unsafe, which
is why Python starts fresh interpreters there) and with COMMBENCH_RANK_START=exec, each rank is a fresh
``python -P -m commbench``. The launcher itself imports no torch either way.
"""

import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from commbench.coordination import BOARD_ENV, LauncherBoard
from commbench.core.groups import format_ranks
from commbench.errors import RunError, UsageError
from commbench.running.rank_start import PRELOAD, die_with_parent, run_rank
from commbench.writers.files import finish_abandoned

LAUNCHER_ENV = "COMMBENCH_LAUNCHER"  # set by our own spawner on the ranks it starts
RANK_START_ENV = "COMMBENCH_RANK_START"  # fork (from a server that imported torch) or exec (fresh python)
# The Flight Recorder kept on, small, in the ranks we spawn: a failed run leaves each rank's last operations
# for `commbench diagnose` (torch reads the first name; the second is its older spelling).
FLIGHT_RECORDER_SIZE_ENVS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FLIGHT_RECORDER_ENTRIES = 256
# After a rank fails, the others get this long per core's worth of ranks to notice and exit on their own.
FAILURE_GRACE_S = 4.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def failure_grace(nproc: int, cores: int | None = None) -> float:
    """How long the other ranks get to exit on their own after one failed: FAILURE_GRACE_S, times the
    ranks per core when they outnumber the cores. A rank's exit (noticing, telling, interpreter and
    torch teardown) takes CPU time, and on a crowded host every rank waits its turn for a core: 4 s
    named healthy ranks as hung with 32 ranks on 2 cores."""
    cores = cores or len(os.sched_getaffinity(0))
    return round(FAILURE_GRACE_S * max(1.0, nproc / cores), 1)


def rank_start(environ: dict[str, str] | None = None, platform: str = sys.platform) -> str:
    """How ranks start: 'fork' on Linux, 'exec' elsewhere, or what COMMBENCH_RANK_START says."""
    chosen = (os.environ if environ is None else environ).get(RANK_START_ENV, "")
    if chosen in ("fork", "exec"):
        return chosen
    if chosen:
        raise UsageError(f"{RANK_START_ENV}={chosen!r} is not a way to start ranks: fork or exec")
    return "fork" if platform.startswith("linux") else "exec"


def forking_context() -> Any:
    """multiprocessing's forkserver, its server preloading torch and the modules a rank runs.

    The server shares the launcher's terminal. It is started with SIGINT blocked, in this thread, which
    it inherits: its first import (server_signals) ignores SIGINT and lets it through, so a Ctrl-C in the
    seconds it imports torch prints no traceback. Here the signal keeps its handler: a Ctrl-C while the
    server starts is held (or taken by another thread of this process) and raised once it is up, never
    lost, as it was when this process ignored SIGINT itself to have the server inherit that."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    # The server's start would start the resource tracker, whose start unblocks SIGINT: started first.
    multiprocessing.resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C held meanwhile is raised here
    return context


class RankProcess:
    """A forked rank seen through the interface the supervisor uses (subprocess.Popen's): poll() and
    returncode are None while it runs, else its exit status, -N when signal N killed it."""

    def __init__(self, process: Any) -> None:
        self.process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def send_signal(self, signum: int) -> None:
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:  # exited since the last poll
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn_local(argv: list[str], nproc: int, grace_s: float = 10.0, failure_grace_s: float | None = None
                ) -> int:
    """Run ``python -m commbench ARGV`` as ``nproc`` local ranks; their exit status is ours.

    After a signal the ranks get ``grace_s`` to finish their size and stop together; when one rank
    fails the others get ``failure_grace_s`` (default: ``failure_grace``) to notice and exit on their
    own. Then they are stopped (SIGTERM, then SIGKILL), and a rank that had to be stopped after a
    failure is named as hung; a rank killed by a signal is recorded on the board (coordination/board.py) with
    a count of the supervision passes, so the others' messages say which rank died. SIGINT and
    SIGTERM are forwarded (the ranks stop together at the next size, or at once on a second signal);
    ranks run in their own process group so a terminal's Ctrl-C reaches them once, through us, and
    die with us (PR_SET_PDEATHSIG) if we are killed.
    """
    how = rank_start()  # a wrong COMMBENCH_RANK_START is said before anything starts
    port = free_port()
    board = LauncherBoard.create()
    # As torchrun does: N ranks on one host share its cores. Set here, before the fork server starts,
    # so that torch reads it there as a rank started afresh would. PYTHONSAFEPATH is -P for the server
    # (and the ranks): a folder named commbench in the working directory (the checkout, seen from the
    # directory above it) must not hide the installed package from the imports it preloads.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    env = dict(os.environ)
    env[BOARD_ENV] = str(board.path)
    if not any(name in env for name in FLIGHT_RECORDER_SIZE_ENVS):  # the user's choice stands
        env[FLIGHT_RECORDER_SIZE_ENVS[0]] = str(FLIGHT_RECORDER_ENTRIES)
    rank_envs = [{**env, "RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank),
                  "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                  LAUNCHER_ENV: "local"} for rank in range(nproc)]
    try:
        procs = _start_ranks(argv, rank_envs, how)
    except RunError:
        board.remove()
        raise

    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    supervisor = _Supervisor(procs, received, board)
    try:
        return supervisor.wait(grace_s, failure_grace(nproc) if failure_grace_s is None else failure_grace_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        settle_results(board, supervisor.rank0_ending())
        board.remove()


def settle_results(board: LauncherBoard, ending: tuple[str, str]) -> None:
    """Record how the run ended in rank 0's results.json when rank 0 could not (its status still
    "running" once every rank is gone): ``ending`` is the status and the reason."""
    paths = board.results()
    if paths is not None:
        status, error = ending
        finish_abandoned(*paths, status, datetime.now(UTC).isoformat(timespec="seconds"), error)


def _start_ranks(argv: list[str], rank_envs: list[dict[str, str]], how: str) -> list[Any]:
    """The ranks, started as ``how`` says (rank_start): objects with Popen's poll, kill and the like.
    When one cannot be started (the process limit, memory), those already started are stopped, so
    none outlives the launcher, and the run fails naming the rank."""
    procs: list[Any] = []
    context = forking_context() if how == "fork" else None
    try:
        for rank, rank_env in enumerate(rank_envs):
            if context is None:
                # -P: the working directory stays off the import path, so a folder there named commbench
                # (the checkout, seen from the directory above it) cannot hide the installed package.
                procs.append(subprocess.Popen([sys.executable, "-P", "-m", "commbench", *argv], env=rank_env,
                                              process_group=0, preexec_fn=die_with_parent))
                continue
            process = context.Process(target=run_rank, args=(rank, list(argv), rank_env, os.getpid()),
                                      name=f"rank {rank}")
            process.start()
            procs.append(RankProcess(process))
    except (OSError, EOFError) as exc:  # EOFError: the fork server could not fork and closed on us
        for proc in procs:
            proc.kill()
            proc.wait()
        raise RunError(f"could not start local rank {len(procs)} of {len(rank_envs)} ({exc}): the "
                       "process limit (ulimit -u) or memory ran out; no rank was left running") from None
    return procs


class _Supervisor:
    """Watches the spawned ranks until all have exited, deciding the exit status."""

    def __init__(self, procs: list[Any], received: list[int], board: LauncherBoard) -> None:
        self.procs, self.received, self.board = procs, received, board
        self.passes = 0
        self.first_failure: tuple[int, int] | None = None
        self.stopping = False
        self.stopped: list[int] = []  # ranks we had to stop after a failure: they were hung
        self.announced: set[int] = set()
        self.failure_grace_s = 0.0

    def _note_failures(self, codes: list[int | None]) -> None:
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        for rank, code in failed:
            # A death we did not cause: tell the others which rank it was, on the board (a file: no
            # torch to import and no store to reach, which goes with rank 0)
            if code < 0 and not self.stopping and not self.received and rank not in self.announced:
                self.announced.add(rank)
                self.board.record_death(rank, signal.Signals(-code).name)
        if self.first_failure is None and failed and not self.received:
            # Of ranks found failed at once, one killed by a signal is the cause, the others its effect.
            self.first_failure = min(failed, key=lambda item: (item[1] >= 0, item[0]))

    def _stop_remaining(self) -> None:
        for rank, proc in enumerate(self.procs):
            if proc.poll() is None:
                if not self.stopping and not self.received:
                    self.stopped.append(rank)
                (proc.kill if self.stopping else proc.terminate)()
        self.stopping = True

    def wait(self, grace_s: float, failure_grace_s: float) -> int:
        self.failure_grace_s = failure_grace_s
        deadline: float | None = None
        while True:
            codes = [proc.poll() for proc in self.procs]
            had_failure = self.first_failure is not None
            self._note_failures(codes)
            self.passes += 1
            self.board.record_pass(self.passes)  # after this pass's deaths: a failed rank waits for two
            if self.first_failure is not None and not had_failure:
                deadline = time.monotonic() + failure_grace_s
            if all(code is not None for code in codes):
                break
            if self.received and deadline is None:
                deadline = time.monotonic() + grace_s
            if deadline is not None and time.monotonic() > deadline:
                self._stop_remaining()
                deadline = time.monotonic() + 2.0
            time.sleep(0.05)
        return self._status(failure_grace_s)

    def _status(self, failure_grace_s: float) -> int:
        if self.received:
            if all(proc.returncode == 0 for proc in self.procs):
                return 0  # the ranks completed the run before the signal could stop it
            return 128 + self.received[0]
        if self.first_failure is None:
            return 0
        rank, code = self.first_failure
        if self.stopped:
            print(f"commbench: error: {self._hung()}", file=sys.stderr)
        if code < 0:
            print(f"commbench: error: rank {rank} died ({signal.Signals(-code).name})", file=sys.stderr)
            return 1
        return code

    def _hung(self) -> str:
        rank = self.first_failure[0] if self.first_failure else "?"
        return (f"{format_ranks(self.stopped)} did not stop within {self.failure_grace_s:g} s of rank {rank} "
                "failing (hung): stopped by the launcher")

    def rank0_ending(self) -> tuple[str, str]:
        """How the run ended, in rank 0's words had it recorded the end itself: (status, reason)."""
        if self.received:
            return "interrupted", f"stopped by {signal.Signals(self.received[0]).name}"
        code = self.procs[0].returncode
        if 0 in self.stopped:
            return "failed", self._hung()
        if code is not None and code < 0:
            return "failed", f"rank 0 died ({signal.Signals(-code).name})"
        return "failed", f"rank 0 exited with status {code} before recording how the run ended"


def _function_rank(fn: Callable, rank: int, world_size: int, port: int, args: tuple, results: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        import torch

        from commbench.backends.torch_dist import TorchDistBackend
        from commbench.coordination import Rendezvous

        backend = TorchDistBackend.create("gloo", torch.device("cpu"),
                                          Rendezvous(rank, world_size, "127.0.0.1", port), timeout_s=120)
        value = fn(rank, world_size, *args)
        backend.barrier()
        backend.shutdown()
        results.put((rank, None, value))
    except BaseException:
        results.put((rank, traceback.format_exc(), None))


def run_on_local_ranks(fn: Callable, world_size: int, *args: Any, timeout_s: float = 300.0) -> list[Any]:
    """``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined in a gloo group; the
    values they return, by rank. ``fn`` must be importable (a module-level function)."""
    context = forking_context()
    results = context.Queue()
    port = free_port()
    procs = [context.Process(target=_function_rank, args=(fn, rank, world_size, port, args, results))
             for rank in range(world_size)]
    for proc in procs:
        proc.start()
    values: dict[int, Any] = {}
    failure: str | None = None
    try:
        while len(values) < world_size and failure is None:
            rank, error, value = results.get(timeout=timeout_s)
            if error is None:
                values[rank] = value
            else:
                failure = f"rank {rank} failed:\n{error}"
    finally:
        for proc in procs:
            proc.join(timeout=1 if failure else 10)
            if proc.is_alive():
                proc.kill()
    if failure is not None:
        raise RuntimeError(failure)
    return [values[rank] for rank in range(world_size)]
