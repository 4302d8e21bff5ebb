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
