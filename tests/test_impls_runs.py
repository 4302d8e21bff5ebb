"""--impl on real gloo ranks: the issue's command (every implementation asked for; c10d measured, the
others rows with their reasons, exit 0), and --profile-kernels with --check through the real sweep."""

import json

import pytest
import torch

from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import resolve, run_config
from commbench.measure.impls import Evidence
from commbench.measure.impls.evidence import judge_kernels
from commbench.running.runner import run_sweep, sweep_failure
from commbench.writers.output import NullOutput
from tests.dist_helpers import commbench, run_ranks

pytestmark = pytest.mark.processes


def test_every_implementation_on_gloo_measures_c10d_and_leaves_the_others_reasons(tmp_path):
    result = commbench("--collective", "all_reduce,all_gather_base,reduce_scatter_base", "--sizes", "1K:64K",
                       "--impl", "all", "--iters", "3", "--warmup", "1", "--nproc", "2",
                       "--json", str(tmp_path / "run.json"), "--csv", str(tmp_path / "run.csv"))
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads((tmp_path / "run.json").read_text())["rows"]
    measured = [row for row in rows if row["impl"] == "c10d"]
    assert len(measured) == 21 and all(row["time_us_p50"] and not row["error"] for row in measured)
    refused = {row["impl"]: row["error"] for row in rows if row["impl"] != "c10d"}
    assert len(refused) >= 5 and all(refused.values())
    assert all(row["impl_status"] == "unavailable" and row["time_us_p50"] is None
               for row in rows if row["impl"] != "c10d")
    assert refused["nccl-ubr"] == "needs --backend nccl (this run: gloo)"
    assert "unavailable: needs a CUDA device (this run: cpu)" in result.stdout  # the console's line


def _profiled_and_checked(rank: int, world_size: int) -> list[tuple]:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    config = resolve(run_config(collectives=["all_reduce"], sizes=[4096], iters=3, warmup=1, check=True,
                                profile_kernels=True, impls=["c10d", "symm-one-shot"], backend="gloo",
                                device="cpu"))
    rows = run_sweep(config, backend, NullOutput())
    assert sweep_failure(rows) is None  # an unavailable implementation is not a failed run
    return [(row.impl, row.impl_status, row.kernels, row.output_digest, row.wrong) for row in rows]


def test_profiled_kernels_and_output_digests_come_from_the_real_ops():
    measured, refused = run_ranks(_profiled_and_checked, 2)[0]
    c10d, _, kernels, digest, wrong = measured
    assert c10d == "c10d" and wrong == 0 and len(digest) == 16
    names = kernels.split(" | ")
    assert "gloo:all_reduce" in names  # what torch's profiler names gloo's work on CPU
    assert judge_kernels(Evidence(proof=r"^gloo:all_reduce$", proof_text="gloo"), names, 2)[0] == "verified"
    assert judge_kernels(Evidence(proof=r"ncclSymk", fallback=r"^gloo:", proof_text="x"), names, 2)[0] == \
        "fallback"
    assert refused[:2] == ("symm-one-shot", "unavailable")


def _nccl_allocator_on_gloo(rank: int, world_size: int) -> str | None:
    import torch.distributed as dist

    from commbench.backends.capabilities import tensor_allocation_refusal

    return tensor_allocation_refusal(dist.group.WORLD._get_backend(torch.device("cpu")), torch.device("cpu"))


def test_a_communicator_that_cannot_allocate_nccl_tensors_refuses_registered_buffers():
    """What torch's mem_allocator getter checks before it raises: asked of a real communicator (gloo
    allocates no NCCL tensors, as NCCL without ncclMemAlloc or multicast does not)."""
    assert run_ranks(_nccl_allocator_on_gloo, 2)[0] == (
        "the run's communicator cannot allocate NCCL tensors on cpu (ProcessGroupGloo.supports_tensor_alloc "
        "is false: NCCL's allocator needs NCCL 2.19+ and a device and driver with multicast)")


def _set_up_failing_on_one_rank(rank: int, world_size: int) -> dict:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from commbench.backends.paths import COMMUNICATOR_KINDS, MEMORY_KINDS, RunCommunicator, SizeScope
    from commbench.core.paths import PathSpec
    from commbench.running.agreement import agree

    class OwnGroup(RunCommunicator):
        """Makes a communicator of its own, as a CTA policy does."""

        def start(self, state, members, timeout_s):
            state.group = dist.new_group(members[0])
            state.owned.append(state.group)

    class RefusedOnRankOne(SizeScope):
        """Rank 1 cannot take this memory (as a process whose symmetric memory is in use); the others
        would go on to the first collective of its set-up."""

        @classmethod
        def check(cls, state):
            if dist.get_rank() == 1:
                raise RuntimeError("this process already uses torch's CUDA symmetric memory")

        @classmethod
        def prepare(cls, state):
            dist.all_reduce(torch.zeros(1), group=state.group)

    COMMUNICATOR_KINDS["own-group"], MEMORY_KINDS["refused-on-one"] = OwnGroup(), RefusedOnRankOne
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    groups_before = len(c10d._world.pg_map)
    try:
        backend.start_path(PathSpec(memory="refused-on-one", communicator="own-group"), None, [[0, 1]],
                           lambda failure: agree(backend, failure))
        error = None
    except RuntimeError as exc:
        error = str(exc)
    return {"error": error, "groups left": len(c10d._world.pg_map) - groups_before}


def test_a_set_up_that_fails_on_one_rank_stops_every_rank_before_its_collective_and_closes_what_it_made():
    for found in run_ranks(_set_up_failing_on_one_rank, 2, timeout=60):
        assert found == {"error": "rank 1: this process already uses torch's CUDA symmetric memory",
                         "groups left": 0}
