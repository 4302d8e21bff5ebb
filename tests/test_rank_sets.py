"""Implementations that need torch's symmetric memory on different backends cannot share a process: each
other backend's run in rank processes of their own, which the run's ranks start, and their rows take
their place among the others. Shown on real gloo ranks with two toy implementations whose memory kinds
take a process-wide backend as torch's do (tests/toy_sets.py)."""

import pytest
import torch

from commbench.measure.impls import REGISTRY, process_sets
from tests.dist_helpers import run_ranks

pytestmark = pytest.mark.processes


def test_implementations_fall_into_one_set_per_symmetric_memory_backend():
    assert process_sets(list(REGISTRY)) == [
        ["c10d", "nccl-ubr", "nccl-symm", "cta-efficiency", "cta-zero", "torchcomms"],
        ["symm-one-shot", "symm-two-shot", "symm-multimem"], ["nvshmem-a2av"]]
    assert process_sets(["c10d", "symm-one-shot", "nvshmem-a2av"]) == [["c10d", "symm-one-shot"],
                                                                        ["nvshmem-a2av"]]
    assert process_sets(["nvshmem-a2av"]) == [["nvshmem-a2av"]]


def _sweep_over_two_backends(rank: int, world_size: int, with_rank_sets: bool, second: str = "toy-b") -> dict:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from commbench.backends.torch_dist import TorchDistBackend
    from commbench.config.sweep import resolve, run_config
    from commbench.coordination import Rendezvous, Started, Waiter
    from commbench.core.groups import Membership, world_plan
    from commbench.running.rank_sets import RankSets
    from commbench.running.runner import Session, run_sweep, sweep_failure
    from commbench.writers.output import NullOutput
    from tests import toy_sets

    class Notes(NullOutput):
        def __init__(self) -> None:
            self.notes: list[str] = []
            self.compared: list[list[str]] = []

        def note(self, text: str) -> None:
            self.notes.append(text)

        def implementations_done(self, rows) -> None:
            self.compared.append([row.impl for row in rows])

    store = c10d._get_default_store()
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    device = torch.device("cpu")
    backend = TorchDistBackend("gloo", device, Started(None, None, Waiter(60.0)))
    sets = RankSets(Rendezvous(rank, world_size, "127.0.0.1", store.port), "gloo", device, 60.0)
    session = Session(Membership(world_plan(world_size), None, rank), hostnames=("host",) * world_size,
                      rank_sets=sets if with_rank_sets else None)
    config = resolve(run_config(collectives=["all_reduce"], sizes=[1024, 4096], iters=3, warmup=1, check=True,
                                impls=["c10d", "toy-a", second], backend="gloo", device="cpu"))
    output = Notes()
    rows = run_sweep(config, backend, output, session)
    return {"rows": [(row.impl, row.size_bytes, row.impl_status, row.error, row.wrong) for row in rows],
            "failure": sweep_failure(rows),
            "notes": output.notes, "compared": output.compared, "chosen": list(toy_sets.CHOSEN)}


def test_an_implementation_needing_another_backend_runs_in_rank_processes_of_its_own():
    first, second = run_ranks(_sweep_over_two_backends, 2, True)
    assert first["rows"] == second["rows"] == [
        ("c10d", 1024, "", "", 0), ("c10d", 4096, "", "", 0), ("toy-a", 1024, "ran", "", 0),
        ("toy-a", 4096, "ran", "", 0), ("toy-b", 1024, "ran", "", 0), ("toy-b", 4096, "ran", "", 0)]
    assert first["chosen"] == ["TOY-A"]  # toy-b's backend was taken elsewhere: this process kept its own
    assert first["compared"] == [["c10d", "c10d", "toy-a", "toy-a", "toy-b", "toy-b"]]
    assert any(note.startswith("toy-b: measured first, in rank processes of their own")
               for note in first["notes"])


def test_without_a_store_to_meet_at_such_an_implementation_is_refused_with_the_reason():
    first, _ = run_ranks(_sweep_over_two_backends, 2, False)
    toy_b = [row for row in first["rows"] if row[0] == "toy-b"]
    assert [row[2] for row in toy_b] == ["unavailable", "unavailable"]
    assert toy_b[0][3].startswith("needs rank processes of its own (torch holds one symmetric-memory backend")


def test_a_set_whose_process_dies_fails_its_rows_on_every_rank_and_the_run_goes_on():
    for found in run_ranks(_sweep_over_two_backends, 2, True, "toy-dies", timeout=180):
        statuses = [(row[0], row[2]) for row in found["rows"]]
        assert statuses[:4] == [("c10d", ""), ("c10d", ""), ("toy-a", "ran"), ("toy-a", "ran")]
        dead = [row for row in found["rows"] if row[0] == "toy-dies"]
        assert len(dead) == 2 and all(row[2] == "" for row in dead)  # failures, not refusals
        assert dead[0][3].startswith("the rank processes of toy-dies failed: rank 1: its rank process ended "
                                     "(exit status 3) before it reported"), dead[0][3]
        assert found["failure"] and "toy-dies" in found["failure"]
