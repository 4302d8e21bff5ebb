"""What a pattern run says before it starts (patterns/estimate.py): the FSDP pattern's memory, counted
from the same plan the run allocates from, its refusal past the budget with the --layers that fits, the
time estimate, and the progress lines a long run prints on a terminal or off it.
scripts/fsdp_memory_estimate.py measures the estimate against the peak a run reaches."""

import json
from dataclasses import replace

import pytest
import torch

from commbench.core.devices import MemoryBudget
from commbench.errors import UsageError
from commbench.patterns.estimate import (
    HEARTBEAT_S,
    PROGRESS_EVERY_S,
    StepProgress,
    fsdp_fits,
    fsdp_hint,
    fsdp_memory,
    fsdp_steps,
    refuse_past_budget,
)
from commbench.patterns.fsdp import FsdpConfig, fsdp_setup
from commbench.patterns.fsdp_check import BLOCK, grad_values, param_values
from commbench.patterns.sharding import parse_buckets
from tests.dist_helpers import commbench

CPU = torch.device("cpu")


@pytest.mark.parametrize("changes", [dict(), dict(fsdp_version=1, param_dtype="bfloat16"),
                                     dict(overlap=True, dtype="bfloat16")])
def test_the_buffers_the_estimate_holds_are_the_ones_the_run_allocates(changes):
    config = FsdpConfig(model="tiny", **changes)
    setup = fsdp_setup(config, 3, CPU)
    held = dict(fsdp_memory(config, 3, "cpu").held)
    state = setup.state
    assert held["parameter shards"] == state.param_shards.nbytes
    assert held["gradient shards"] == state.grad_shards.nbytes
    assert held["a unit's full gradients"] == state.unit_grads.nbytes
    assert held["gathered parameters"] == sum(tensor.nbytes for tensor in setup.gathered)


def test_the_backend_s_copies_count_on_cpu_only_and_check_adds_its_reference():
    config = FsdpConfig(model="gpt2-small")
    on_cpu, on_cuda = fsdp_memory(config, 2, "cpu"), fsdp_memory(config, 2, "cuda")
    # the largest unit, gpt2-small's root: token embeddings (50,257 rows padded to 50,258 for 2 ranks),
    # position embeddings (1,024 rows) and the final norm's two vectors, 768 wide, float32
    full_unit_bytes = (50_258 + 1_024 + 2) * 768 * 4
    assert dict(on_cpu.held)["a unit's full gradients"] == full_unit_bytes
    assert on_cpu.total - on_cuda.total == 3 * full_unit_bytes  # gloo's three flat copies, as measured
    checked = fsdp_memory(FsdpConfig(model="gpt2-small", check=True), 2, "cuda")
    # the unbucketed reference, one float32 shard; and a block of 2^22 expected values at a time, each
    # element in three float64 and three float32 temporaries
    reference = dict(on_cuda.held)["parameter shards"]
    assert checked.total - on_cuda.total == reference + 2 ** 22 * (3 * 8 + 3 * 4)


