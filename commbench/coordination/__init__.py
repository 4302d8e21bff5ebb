"""How the ranks of a run find each other, start together, wait for each other with a deadline and learn
what became of one that failed or died: the rank-coordination package. Its modules import each other;
the rest of commbench imports only the names below.

- ``startup``: one rank's start (``StartUp``: meet, the device phases, the process group and its
  control side group; ``Started``: what a started rank communicates through besides the measured
  communicator), and tearing NCCL's communicators down.
- ``store``: the rendezvous store and everything said through it: where the ranks meet
  (``Rendezvous``), the connection, and the check-ins (``Coordinator``: joins, the phases before the
  process group, each step's check-in, failures and accounts). Every store operation commbench makes
  itself is there, so that is where a store operation gets its deadline.
- ``waiting``: waits for collectives bounded by --timeout and ended early by a peer's failure
  (``Waiter``), never inside a call that cannot be interrupted.
- ``control``: control traffic (barriers, gathers, broadcasts) on a gloo backend of its own
  (``ControlGroup``), never on the communicator being measured.
- ``board``: what commbench's own spawning launcher tells its local ranks (``LauncherBoard``): deaths
  and supervision passes, in files.

The launcher's side imports no torch (a launcher that only spawns ranks starts in well under a second):
``board`` and ``waiting`` are imported with the package, the names of the ranks' side (``startup``,
``store``, ``control``: torch) at their first use.
"""

import importlib
from typing import TYPE_CHECKING, Any

from commbench.coordination.board import BOARD_ENV, LauncherBoard
from commbench.coordination.waiting import (
    HostBlocking,
    PeerFailed,
    PointToPoint,
    Waiter,
    WaitExpired,
    peer_hung_up,
)

if TYPE_CHECKING:
    from commbench.coordination.control import ControlGroup
    from commbench.coordination.startup import Started, StartUp, abort_communicators, communicator_timeout
    from commbench.coordination.store import CheckInFailed, Coordinator, Rendezvous, StoreLost

# The ranks' side, by the module that holds each name: these modules import torch.
_RANKS_SIDE = {
    "ControlGroup": "control",
    "Started": "startup",
    "StartUp": "startup",
    "abort_communicators": "startup",
    "communicator_timeout": "startup",
    "CheckInFailed": "store",
    "Coordinator": "store",
    "Rendezvous": "store",
    "StoreLost": "store",
}

__all__ = [
    "BOARD_ENV",
    "CheckInFailed",
    "ControlGroup",
    "Coordinator",
    "HostBlocking",
    "LauncherBoard",
    "PeerFailed",
    "PointToPoint",
    "Rendezvous",
    "StartUp",
    "Started",
    "StoreLost",
    "WaitExpired",
    "Waiter",
    "abort_communicators",
    "communicator_timeout",
    "peer_hung_up",
]


def __getattr__(name: str) -> Any:
    """A name of the ranks' side, imported at its first use (PEP 562) and kept in the package."""
    module = _RANKS_SIDE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
