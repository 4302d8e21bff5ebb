"""Hardware for every host of a run: one rank per host probes, and all ranks exchange the records.

Invariants: called by every rank at start-up, after the ranks' host names are known; the rank that
probes a host is the lowest rank reporting that host name (no launcher's local rank is trusted, so
faked names on one machine work as on a cluster); every rank returns the same mapping, keyed by the
host names the ranks report.
"""

from collections.abc import Callable
from typing import Any

from commbench.backends.base import Backend
from commbench.provenance.hardware import probe_host


def probing_ranks(hostnames: list[str]) -> dict[str, int]:
    """Host name -> the rank that probes it."""
    first: dict[str, int] = {}
    for rank, host in enumerate(hostnames):
        first.setdefault(host, rank)
    return first


def hardware_by_host(backend: Backend, hostnames: list[str],
                     probe: Callable[[], dict[str, Any]] = probe_host) -> dict[str, dict[str, Any]]:
    """Every host's record, on every rank (one all_gather_object of the probing ranks' records)."""
    mine = probing_ranks(hostnames).get(hostnames[backend.rank]) == backend.rank
    gathered = backend.all_gather_object(probe() if mine else None)
    return {hostnames[rank]: record for rank, record in enumerate(gathered) if record is not None}
