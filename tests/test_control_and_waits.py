"""The CUDA path's process-group behaviour, on real gloo groups: control traffic apart from the measured
communicator (seen through torch's Flight Recorder), waits that end at their deadline or when a peer
fails, ordered async out-of-place all-reduces, sub-communicator timeouts, per-attempt store keys,
CUDA-graph refusals and warm-up by time."""

import datetime
import io
import multiprocessing
import pickle
import subprocess
import sys
import time
import traceback
from collections import Counter

import pytest
import torch
import torch.distributed as dist

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import RunConfig
from commbench.coordination import (
    Coordinator,
    PeerFailed,
    Rendezvous,
    Started,
    Waiter,
    WaitExpired,
    peer_hung_up,
)
from commbench.running.runner import run_sweep
from commbench.running.spawn import free_port
from commbench.writers.output import NullOutput
from tests.dist_helpers import run_ranks

pytestmark = pytest.mark.processes
CPU = torch.device("cpu")


class _PlainData(pickle.Unpickler):
    """The Flight Recorder's dump holds dicts, lists and numbers only: refuse anything else."""

    def find_class(self, module: str, name: str) -> type:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _flight_recorder_entries() -> list[dict]:
    return _PlainData(io.BytesIO(torch._C._distributed_c10d._dump_fr_trace())).load()["entries"]


def _recorded_sweep(rank: int, world_size: int) -> tuple[dict, set]:
    # the control group as launch makes it: a gloo backend of its own over the store
    store = dist.PrefixStore("test-control/", dist.distributed_c10d._get_default_store())
    control = dist.ProcessGroupGloo(store, rank, world_size, datetime.timedelta(seconds=60))
    backend = TorchDistBackend("gloo", CPU, Started(None, control, Waiter(60.0)))
    config = RunConfig(collectives=["all_reduce", "all_gather_base"], sizes=[1024, 4096],
                       modes=["sync", "async"], iters=3, warmup=2, check=True)
    run_sweep(config, backend, NullOutput())
    measured = dist.distributed_c10d._get_process_group_name(dist.group.WORLD)
    entries = _flight_recorder_entries()
    on_measured = Counter((entry["profiling_name"], str(entry["input_sizes"])) for entry in entries
                          if entry["process_group"][0] == measured)
    elsewhere = {entry["profiling_name"] for entry in entries if entry["process_group"][0] != measured}
    return dict(on_measured), elsewhere


def test_the_measured_communicator_carries_only_measured_work(monkeypatch):
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "20000")  # the Flight Recorder records every collective
    for on_measured, on_control in run_ranks(_recorded_sweep, 2):
        # per collective, size and mode: the probe, 2 warm-ups, 3 timed ops and the checked op
        per_point = 1 + 2 + 3 + 1
        assert on_measured == {
            ("gloo:all_reduce", "[[256]]"): 2 * per_point, ("gloo:all_reduce", "[[1024]]"): 2 * per_point,
            ("gloo:all_gather", "[[128]]"): 2 * per_point, ("gloo:all_gather", "[[512]]"): 2 * per_point}
        # agreement, gathered samples, check results and the regions' barriers went elsewhere
        assert {"gloo:all_gather", "gloo:barrier"} <= on_control, on_control


def _stalled_and_failed_peers(rank: int, world_size: int, port: int) -> list[str]:
    store = dist.TCPStore("127.0.0.1", port, world_size, rank == 0, wait_for_workers=False)
    coordinator = Coordinator(dist.PrefixStore("test/", store), rank, world_size, 30.0, "here")
    # a peer that stalls inside the collective: the wait ends at its 1 s deadline, not when it arrives
    stalled = _all_reduce_unless(Waiter(1.0, coordinator.trouble), rank == 1 and (lambda: time.sleep(4.0)))
    # a peer that fails on the host while this rank waits: the wait ends with its account (the peer then
    # joins, so that the collective ends before the group is destroyed)
    failed = _all_reduce_unless(Waiter(60.0, coordinator.trouble), rank == 1 and (
        lambda: (coordinator.report_failure("rank 1 gave up"), time.sleep(3.0))))
    # a collective that fails by itself (gloo's flat reduce-scatter never calls such a handle complete)
    backend = TorchDistBackend("gloo", CPU, Started(None, None, Waiter(60.0)))
    integers = torch.ones(4, dtype=torch.int32)
    try:
        backend.reduce_scatter_base(CollectiveArgs(input=integers, output=integers[:2], op="avg"))
        own_error = "completed"
    except RuntimeError as exc:
        own_error = str(exc)
    return [stalled, failed, own_error]


