"""The rendezvous store and everything said through it: where the ranks meet, the connection, and the
check-ins that say who joined, who reached a step, who failed or died.

Collectives cannot say which rank is missing: a rank that never comes just makes the others wait. So
before the process group starts, and before every timed size, each rank checks in through the store
(a TCPStore hosted by rank 0, or by torchrun's agent) and waits with a deadline. When the deadline
passes, the keys say which ranks did not arrive and where each was last seen. None of this runs inside
a timed region.

Invariants:
- Every store operation commbench makes itself is here: ``connect`` opens or reaches the store, every
  request of the check-ins goes through ``Coordinator._call`` and every wait for a key through
  ``Coordinator._wait``. The process group and the control group use the store through torch
  (startup.py), within their own timeouts.
- A rank that cannot reach the store in time says so with the timeout, from Python, before torch's
  store client tries (whose own failure logs C++ frames).
- Every request has a deadline (``Requests``): torch's client waits for the answer to ``add``, ``get``,
  ``check`` and ``wait`` without bound, whatever the store's timeout, when the host's process is alive
  but silent (stopped by SIGSTOP or a debugger, hung, swapped out). A request runs on a thread of the
  rank's own, and one unanswered within ``answer_bound(--timeout)`` makes the store lost for good.

Keys (under a per-attempt prefix):
  joined/<r>, joined, joined/outcome      process-group start ("all", or the ranks missing)
  <phase>/<label>/{n,<slot>}, <phase>/n   before the start: which ranks share a host, or a device
  <phase>/problem, <phase>/checked        the first problem any rank found in a phase
  at/<r>                                  "<step>\\n<label>": the last step rank r checked in at
  step/<n>/<signature>/{n,go,stop}        arrivals at step n, the all-arrived flag, an agreed stop
  failed/<r>, trouble                     a rank's failure; how many ranks reported one

Deaths are not in the store: commbench's own local launcher (running/spawn.py) records them, with its
supervision passes, on a board of files (board.py) that a rank reads beside the store's keys. Under
other launchers a rank that died without a word is named as one that did not report.

A step's key holds its signature (what is measured, with the op counts), so ranks whose sweeps diverge
wait at different keys and the timeout says which rank is where, instead of hanging in a collective.
"""
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from commbench.coordination.board import LauncherBoard
from commbench.coordination.waiting import peer_hung_up
from commbench.core.groups import format_ranks
from commbench.errors import RunError, brief

# Waiting polls the store (a blocking wait would log a warning every time it times out): fast at first,
# since ranks usually arrive within a millisecond of each other, then slowly so as not to load the store.
_FIRST_PAUSE_S = 0.0002
_FAST_PAUSE_S = 0.02
_SLOW_PAUSE_S = 0.2
_FAST_PHASE_S = 1.0
_TROUBLE_CHECK_S = 0.25
_LINGER_S = 2.0  # how long the store's host waits, at most, for the others to finish reading
# The store's own timeout for one request. commbench's waits poll with their own deadline (--timeout),
# so this only bounds a request to a store that stopped answering; a tiny --timeout must not make the
# store's first connection (the host's to itself) time out.
STORE_REQUEST_FLOOR_S = 30.0
# A request is answered within milliseconds by a live host. One unanswered for --timeout, and at least
# this long (a loaded host can pause a process for seconds), means the host stopped answering.
STORE_ANSWER_FLOOR_S = 10.0


def answer_bound(timeout_s: float) -> float:
    """How long a rank waits for the store to answer one request: --timeout, at least
    STORE_ANSWER_FLOOR_S."""
    return max(timeout_s, STORE_ANSWER_FLOOR_S)


def key_prefix(attempt: str) -> str:
    """The prefix of every key of one attempt (torchrun restarts reuse its store)."""
    return f"commbench/{attempt}/"


class StoreLost(RunError):
    """The store stopped answering: whoever hosts it (rank 0, or the agent) is gone."""


