"""Waiting for collectives against a deadline, never inside a call that cannot be interrupted.

A rank that waits in ``cudaDeviceSynchronize`` (or in a blocking gloo wait) for a peer that died or hung
stays there until the communicator's watchdog kills the process: no signal handler runs, the results
stay "running". So every wait here returns to Python often:

- on CUDA, the host polls (a completion event's ``query()``, a handle's ``is_completed()``): busily at
  first, so a short op's completion is seen at once, then with pauses of at most ``POLL_PAUSE_MAX_S``;
- on CPU, the handle's own blocking wait is called in slices of ``SLICE_S`` (a timed-out slice leaves
  the collective running: gloo raises "Operation timed out!" and the handle stays incomplete). A gloo
  send or receive is the exception: a timed-out wait fails it for good, so it is waited on once, for
  the whole deadline (``whole``).

Between polls or slices, Python's signal handlers run (a second Ctrl-C stops the rank at once), and at
most every ``TROUBLE_EVERY_S`` the rendezvous store is asked whether another rank failed or died: then
the wait ends with ``PeerFailed``. When the deadline (``--timeout``) passes it ends with
``WaitExpired``; the caller names the collective and size (errors.failures_named), the run records its
rows and status, and launch aborts the communicator before the process exits.
"""

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

POLL_SPIN_S = 0.02  # busy polling first: a completion this soon is seen within microseconds
POLL_PAUSE_MAX_S = 0.001  # then pauses growing up to this
SLICE_S = 0.1  # CPU: one blocking wait at a time, at most this long
TROUBLE_EVERY_S = 0.25  # how often a long wait asks the store whether a peer failed
SLICE_TIMED_OUT = "Operation timed out"  # what c10d's Work.wait(timeout) raises when the slice runs out
# What gloo raises when its own timeout, the group's (--timeout, given when the group was made), runs out
# inside an op: "Timed out waiting 1ms for recv operation to complete". The deadline passed.
GLOO_TIMED_OUT = "Timed out waiting"
# What an op raises when a peer's process closed its connections: it exited or aborted, most often
# after failing itself ("Connection closed by peer [127.0.0.1]:3739", "Connection reset by peer").
PEER_HUNG_UP = ("closed by peer", "reset by peer", "Broken pipe")


def peer_hung_up(detail: str) -> bool:
    """Whether a failure is a peer having gone: its cause is that peer's, and the peer's own account
    (what it reported on the store before going) says more than this rank's error can."""
    return any(words in detail for words in PEER_HUNG_UP)


class WaitExpired(Exception):
    """A collective did not complete within the deadline: a peer is hung or dead."""


class PeerFailed(Exception):
    """Another rank failed or died while this one waited for a collective."""


class Waiter:
    """Waits bounded by ``timeout_s`` (None: no deadline, as for a backend built by hand in a test) that
    stop early when ``trouble()`` reports a failed peer (None: nothing to ask)."""

    def __init__(self, timeout_s: float | None = None, trouble: Callable[[], str | None] | None = None
                 ) -> None:
        self.timeout_s = timeout_s
        self._trouble = trouble

    def _deadline(self) -> float:
        return float("inf") if self.timeout_s is None else time.monotonic() + self.timeout_s

    def _expired(self, detail: str = "") -> WaitExpired:
        return WaitExpired(f"did not complete within {self.timeout_s:g} s (--timeout): a peer is hung, "
                           f"dead or still in an earlier collective{detail}")

    def _check(self, deadline: float, next_trouble: float) -> float:
        """Raise when the deadline passed or a peer failed; return when to ask the store next."""
        now = time.monotonic()
        if now >= deadline:
            raise self._expired()
        if self._trouble is not None and now >= next_trouble:
            found = self._trouble()
            if found is not None:
                raise PeerFailed(f"stopped waiting: {found}")
            return now + TROUBLE_EVERY_S
        return next_trouble

    def until(self, done: Callable[[], bool]) -> None:
        """Poll ``done()`` until it is true."""
        if done():
            return
        deadline = self._deadline()
        started = time.monotonic()
        next_trouble = started + TROUBLE_EVERY_S
        pause = 1e-5
        while not done():
            next_trouble = self._check(deadline, next_trouble)
            if time.monotonic() - started >= POLL_SPIN_S:
                time.sleep(pause)
                pause = min(pause * 2, POLL_PAUSE_MAX_S)

    def work(self, work: Any) -> None:
        """Wait for a handle whose own wait blocks the host (gloo, mpi, ucc on CPU), in slices."""
        deadline = self._deadline()
        next_trouble = time.monotonic() + TROUBLE_EVERY_S
        while True:
            slice_s = max(0.002, min(SLICE_S, deadline - time.monotonic()))
            started = time.monotonic()
            try:
                work.wait(timeout=timedelta(seconds=slice_s))
                return
            except RuntimeError as exc:
                # c10d's own words for a slice that ran out; gloo's for the group's timeout (the
                # deadline); anything else is the collective's failure (a composite handle, such as
                # gloo's flat reduce-scatter, may never say it completed)
                if GLOO_TIMED_OUT in str(exc) and self.timeout_s is not None:
                    raise self._expired(f" ({exc})") from exc
                if SLICE_TIMED_OUT not in str(exc):
                    raise
                if work.is_completed():
                    # It completed after the slice ran out and before we asked (on a loaded host that
                    # moment lasts until this process gets a core back): its own outcome, at once.
                    work.wait(timeout=timedelta(seconds=slice_s))
                    return
            if time.monotonic() - started < slice_s / 2:
                time.sleep(0.001)  # a handle that returned at once must not make this loop spin
            next_trouble = self._check(deadline, next_trouble)

    def whole(self, work: Any) -> None:
        """Wait for a handle in one blocking wait bounded by the whole deadline (gloo's point-to-point
        handles, which a timed-out wait would fail)."""
        if self.timeout_s is None:
            work.wait()
        else:
            work.wait(timeout=timedelta(seconds=max(0.002, self.timeout_s)))


class PointToPoint:
    """A send or receive: on gloo a timed-out wait fails it for good, so it is waited on in one piece."""

    def __init__(self, work: Any) -> None:
        self.work = work


class HostBlocking:
    """A handle whose ``wait()`` blocks the host until the op is done (NCCL's barrier): polled first."""

    def __init__(self, work: Any) -> None:
        self._work = work

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def wait(self) -> Any:
        return self._work.wait()