def _all_reduce_unless(waiter: Waiter, first: object) -> str:
    """One all_reduce waited on by ``waiter`` after ``first()`` (when callable): 'completed', or why the
    wait ended."""
    backend = TorchDistBackend("gloo", CPU, Started(None, None, waiter))
    if callable(first):
        first()
    buffer = torch.ones(4)
    try:
        backend.all_reduce(CollectiveArgs(input=buffer, output=buffer))
        outcome = "completed"
    except (WaitExpired, PeerFailed) as exc:
        outcome = str(exc)
    dist.barrier()
    return outcome


class _CompletesAsItsSliceRunsOut:
    """A handle whose first sliced wait runs out just as the op completes: c10d's Work.wait(timeout)
    raises "Operation timed out!", and is_completed() is already true when asked (32 ranks on 2 cores
    hit this every run). ``then`` is what its next wait does: return, or raise the op's own failure."""

    def __init__(self, then: Exception | None = None) -> None:
        self.waits = 0
        self.then = then

    def wait(self, timeout=None) -> bool:
        self.waits += 1
        if self.waits == 1:
            raise RuntimeError("Operation timed out!")
        if self.then is not None:
            raise self.then
        return True

    def is_completed(self) -> bool:
        return self.waits >= 1


def test_an_op_that_completes_as_its_slice_runs_out_is_no_failure():
    work = _CompletesAsItsSliceRunsOut()
    Waiter(60.0).work(work)
    assert work.waits == 2
    failing = _CompletesAsItsSliceRunsOut(RuntimeError("Connection reset by peer"))
    with pytest.raises(RuntimeError, match="Connection reset by peer"):  # its own failure, not the slice's
        Waiter(60.0).work(failing)


def test_waits_end_at_their_deadline_when_a_peer_fails_or_with_the_collectives_own_error():
    (stalled, failed, own_error), (late, failing, _) = run_ranks(_stalled_and_failed_peers, 2, free_port())
    assert stalled.startswith("did not complete within 1 s (--timeout): a peer is hung")
    assert "stopped waiting" in failed and "rank 1 failed (rank 1: rank 1 gave up)" in failed
    assert (late, failing) == ("completed", "completed")
    assert "can't be cast" in own_error  # gloo's words at once, not the deadline 60 s later


PEER_EXITS = """
import datetime, os, sys, time
import torch.distributed as dist
rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}",
                        timeout=datetime.timedelta(seconds=60))
dist.barrier()
if rank == 1:
    os._exit(1)
time.sleep(0.5)
try:
    dist.all_gather_object([None, None], "host name")
except Exception as exc:
    print(exc)
"""


def test_a_peer_that_went_is_told_from_the_errors_gloo_raises():
    # gloo's own words when the other process exits during a collective: a peer having gone, whose
    # cause is in its own account (Coordinator.account_for_failure then gives it)
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", PEER_EXITS, str(rank), port], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL) for rank in (1, 0)]
    said = procs[1].communicate(timeout=120)[0]
    procs[0].wait(timeout=30)
    assert said.strip() and peer_hung_up(said), said
    assert not peer_hung_up("did not complete within 0.001 s (--timeout): a peer is hung, dead or ...")


def _copy_after_the_op_in_flight(rank: int, world_size: int) -> bool:
    backend = TorchDistBackend("gloo", CPU)
    args = CollectiveArgs(input=torch.full((4,), float(rank + 1)), output=torch.zeros(4), async_op=True)
    backend.barrier()
    if rank == 1:
        time.sleep(1.0)  # rank 0's first op stays in flight until rank 1 issues its own
    backend.all_reduce(args)
    first = args.wait_list[0]
    backend.all_reduce(args)  # out of place: copies its input into the output the first op writes
    copied_after_first = first.is_completed()
    backend.complete(args)
    return copied_after_first and args.output.tolist() == [3.0] * 4


