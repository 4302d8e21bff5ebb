"""What a sweep does with a collective the backend cannot run here, on real gloo ranks: found by a tiny op
before anything is measured, left out and named once under --collective all (exit 0), one line and exit
status 2 when named on its own.

The same path runs on every torch through what gloo refuses on all of them (float8, premul_sum); the
all_to_all case, which torch's gloo has from 2.12, runs where the torch running the tests lacks it."""

import json
from pathlib import Path

import pytest

from commbench.measure.collectives import REGISTRY
from commbench.running.availability import torch_release
from commbench.running.probe import FIRST_TORCH
from tests.dist_helpers import collectives_gloo_refuses, commbench, run_ranks

pytestmark = pytest.mark.processes
SEE_LIST = "(`commbench list` shows what runs here)"


def _plain_all_to_all(rank: int, world_size: int) -> str | None:
    """A list all_to_all straight through torch.distributed: None when it runs, else why not."""
    import torch
    import torch.distributed as dist

    outputs = [torch.empty(2) for _ in range(world_size)]
    try:
        dist.all_to_all(outputs, [torch.full((2,), float(rank)) for _ in range(world_size)])
    except RuntimeError as exc:
        return str(exc).splitlines()[0]
    return None


@pytest.fixture(scope="module")
def all_to_all_refusal() -> str | None:
    return run_ranks(_plain_all_to_all, 2)[0]


def _said(stderr: str) -> list[str]:
    """stderr's lines but the warning that 3 ranks share this machine's cores."""
    return [line for line in stderr.splitlines() if not line.startswith("commbench: warning:")]


def _results(run_dir: Path) -> dict:
    return json.loads(next(run_dir.glob("*/results.json")).read_text())


def test_the_first_release_recorded_for_gloo_all_to_all_holds_for_this_torch(all_to_all_refusal):
    first = tuple(int(part) for part in FIRST_TORCH[("gloo", "all_to_all")].split("."))
    running = tuple(int(part) for part in torch_release().split(".")[:2])
    assert (all_to_all_refusal is None) == (running >= first), all_to_all_refusal
    assert ("all_to_all" in collectives_gloo_refuses()) == (all_to_all_refusal is not None)


def test_all_to_all_named_on_its_own_where_gloo_lacks_it_is_one_line_and_exit_2(all_to_all_refusal,
                                                                                  tmp_path):
    if all_to_all_refusal is None:
        pytest.skip("this torch's gloo runs all_to_all (it has it from torch 2.12)")
    result = commbench("--collective", "all_to_all", "--sizes", "1K", "--iters", "2", "--nproc", "3",
                       "--output-dir", str(tmp_path))
    assert result.returncode == 2
    assert _said(result.stderr) == [
        f"commbench: error: all_to_all: gloo on torch {torch_release()} cannot run it "
        f"({all_to_all_refusal}); torch's gloo has it from 2.12 {SEE_LIST}"]
    assert _results(tmp_path)["rows"] == []


def test_a_collective_named_on_its_own_that_gloo_refuses_as_asked_is_one_line_and_exit_2(tmp_path):
    # gloo has no premul_sum (NCCL's): all_reduce cannot run as asked; broadcast could, but nothing runs
    result = commbench("--collective", "broadcast,all_reduce", "--op", "premul_sum", "--sizes", "1K",
                       "--iters", "2", "--nproc", "3", "--output-dir", str(tmp_path))
    assert result.returncode == 2
    assert _said(result.stderr) == [  # once, from rank 0, though every rank found it
        f"commbench: error: all_reduce: gloo on torch {torch_release()} cannot run it with op premul_sum "
        f"(premul_sum is NCCL's pre-multiplied sum; the gloo backend does not have it) {SEE_LIST}"]
    payload = _results(tmp_path)
    assert payload["rows"] == [] and payload["meta"]["status"] == "failed"


def test_collective_all_leaves_out_and_names_once_what_gloo_cannot_run_in_the_dtype_asked(tmp_path):
    # gloo has no float8 but in the point-to-point collectives: 'all' measures those and names the rest
    result = commbench("--collective", "all", "--dtype", "float8_e4m3fn", "--sizes", "1K", "--iters", "2",
                       "--warmup", "0", "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr
    payload = _results(tmp_path)
    measured = {row["collective"] for row in payload["rows"]}
    unavailable = payload["meta"]["unavailable"]
    assert payload["meta"]["status"] == "complete" and not any(row["error"] for row in payload["rows"])
    assert measured.isdisjoint(unavailable) and measured | set(unavailable) == set(REGISTRY)
    assert {"send_recv", "ping_pong", "ring", "barrier"} <= measured
    assert unavailable["all_reduce"] == "in float8_e4m3fn: Invalid scalar type"
    refused_outright = collectives_gloo_refuses()  # all_to_all before torch 2.12: its own reason
    for name, why in unavailable.items():
        assert why == refused_outright.get(name, "in float8_e4m3fn: Invalid scalar type"), name
    said = " ".join(result.stdout.split())  # the console wraps a long note
    assert said.count("--collective all: left out what gloo on torch") == 1
    assert all(name in said.split("--collective all: left out")[1] for name in unavailable)