def test_check_values_made_a_block_at_a_time_are_the_whole_values():
    config = FsdpConfig(model="tiny")
    param = max(fsdp_setup(config, 2, CPU).plan.params(), key=lambda item: item.padded)
    halves = [(0, param.padded // 2), (param.padded // 2, param.padded)]
    assert torch.equal(torch.cat([param_values(param, torch.float32, CPU, *half) for half in halves]),
                       param_values(param, torch.float32, CPU))
    assert torch.equal(torch.cat([grad_values(param, 1, torch.float32, CPU, *half) for half in halves]),
                       grad_values(param, 1, torch.float32, CPU))
    assert BLOCK < 2 ** 23  # --check's temporaries stay small beside the model's buffers


def test_a_run_past_the_budget_is_refused_with_the_layers_that_fit():
    config = FsdpConfig(model="llama-7b", layers=8, fsdp_version=1, param_dtype="bfloat16",
                        reduce_dtype="float32", check=True)
    four_layers = fsdp_memory(replace(config, layers=4), 2, "cpu").total
    budget = MemoryBudget(four_layers + 1, "--max-memory test", explicit=True)
    assert fsdp_fits(config, 2, "cpu", budget.limit) == 4
    with pytest.raises(UsageError) as caught:
        refuse_past_budget(fsdp_memory(config, 2, "cpu"), budget, fsdp_hint(config, 2, "cpu", budget.limit))
    message = str(caught.value)
    assert message.startswith("this run needs about ")
    assert "more than the budget of --max-memory test" in message
    assert "--layers 4 fits" in message and len(message.splitlines()) == 1
    assert "more ranks" in fsdp_hint(config, 2, "cpu", 1)  # not even one layer: fewer bytes per rank


def test_the_step_count_is_every_step_that_issues_collectives():
    config = FsdpConfig(model="tiny", buckets=["unit", "0", "25"], check=True, warmup=1, iters=3)
    assert fsdp_steps(config) == 1 + 3 * (1 + 1 + 3)
    overlap = FsdpConfig(model="tiny", overlap=True, iters=2)
    assert fsdp_steps(overlap) == 2 + 3 * 2 + 2  # timed, the overlap's three kinds, the calibration
    assert len(parse_buckets(",".join(config.buckets))) == 3


def test_progress_is_said_once_steps_are_slow_with_the_time_left():
    now = [0.0]
    lines: list[str] = []
    progress = StepProgress(lines.append, 4, clock=lambda: now[0])
    progress.working("fsdp llama-7b, bucket one per unit")
    for elapsed in (1.0, PROGRESS_EVERY_S + 1, PROGRESS_EVERY_S + 2, 3 * PROGRESS_EVERY_S):
        now[0] = elapsed
        progress.step_done()
    assert lines == [f"progress: 2 of 4 steps in {PROGRESS_EVERY_S + 1:.0f} s, about "
                     f"{PROGRESS_EVERY_S + 1:.0f} s left (fsdp llama-7b, bucket one per unit)"]  # last: done


def test_a_step_that_runs_long_is_said_to_be_running():
    now = [0.0]
    lines: list[str] = []
    progress = StepProgress(lines.append, 5, clock=lambda: now[0])
    progress.working("--check, fsdp llama-7b")
    now[0] = HEARTBEAT_S - 1
    progress.beat()
    assert lines == []
    now[0] = HEARTBEAT_S
    progress.beat()
    now[0] = HEARTBEAT_S + 5  # a line was just said: not again before another HEARTBEAT_S
    progress.beat()
    assert lines == [f"progress: step 1 of 5 still running after {HEARTBEAT_S:.0f} s in all "
                     "(--check, fsdp llama-7b)"]
    with StepProgress(lines.append, 1, heartbeat_s=0.01):  # the thread starts and stops with the block
        pass


@pytest.mark.processes
def test_the_command_refuses_past_max_memory_before_allocating(tmp_path):
    result = commbench("pattern", "fsdp", "--model", "llama-7b", "--layers", "2", "--fsdp-version", "1",
                       "--param-dtype", "bfloat16", "--reduce-dtype", "float32", "--check",
                       "--max-memory", "2G", "--output-dir", str(tmp_path), timeout=120)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert "this run needs about" in line and "more than the budget of --max-memory 2 GiB" in line
    assert "more ranks" in line and "Traceback" not in result.stderr
    assert "fsdp1 llama-7b" not in result.stdout  # refused before the model's buffers were made


@pytest.mark.processes
def test_the_estimate_is_printed_off_a_terminal_before_the_run(tmp_path):
    json_path = tmp_path / "r.json"
    result = commbench("pattern", "fsdp", "--model", "tiny", "--check", "--iters", "1", "--json",
                       str(json_path), "--csv", str(tmp_path / "r.csv"))
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stdout.splitlines() if line.startswith("note:")]
    estimate = next(index for index, line in enumerate(notes) if line.startswith("note: estimate: "))
    summary = next(index for index, line in enumerate(notes) if line.startswith("note: fsdp2 tiny"))
    assert estimate < summary
    assert "per rank (" in notes[estimate] and "3 steps of" in result.stdout  # a long note wraps
    assert "--check's verification" in result.stdout and json.loads(json_path.read_text())["rows"]
