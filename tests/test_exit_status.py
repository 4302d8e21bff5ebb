"""Exit status 0 only when everything asked for was measured: a size the memory budget refused, or an
implementation named on its own that cannot run here, leaves the rest measured and the run exits 1
naming it; a wildcard (--impl all, --collective all) may leave out, by name, what cannot run here."""

import pytest
import torch

from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.sweep import resolve, run_config
from commbench.running.runner import Session, not_measured, run_sweep
from commbench.writers.output import NullOutput
from tests.dist_helpers import run_ranks

pytestmark = pytest.mark.processes

KiB, MiB = 1024, 1024 * 1024


def _unmeasured(rank: int, world_size: int, impls: list[str], max_memory: int | None) -> tuple:
    backend = TorchDistBackend("gloo", torch.device("cpu"))
    config = resolve(run_config(collectives=["all_reduce"], sizes=[4 * KiB, 4 * MiB], iters=2, warmup=0,
                                impls=impls, max_memory=max_memory, backend="gloo", device="cpu"))
    session = Session.world(backend)
    rows = run_sweep(config, backend, NullOutput(), session)
    return [(row.impl, row.size_bytes, row.impl_status) for row in rows], not_measured(session.unmeasured)


def test_what_each_rank_left_unmeasured_is_named_and_wildcards_excuse_their_own():
    # every rank plans alike, so every rank reaches the same verdict (rank 0 says it, the others exit 1)
    ran = run_ranks(_unmeasured, 2, ["c10d"], 1 * MiB)  # 4 MiB is beyond the budget: refused
    assert ran[0] == ran[1]
    rows, failure = ran[0]
    assert rows == [("c10d", 4 * KiB, "")]
    assert failure.startswith("asked for but not measured: 1 point (first: all_reduce float32 at 2 ranks: "
                              "4 MiB needs")
    assert "beyond the memory budget (--max-memory 1 MiB)" in failure
    rows, failure = run_ranks(_unmeasured, 2, ["c10d", "symm-one-shot"], None)[0]  # named: it counts
    assert ("symm-one-shot", 4 * KiB, "unavailable") in rows and ("c10d", 4 * MiB, "") in rows
    assert failure.startswith("asked for but not measured: 2 points (first: all_reduce by symm-one-shot ")
    assert ": unavailable: needs" in failure
    rows, failure = run_ranks(_unmeasured, 2, ["all"], None)[0]  # --impl all: left out by name, not failed
    assert failure is None and any(status == "unavailable" for _, _, status in rows)