class CheckInFailed(RunError):
    """A check-in ended without every rank: the message already says where the missing ranks are."""


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks meet: this rank, the world size and the TCP store at ``master_addr:master_port``
    (hosted by rank 0, or by the launcher: torchrun's agent). ``attempt`` is the launcher's restart count,
    so a restarted job never reads a dead attempt's keys. No master address: MPI starts its own ranks
    and there is no store."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    launcher_hosts_store: bool = False
    attempt: str = "0"
    launcher_board: str = ""  # commbench's local launcher's board of deaths (board.py); "" elsewhere

    @property
    def where(self) -> str:
        host = "the launcher" if self.launcher_hosts_store else "rank 0"
        return f"{self.master_addr}:{self.master_port} (hosted by {host})"

    @property
    def host(self) -> str:
        """Who serves the store, for messages."""
        return "the launcher" if self.launcher_hosts_store else "rank 0"

    @property
    def hosts_store(self) -> bool:
        return self.rank == 0 and not self.launcher_hosts_store


class Unanswered(Exception):
    """A store request got no answer within its bound: the store's host is alive but silent."""


class Requests:
    """Store requests with a deadline each. torch's client blocks in a receive that nothing bounds when
    the host is silent, so each request runs on a daemon thread of its own and the caller waits for it
    at most ``bound_s``. A request left unanswered keeps that thread (it is never joined: a process exits
    with it still blocked), and every later request is Unanswered at once: the client is stuck, and a
    host that did not answer one request in that long is not to be waited for again."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._pending: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stuck: str | None = None  # the request that got no answer

    def call(self, what: str, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` on the requests' thread: its result or its exception; Unanswered after
        ``bound_s``. ``what`` names the request for the message."""
        if self._stuck is not None:
            raise Unanswered(f"no answer to {self._stuck} within {self.bound_s:g} s")
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="commbench-store", daemon=True)
            self._thread.start()
        answered = threading.Event()
        outcome: list[Any] = []
        self._pending.put((function, args, answered, outcome))
        if not answered.wait(self.bound_s):
            self._stuck = what
            raise Unanswered(f"no answer to {what} within {self.bound_s:g} s")
        result, error = outcome
        if error is not None:
            raise error
        return result

    def _serve(self) -> None:
        while True:
            function, args, answered, outcome = self._pending.get()
            try:
                outcome[:] = [function(*args), None]
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
                outcome[:] = [None, exc]
            answered.set()


# --- the connection ---------------------------------------------------------------------------------
def connect(rendezvous: Rendezvous, timeout_s: float) -> Any:
    """The rendezvous TCPStore: rank 0 hosts it unless a launcher (torchrun's agent) already does; the
    others wait until it listens, then connect with a deadline (a host that accepts the connection but
    never answers its handshake is then Unanswered, not a hang). RunError, in words that fit what
    happened, when it cannot be opened or reached within ``timeout_s``.

    The host does not wait for the others here: Coordinator.join does, and names who is missing.
    """
    host, port = rendezvous.master_addr, rendezvous.master_port
    timeout = timedelta(seconds=max(timeout_s, STORE_REQUEST_FLOOR_S))
    requests = Requests(answer_bound(timeout_s))
    try:
        if rendezvous.hosts_store:
            return dist.TCPStore(host, port, rendezvous.world_size, True, timeout, wait_for_workers=False,
                                 multi_tenant=True)
        wait_for_listener(host, port, timeout_s)
        return requests.call("the connection", dist.TCPStore, host, port, rendezvous.world_size, False,
                             timeout)
    except (dist.DistError, OSError, Unanswered) as exc:
        raise RunError(_store_failure(rendezvous, exc, timeout_s)) from None


def wait_for_listener(host: str, port: int, timeout_s: float) -> None:
    """Until something listens at host:port: TimeoutError when nothing does in time, ConnectionError
    when the host name does not resolve. Polled from Python, so a failure logs nothing of torch's."""
    deadline = time.monotonic() + timeout_s
    pause = 0.01
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.05, deadline - time.monotonic())):
                return
        except socket.gaierror as exc:
            raise ConnectionError(f"cannot resolve {host!r} ({exc.strerror})") from None
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing listened there within {timeout_s:g} s (--timeout)") from None
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.2)


