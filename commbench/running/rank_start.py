"""How a spawned local rank starts: forked from the launcher's fork server (running/spawn.py), which
imported PRELOAD once, then given its rank's environment and the command line, as if it had been started
as ``python -P -m commbench ARGV`` with those variables.

This module imports no torch itself: the launcher imports it to name the target, and only the server
imports what PRELOAD lists.
"""

import ctypes
import importlib
import os
import select
import signal
import sys
import threading
import time

# What the fork server imports once for every rank it forks: first how it takes SIGINT (server_signals),
# then torch (seconds of CPU) and the modules every rank runs. A module that fails to import there is
# imported by each rank instead, as before.
ENTRY, ENTRY_MAIN = "commbench.__main__", "commbench.cli.main"  # what `python -m commbench` runs
PRELOAD = ["commbench.running.server_signals", "torch", "torch.distributed", ENTRY_MAIN,
           "commbench.running.rank"]

_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15


def _prctl(option: int, value: int | bytes) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no such call, and nothing it would add
        pass


def die_with_parent() -> None:
    """In a rank started as a fresh interpreter: SIGTERM if the spawner dies (Linux)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_with(launcher: int) -> None:
    """SIGTERM to this process when ``launcher`` dies, as a rank it started itself got by
    PR_SET_PDEATHSIG: a forked process's parent is the fork server, which outlives the launcher until
    its children exit. A thread waits on the launcher's pidfd (Linux 5.3), else looks every half second."""
    try:
        handle: int | None = os.pidfd_open(launcher)
    except ProcessLookupError:  # gone already
        os.kill(os.getpid(), signal.SIGTERM)
        return
    except (AttributeError, OSError):
        handle = None

    def watch() -> None:
        if handle is not None:
            select.select([handle], [], [])
        else:
            while os.getppid() != 1 and _running(launcher):
                time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="commbench-launcher-watch", daemon=True).start()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_rank(rank: int, argv: list[str], environ: dict[str, str], launcher: int) -> None:
    """A forked rank: its own process group (a terminal's Ctrl-C reaches it once, through the
    launcher), SIGTERM when the launcher or the fork server dies (no rank is ever orphaned), its name
    in ps and top (commbench-r3), its environment, then commbench's main."""
    os.setpgid(0, 0)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(_PR_SET_NAME, f"commbench-r{rank}".encode()[:15])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(environ)
    stop_with(launcher)
    # The program a rank runs is named, as `python -m commbench` names it to a fresh interpreter: the
    # command line sits above this layer (docs/architecture.md), which starts it without depending on it.
    try:
        entry = importlib.import_module(ENTRY)
        sys.argv = [str(entry.__file__), *argv]
        status = importlib.import_module(ENTRY_MAIN).main(argv)
    except KeyboardInterrupt:  # a signal forwarded before main could take it: no multiprocessing traceback
        status = 128 + signal.SIGINT
    sys.exit(status)