def test_async_out_of_place_all_reduce_copies_only_after_the_op_in_flight():
    assert run_ranks(_copy_after_the_op_in_flight, 2) == [True, True]


def _subgroup_timeouts(rank: int, world_size: int) -> float:
    backend = TorchDistBackend("gloo", CPU, Started(None, None, Waiter(7.0)))
    group = backend.new_groups([[0, 1]])
    return group._get_backend(CPU).options._timeout.total_seconds()


def test_sub_communicators_take_the_runs_timeout():
    assert run_ranks(_subgroup_timeouts, 2) == [7.0, 7.0]  # not torch's default of 30 minutes


def _graph_sweep(rank: int, world_size: int) -> list[tuple[str, str]]:
    backend = TorchDistBackend("gloo", CPU)
    config = RunConfig(collectives=["barrier"], sizes=[1024], iters=2, warmup=1, cuda_graph=2)
    return [(row.collective, row.error) for row in run_sweep(config, backend, NullOutput())]


def test_a_host_blocking_collective_is_an_error_row_under_cuda_graphs():
    for rows in run_ranks(_graph_sweep, 2):
        assert rows == [("barrier", "barrier blocks the host until every rank arrives: a CUDA graph "
                                    "cannot hold it")]


class _CountingBackend(TorchDistBackend):
    def __init__(self) -> None:
        super().__init__("gloo", CPU)
        self.issued = 0

    def all_reduce(self, args: CollectiveArgs) -> None:
        self.issued += 1
        super().all_reduce(args)


def _warm_ups(rank: int, world_size: int) -> tuple[int, int]:
    found = []
    for config in (RunConfig(sizes=[16 << 20], warmup=50, time_per_size=0.05, min_iters=3, max_iters=5),
                   RunConfig(sizes=[16 << 20], warmup=4, iters=2)):
        backend = _CountingBackend()
        (row,) = run_sweep(config, backend, NullOutput())
        found.append(backend.issued - 1 - row.iters)  # the probe, the warm-ups, the timed ops
    return found[0], found[1]


def test_adaptive_warm_up_stops_by_time_and_fixed_counts_warm_up_exactly():
    for adaptive, fixed in run_ranks(_warm_ups, 2):
        assert adaptive < 50  # a 16 MiB all-reduce takes longer than 1% of 0.05 s
        assert fixed == 4


def _attempts(rank: int, world_size: int, port: int, results: multiprocessing.Queue) -> None:
    """Two attempts of a job on the launcher's store. In each, rank 0 publishes an id through the
    process group's store and rank 1 reads it, as ProcessGroupNCCL does with its unique id."""
    try:
        seen = []
        for attempt in ("0", "1"):
            rendezvous = Rendezvous(rank, world_size, "127.0.0.1", port, launcher_hosts_store=True,
                                    attempt=attempt)
            backend = TorchDistBackend.create("gloo", CPU, rendezvous, timeout_s=15.0)
            store = dist.distributed_c10d._get_default_store()
            if rank == 0:
                time.sleep(0.5 if attempt == "1" else 0.0)  # rank 1 asks first: a dead attempt's id waits
                store.set("unique_id", f"attempt {attempt}")
            seen.append(store.get("unique_id").decode())
            backend.barrier()
            backend.shutdown()  # as a dead attempt would leave them, its keys stay in the store
        results.put((rank, seen))
    except BaseException:
        results.put((rank, traceback.format_exc()))


def test_a_restarted_attempt_never_reads_the_dead_attempts_keys():
    port = free_port()
    # the launcher's store (torchrun's agent hosts it, and keeps it across restarts)
    agent_store = dist.TCPStore("127.0.0.1", port, None, True, wait_for_workers=False, multi_tenant=True)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    procs = [context.Process(target=_attempts, args=(rank, 2, port, results)) for rank in range(2)]
    for proc in procs:
        proc.start()
    try:
        found = dict(results.get(timeout=120) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    assert found == {0: ["attempt 0", "attempt 1"], 1: ["attempt 0", "attempt 1"]}, found
    del agent_store