def _store_failure(rendezvous: Rendezvous, exc: BaseException, timeout_s: float) -> str:
    """Why the store could not be opened or reached, in the words that fit what happened."""
    detail = brief(exc)
    rank, where = rendezvous.rank, rendezvous.where
    if rendezvous.hosts_store:
        if "EADDRINUSE" in str(exc) or "address already in use" in str(exc).lower():
            why = "the port is taken"
        else:
            why = f"it did not open within {timeout_s:g} s (--timeout)" if "timed out" in detail.lower() \
                else "it did not open"
        return f"rank {rank} could not open the rendezvous store at {where}: {why} ({detail})"
    why = (f"its host did not start within {timeout_s:g} s (--timeout), or MASTER_ADDR/MASTER_PORT point "
           "elsewhere")
    if isinstance(exc, Unanswered):
        return (f"rank {rank} reached the rendezvous store at {where} but got {detail}: "
                f"{rendezvous.host} is stopped, hung or overloaded")
    said = "" if isinstance(exc, TimeoutError) else f" ({detail})"  # ours says no more than the above
    return f"rank {rank} could not reach the rendezvous store at {where}: {why}{said}"


class _Deadline(Exception):
    pass


class _Trouble(Exception):
    pass


class Coordinator:
    """One rank's side of the check-ins, over a store that every rank (and the spawner) can reach."""

    def __init__(self, store: Any, rank: int, world_size: int, timeout_s: float, store_where: str,
                 hosts_store: bool = False, board: LauncherBoard | None = None) -> None:
        self._store = store
        self._requests = Requests(answer_bound(timeout_s))  # each request with its deadline
        self._board = board  # a local launcher's board (deaths, passes); None under other launchers
        self.hosts_store = hosts_store  # this rank's process serves the store: it goes when we exit
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.store_where = store_where  # for messages: "127.0.0.1:29500 (hosted by rank 0)"
        self._step = 0
        self._previous_step_key: str | None = None

    @classmethod
    def meeting(cls, store: Any, rendezvous: Rendezvous, timeout_s: float) -> "Coordinator":
        """This rank's coordinator at ``rendezvous``, over ``store`` (connect's), under the attempt's
        prefix, reading the local launcher's board where there is one."""
        board = LauncherBoard(rendezvous.launcher_board) if rendezvous.launcher_board else None
        return cls(dist.PrefixStore(key_prefix(rendezvous.attempt), store), rendezvous.rank,
                   rendezvous.world_size, timeout_s, rendezvous.where, rendezvous.hosts_store, board)

    # --- store access -------------------------------------------------------------------------
    def _call(self, method: str, *args: Any) -> Any:
        """Every request of the check-ins, and so the one place a request gets its bound: a store that
        stopped answering (its connection closed, or no answer within the bound) is StoreLost, naming
        where it was."""
        try:
            what = " ".join([method, *map(repr, args[:1])])  # "add 'trouble'"
            return self._requests.call(what, getattr(self._store, method), *args)
        except dist.DistError as exc:
            detail = brief(exc)
            raise StoreLost(f"rank {self.rank} lost the rendezvous store at {self.store_where}, so its "
                            f"host is down or unreachable ({detail})") from exc
        except Unanswered as exc:
            raise StoreLost(f"rank {self.rank} got {exc} from the rendezvous store at {self.store_where}: "
                            "its host is stopped, hung or overloaded") from None

    def _has(self, key: str) -> bool:
        return bool(self._call("check", [key]))

    def _text(self, key: str) -> str | None:
        return self._call("get", key).decode(errors="replace") if self._has(key) else None

    def _board_deaths(self) -> dict[int, str]:
        return {} if self._board is None else self._board.deaths()

    def _troubled(self) -> bool:
        """A rank reported a failure, or a launcher a death."""
        return self._call("add", "trouble", 0) > 0 or bool(self._board_deaths())

    def _wait(self, key: str, deadline: float, also: str | None = None) -> str:
        """Until ``key`` (or ``also``) exists, returning which; _Deadline when time runs out, _Trouble
        when a rank failed or died."""
        started = time.monotonic()
        pause = _FIRST_PAUSE_S
        next_trouble_check = started + _TROUBLE_CHECK_S
        while True:
            for candidate in (key, also):
                if candidate is not None and self._has(candidate):
                    return candidate
            now = time.monotonic()
            if now >= deadline:
                raise _Deadline
            if now >= next_trouble_check:
                if self._troubled():
                    raise _Trouble
                next_trouble_check = now + _TROUBLE_CHECK_S
            time.sleep(min(pause, max(deadline - now, 0.0)))
            limit = _FAST_PAUSE_S if now - started < _FAST_PHASE_S else _SLOW_PAUSE_S
            pause = min(pause * 2, limit)

    # --- process-group start ------------------------------------------------------------------
    def join(self) -> None:
        """Return once every rank has joined; RunError naming the ranks that did not, at the deadline.

        One outcome for all: the last rank to join and the first to reach its deadline race to write
        ``joined/outcome`` (compare_set writes it once), so a rank that comes after the deadline learns
        that the start failed instead of going on alone. Every rank then says the same, and the rank
        hosting the store stays until all of them have read it.
        """
        deadline = time.monotonic() + self.timeout_s
        self._call("set", f"joined/{self.rank}", "1")
        if self._call("add", "joined", 1) == self.world_size:
            self._decide("joined/outcome", "all")
        try:
            self._wait("joined/outcome", deadline)
            outcome = self._text("joined/outcome") or ""
        except _Deadline:
            missing = ",".join(str(r) for r in range(self.world_size) if not self._has(f"joined/{r}"))
            # every rank has its key set: the last is between its key and the count
            outcome = self._decide("joined/outcome", f"missing:{missing}" if missing else "all")
        except _Trouble:
            raise CheckInFailed(f"process-group start failed on rank {self.rank}: "
                                f"{self.peer_accounts() or 'another rank failed'}") from None
        if outcome == "all":
            return
        # every rank is to read the verdict, late ones too (a rank still connecting to the store when
        # its host exits loses it mid-handshake); one that never comes costs the host _LINGER_S
        self._linger_until_read("joined/read", self.world_size)
        missing_ranks = [int(r) for r in outcome.removeprefix("missing:").split(",") if r]
        raise CheckInFailed(f"process-group start timed out after {self.timeout_s:g} s on rank "
                            f"{self.rank}: {format_ranks(missing_ranks)} of {self.world_size} did not "
                            f"join (store {self.store_where})")

    def _decide(self, key: str, value: str) -> str:
        """Write ``key`` unless a rank already has; the value it holds now."""
        return self._call("compare_set", key, "", value).decode(errors="replace")

    # --- before the process group: who shares a host or a device ---------------------------------
    def peers_under(self, phase: str, label: str) -> list[int]:
        """Register this rank under ``label`` (a host name, a host's device) and return, once every rank
        has registered in ``phase``, the ranks registered under the same label, in rank order.

        Each rank reads only its own label's keys, so the cost grows with the ranks per label (a host's
        ranks), not with the world."""
        deadline = time.monotonic() + self.timeout_s
        slot = self._call("add", f"{phase}/{label}/n", 1) - 1
        self._call("set", f"{phase}/{label}/{slot}", str(self.rank))
        self._phase_barrier(phase, "n", deadline)
        count = self._call("add", f"{phase}/{label}/n", 0)
        return sorted(int(self._text(f"{phase}/{label}/{index}") or -1) for index in range(count))

    def agree_on_problem(self, phase: str, problem: str | None) -> str | None:
        """Every rank learns the first problem any rank found in ``phase`` (None: none did), so that all
        stop, or all go on, together. A problem names the ranks it concerns itself."""
        deadline = time.monotonic() + self.timeout_s
        if problem is not None and self._call("add", f"{phase}/problems", 1) == 1:
            self._call("set", f"{phase}/problem", problem)
        self._phase_barrier(phase, "checked", deadline)
        agreed = self._text(f"{phase}/problem")
        if agreed is not None:  # every rank stops now: the store's host must not close it before all read
            self._linger_until_read(f"{phase}/read", self.world_size)
        return agreed

    def _linger_until_read(self, counter: str, readers: int | Callable[[], int]) -> None:
        """Count this rank as having read what ends the run; the rank hosting the store then waits
        (_LINGER_S at most) for the other readers, since its exit closes the store under them: a rank
        that loses it mid-request gets torch's C++ frames on its stderr (the GPU check saw it when two
        ranks shared a device; CI when every rank timed out at once). ``readers`` is a count, or how to
        count them again while waiting (ranks that join or fail late)."""
        read = self._call("add", counter, 1)
        if not self.hosts_store:
            return
        count = readers if callable(readers) else lambda: readers
        linger_until = time.monotonic() + _LINGER_S
        while read < count() and time.monotonic() < linger_until:
            time.sleep(0.02)
            read = self._call("add", counter, 0)

    def _phase_barrier(self, phase: str, counter: str, deadline: float) -> None:
        if self._call("add", f"{phase}/{counter}", 1) == self.world_size:
            self._call("set", f"{phase}/{counter}/all", "1")
        try:
            self._wait(f"{phase}/{counter}/all", deadline)
        except _Deadline:
            arrived = self._call("add", f"{phase}/{counter}", 0)
            raise CheckInFailed(f"process-group start timed out after {self.timeout_s:g} s on rank "
                                f"{self.rank}: {self.world_size - arrived} of {self.world_size} ranks did "
                                f"not reach the {phase} check (store {self.store_where})") from None
        except _Trouble:
            raise CheckInFailed(f"process-group start failed on rank {self.rank}: "
                                f"{self.peer_accounts() or 'another rank failed'}") from None

    def trouble(self) -> str | None:
        """What is known of a failed or dead rank once any has been reported, else None (one store call:
        waits on collectives ask this now and then). A store that stopped answering is itself the
        trouble: its host (rank 0, whose process serves it) is gone or silent."""
        try:
            if not self._troubled():
                return None
            return self.peer_accounts() or "another rank failed"
        except StoreLost as exc:
            return str(exc)

    # --- steps --------------------------------------------------------------------------------
    def check_in(self, label: str, signature: str, stop_signal: int = 0) -> int:
        """Arrive at the next step and wait for every rank; return the stop signal any rank asked for
        (0: go on). A rank asks by passing its signal here, before it arrives, so every rank reads
        the same answer once all have arrived. A lost store is said with the step's label."""
        try:
            return self._check_in(label, signature, stop_signal)
        except StoreLost as exc:
            raise StoreLost(f"{label}: {exc}") from None

    def _check_in(self, label: str, signature: str, stop_signal: int) -> int:
        self._step += 1
        step_key = f"step/{self._step}/{signature}"
        deadline = time.monotonic() + self.timeout_s
        self._call("set", f"at/{self.rank}", f"{self._step}\n{signature}\n{label}")
        if stop_signal:
            self._call("set", f"{step_key}/stop", str(stop_signal))
        if self._call("add", f"{step_key}/n", 1) == self.world_size:
            self._call("set", f"{step_key}/go", "1")
            if self._previous_step_key is not None:
                # Every rank has arrived here, so every rank is done reading the previous step's keys.
                for suffix in ("n", "go", "stop"):
                    self._call("delete_key", f"{self._previous_step_key}/{suffix}")
        try:
            self._wait(f"{step_key}/go", deadline)
        except _Deadline:
            missing = self._missing_message(label, signature)
            if missing:
                raise CheckInFailed(missing) from None
            # Every rank's at/ says it reached this step: one stopped between saying so and counting
            # itself in (or, the last, before setting go), so it did arrive. The step goes ahead; if
            # that rank stays stopped, the collective after it times out and names it as silent.
            self._call("set", f"{step_key}/go", "1")
        except _Trouble:
            raise CheckInFailed(f"{label}: stopped on rank {self.rank} before the start: "
                                f"{self.peer_accounts() or 'another rank failed'}") from None
        self._previous_step_key = step_key
        stop = self._text(f"{step_key}/stop")
        return int(stop) if stop else 0

    def _missing_message(self, label: str, signature: str) -> str:
        """Which ranks did not arrive at this step and where each was seen ('' when every rank's at/
        shows this step and signature: none is missing)."""
        absent: list[int] = []
        dead: list[str] = []
        behind: dict[str, list[int]] = {}
        elsewhere: dict[str, list[int]] = {}
        never: list[int] = []
        board_deaths = self._board_deaths()
        for rank in range(self.world_size):
            seen = self._text(f"at/{rank}")
            step_text, their_signature, where = (seen or "0\n\n").split("\n", 2)
            if int(step_text) == self._step and their_signature == signature:
                continue
            absent.append(rank)
            died = board_deaths.get(rank)
            if died:
                dead.append(f"rank {rank} died ({died})")
            elif seen is None:
                never.append(rank)
            elif int(step_text) < self._step:
                behind.setdefault(where, []).append(rank)
            elif where != label:  # the same step, something else: the sweeps diverged
                elsewhere.setdefault(where, []).append(rank)
            else:  # the same collective and size, other settings: the ranks were started differently
                elsewhere.setdefault(f"{their_signature!r} (here {signature!r})", []).append(rank)
        if not absent:
            return ""
        parts = [*dead]
        parts += [f"{format_ranks(ranks)} still in {where}" for where, ranks in behind.items()]
        parts += [f"{format_ranks(ranks)} at {where} instead" for where, ranks in elsewhere.items()]
        if never:
            parts.append(f"{format_ranks(never)} never checked in")
        return (f"{label}: timed out after {self.timeout_s:g} s on rank {self.rank}: {format_ranks(absent)} "
                f"did not arrive ({'; '.join(parts)})")

    # --- failures -----------------------------------------------------------------------------
    def report_failure(self, detail: str) -> None:
        """Tell the other ranks this one failed (they stop waiting at their next check-in)."""
        self._call("set", f"failed/{self.rank}", detail[:400])
        self._call("add", "trouble", 1)

    def await_accounts(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` for a launcher to report a death, or for every rank to have failed.
        Waiting for more would be waiting on ranks that are themselves blocked on the dead one.

        Under commbench's local launcher the wait lasts, past the grace, until two of its supervision
        passes have finished since this rank's report (board.py), so a local rank whose death
        caused this failure is named however loaded the host; --timeout bounds it, should the launcher
        itself stall."""
        now = time.monotonic()
        grace_ends = now + grace_s
        verdict_by = now + max(grace_s, self.timeout_s)
        passes_then = None if self._board is None else self._board.passes()
        while True:
            if self._call("add", "trouble", 0) >= self.world_size or self._board_deaths():
                return
            now = time.monotonic()
            if now >= grace_ends and (passes_then is None or now >= verdict_by
                                      or self._launcher_passes() >= passes_then + 2):
                return
            time.sleep(0.05)

    def account_for_failure(self, detail: str, grace_s: float) -> str:
        """After this rank failed: tell the others, wait up to ``grace_s`` for their accounts
        (await_accounts), say what became of them (peer_accounts), then leave. The others' failures are
        left out (each failed rank says its own) unless ``detail`` is a peer having gone ("Connection
        closed by peer"): that names no cause, and the peer's account, reported before it went, does."""
        self.report_failure(detail)
        self.await_accounts(grace_s)
        accounts = self.peer_accounts() if peer_hung_up(detail) else ""
        accounts = accounts or self.peer_accounts(include_failed=False)  # or who died, who said nothing
        self.leave()
        return accounts

    def leave(self) -> None:
        """This rank is done with the store after a failure (it has read the others' accounts). The
        rank hosting the store stays until every rank not reported dead has left too, _LINGER_S at
        most (a hung rank never leaves): the others fail in turn once they see this rank's failure."""
        def alive() -> int:  # the ranks the local launcher has not seen die
            return self.world_size - len(self._board_deaths())

        self._linger_until_read("left", alive)

    def _launcher_passes(self) -> int:
        passes = None if self._board is None else self._board.passes()
        return passes if passes is not None else 1 << 62  # the board is gone: so is the launcher

    def _first_cause(self, failed: list[int]) -> tuple[int, str]:
        """The first of ``failed`` whose failure is its own, not a peer having gone (that peer's is the
        cause), and its message; else the first. Messages are read from the store until one is found."""
        said = []
        for rank in failed:
            said.append(self._text(f"failed/{rank}") or "")
            if not peer_hung_up(said[-1]):
                return rank, said[-1]
        return failed[0], said[0]

    def peer_accounts(self, include_failed: bool = True) -> str:
        """What is known of the other ranks: which died (the launcher's reason), else which failed
        (with the message of the first that failed on its own) and which said nothing."""
        dead, failed, silent = [], [], []
        board_deaths = self._board_deaths()
        for rank in range(self.world_size):
            if rank == self.rank:
                continue
            died = board_deaths.get(rank)
            if died:
                dead.append(f"rank {rank} died ({died})")
            elif self._has(f"failed/{rank}"):
                failed.append(rank)
            else:
                silent.append(rank)
        if dead:
            return "; ".join(dead)
        parts = []
        if failed and include_failed:
            cause, said = self._first_cause(failed)
            parts.append(f"{format_ranks(failed)} failed (rank {cause}: {said})")
        if silent and (failed or not include_failed):
            parts.append(f"{format_ranks(silent)} did not report (hung, or died unseen)")
        return "; ".join(parts)

