"""--impl torchcomms through the real sweep on gloo ranks, with a stand-in torchcomms package
(tests/torchcomms_stub: a gloo communicator that finds its rank and meets its peers as torchcomms does):
every sweep of a process makes a communicator under a name and store keys of its own, torchcomms learns
its rank and size from the process group whatever launched the ranks, its communicators get the run's
timeout with NCCL's watchdog margin, and out of place no all_reduce is issued while an earlier one still
writes the output it copies into."""

import os
import sys
from datetime import timedelta

import pytest
import torch

from commbench.backends.paths import own_timeout, torchcomms_place
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import resolve, run_config
from commbench.running.runner import run_sweep, sweep_failure
from commbench.writers.output import NullOutput
from tests.dist_helpers import ROOT, run_ranks

pytestmark = pytest.mark.processes
STUB = str(ROOT / "tests" / "torchcomms_stub")


def _sweep(backend: TorchDistBackend, placement: str, modes: list[str], fails: bool = False) -> list:
    config = resolve(run_config(collectives=["all_reduce"], sizes=[4096], iters=6, warmup=1, check=True,
                                impls=["torchcomms"], backend="gloo", device="cpu", placements=[placement],
                                modes=modes))
    rows = run_sweep(config, backend, NullOutput())
    assert fails or sweep_failure(rows) is None, [row.error for row in rows]
    return rows


def _torchcomms_sweeps(rank: int, world_size: int) -> dict:
    sys.path.insert(0, STUB)
    import torchcomms

    from commbench.backends.paths import COMMUNICATOR_KINDS, PathState
    from commbench.coordination import Started, Waiter
    from commbench.core.paths import PathSpec

    backend = TorchDistBackend("gloo", torch.device("cpu"), Started(None, None, Waiter(30.0)))  # --timeout 30
    # no launcher variable torchcomms knows is set here (as under srun, flux, PMIx or MVAPICH)
    unplaced = _sweep(backend, "out-of-place", ["sync"], fails=True)[0].error
    torchcomms_place(os.environ, rank, world_size)  # as every rank does once its process group is up
    statuses = [row.impl_status for row in _sweep(backend, "out-of-place", ["sync", "async"])]
    out_of_place = list(torchcomms.IN_FLIGHT)
    torchcomms.IN_FLIGHT.clear()
    statuses += [row.impl_status for row in _sweep(backend, "in-place", ["async"])]  # a second sweep
    # a CUDA rank's communicator, as far as it is made without a device
    state = PathState(PathSpec(communicator="torchcomms"), None, torch.device("cuda", 0), None)
    COMMUNICATOR_KINDS["torchcomms"].start(state, [[0, 1]], 30.0)
    return {"statuses": statuses, "created": torchcomms.CREATED, "out of place": out_of_place,
            "in place": list(torchcomms.IN_FLIGHT), "unplaced": unplaced}


def test_torchcomms_sweeps_each_get_their_own_communicator_place_and_timeout():
    first, second = run_ranks(_torchcomms_sweeps, 2)
    assert first["unplaced"].startswith("set-up failed: ") and "Unable to determine rank and size" in \
        first["unplaced"]
    assert set(first["statuses"]) == {"ran"}
    for rank, found in enumerate((first, second)):
        created = found["created"]
        # the start that could not find its place was the first, commbench-0
        assert [made["name"] for made in created] == ["commbench-1", "commbench-2", "commbench-3"]
        assert {(made["rank"], made["size"]) for made in created} == {(rank, 2)}  # from the process group
        assert [(made["backend"], made["timeout"]) for made in created] == [
            ("gloo", timedelta(seconds=30)), ("gloo", timedelta(seconds=30)),
            ("nccl", timedelta(seconds=90))]  # NCCL: 60 s of margin
    ids = [[made["unique_id"] for made in found["created"]] for found in (first, second)]
    assert ids[0] == ids[1] and len(set(ids[0])) == 3  # every rank met the same communicator, a new one each
    # out of place every all_reduce waited for the ones before (they write the output it copies into);
    # in place, async ops were in flight together, so the count would show it
    assert first["out of place"] and set(first["out of place"]) == {0}
    assert max(first["in place"]) > 0


def test_communicators_an_implementation_makes_get_the_watchdog_margin_on_nccl():
    # a minute past the run's timeout: commbench's own waits end first and record the failure
    assert own_timeout("nccl", 30.0) == {"timeout": timedelta(seconds=90.0)}
    assert own_timeout("gloo", 30.0) == {"timeout": timedelta(seconds=30.0)}
    assert own_timeout("nccl", None) == {}
