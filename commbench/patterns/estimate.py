"""What a pattern run will cost, said before it starts: the FSDP pattern's memory per rank (refused past
the budget, with the largest --layers that fits), every pattern's steps, and their time from a probe.

Memory (docs/patterns.md#memory-and-time) is arithmetic on the shard plan, no tensor allocated: the
buffers the FSDP step holds (parameter and gradient shards, one unit's full gradients, the gathered
parameters, the reduce-scatter buckets), --check's (the unbucketed reference, a chunk's expected values),
and an allowance for the backend's temporaries (on CPU, gloo's flat copies of a unit's collectives:
BACKEND_COPIES of the largest, as measured; NCCL works in place). Buffers held are summed; of the
temporaries (the backend's, --check's expected values) one exists at a time, so the largest counts.
The process itself (Python, torch) is not counted: the budget is what was available once it was loaded.

Time is an α-β estimate, t = calls x α + bytes / β per step, from two all-gathers a probe times on the
backend (measure: ``probe_alpha_beta``), plus --check's verification: the values it makes and compares
times what one block of them took (fsdp_check: ``seconds_per_value``). Other collectives and dtypes run
at other speeds, so it is an order of magnitude; the progress lines measure the real steps as they go.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from commbench.core.devices import MemoryBudget, approximate_bytes, explicit_budget
from commbench.core.dtypes import element_size
from commbench.errors import UsageError
from commbench.patterns.config import FsdpConfig
from commbench.patterns.fsdp_check import BLOCK
from commbench.patterns.models import load_model
from commbench.patterns.sharding import ShardPlan, parse_buckets, shard_model

# gloo (torch 2.13) holds up to three flat copies of a unit's gathered parameters or gradients at once
# while a step runs (scripts/fsdp_memory_estimate.py measures it); NCCL works in place on the device.
BACKEND_COPIES = 3
PROGRESS_EVERY_S = 10.0  # a progress line at most this often, and only once a step has taken this long
HEARTBEAT_S = 60.0  # a line while one step runs this long without one


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per rank: buffers held together, and temporaries of which one exists at a time."""

    held: tuple[tuple[str, int], ...]
    transient: tuple[tuple[str, int], ...] = ()

    @property
    def total(self) -> int:
        return sum(size for _, size in self.held) + max((size for _, size in self.transient), default=0)

    def describe(self) -> str:
        def listed(parts: tuple[tuple[str, int], ...]) -> str:
            shown = sorted((part for part in parts if part[1]), key=lambda part: -part[1])
            return ", ".join(f"{what} {approximate_bytes(size)}" for what, size in shown)

        largest = max(self.transient, key=lambda part: part[1], default=("", 0))
        passing = f"; and at times {largest[0]} {approximate_bytes(largest[1])}" if largest[1] else ""
        return f"{approximate_bytes(self.total)} per rank ({listed(self.held)}{passing})"


def _bucket_bytes(plan: ShardPlan, config: FsdpConfig, reduce_size: int, depth: int) -> int:
    """The largest bucketing's buckets: depth x (rows, output, and a packing copy unless per unit or
    list), and the room a gradient larger than a bucket is divided in."""
    largest = 0
    for bucketing in parse_buckets(",".join(config.buckets)):
        capacity = bucketing.capacity_elements(plan, reduce_size)
        packing = 0 if bucketing.per_unit or config.fallback == "list" else plan.world_size * capacity
        direct = max((param.padded for param in plan.params() if param.chunk > capacity), default=0)
        per_depth = plan.world_size * capacity + capacity + packing + direct
        largest = max(largest, depth * per_depth * reduce_size)
    return largest


def fsdp_memory(config: FsdpConfig, world_size: int, device_type: str) -> MemoryEstimate:
    """What one rank of `pattern fsdp` holds at its peak (the module docstring says what is counted)."""
    plan = shard_model(load_model(config.model, config.layers), world_size, config.fsdp_version)
    param_dtype, reduce_dtype = config.dtypes()
    param_size, reduce_size = element_size(param_dtype), element_size(reduce_dtype)
    depth = 2 if config.overlap else 1
    full_unit = world_size * plan.max_unit_shard
    held = [("parameter shards", plan.shard_numel * param_size),
            ("gradient shards", plan.shard_numel * reduce_size),
            ("a unit's full gradients", full_unit * reduce_size),
            ("gathered parameters", depth * full_unit * param_size),
            ("reduce-scatter buckets", _bucket_bytes(plan, config, reduce_size, depth))]
    transient = []
    if config.check:  # the unbucketed reference; a block's indices (int64) and values, made in turn
        held.append(("--check's reference", plan.shard_numel * reduce_size))
        block = min(BLOCK, max(param.padded for param in plan.params()))
        transient.append(("--check's expected values", block * (3 * 8 + 3 * max(param_size, reduce_size))))
    if device_type == "cpu":  # gloo's copies of a unit's collectives, at most BACKEND_COPIES of them
        transient.append(("the backend's copies",
                          BACKEND_COPIES * depth * full_unit * max(param_size, reduce_size)))
    return MemoryEstimate(tuple(held), tuple(transient))


def fsdp_fits(config: FsdpConfig, world_size: int, device_type: str, limit: int) -> int | None:
    """The most layers (--layers) whose estimate is within ``limit`` bytes; None when not even one."""
    model = load_model(config.model)
    low, high, best = 1, max(1, model.layer_count), None
    while low <= high and model.layer_count:
        middle = (low + high) // 2
        if fsdp_memory(replace(config, layers=middle), world_size, device_type).total <= limit:
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best


def refuse_past_budget(estimate: MemoryEstimate, budget: MemoryBudget, hint: str) -> None:
    """UsageError when the estimate passes the budget: the estimate, the budget and what would fit."""
    if estimate.total > budget.limit:
        raise UsageError(f"this run needs about {estimate.describe()}, more than the budget of "
                         f"{budget.describe()}: {hint}")


def fsdp_hint(config: FsdpConfig, world_size: int, device_type: str, limit: int) -> str:
    layers = fsdp_fits(config, world_size, device_type, limit)
    more_ranks = "more ranks (each holds 1/n of the shards), "
    if layers is None:
        return f"use {more_ranks}a smaller --dtype, or --max-memory if the memory is there"
    return (f"--layers {layers} fits (the model cut to its first {layers} layers), or use {more_ranks}"
            "or --max-memory if the memory is there")


def budget_of(max_memory: int | None, agreed: MemoryBudget | None) -> MemoryBudget | None:
    """--max-memory when given, else the budget the ranks agreed on (None: no rank could tell)."""
    return explicit_budget(max_memory) if max_memory is not None else agreed


def fsdp_steps(config: FsdpConfig) -> int:
    """Steps a run issues collectives in: --check's unbucketed reference, and per bucketing its check,
    warm-up and timed steps (with --overlap three kinds of them, after a calibration on the first)."""
    checks = 1 if config.check else 0
    runs = config.warmup + config.iters
    per_bucketing = checks + runs + (3 * runs if config.overlap else 0)
    calibration = runs if config.overlap and config.compute_size == "auto" else 0
    return checks + len(parse_buckets(",".join(config.buckets))) * per_bucketing + calibration


@dataclass(frozen=True)
class StepCost:
    """A step's collectives by their sizes (nccl-tests' sizes, in bytes)."""

    sizes: list[int]

    @property
    def calls(self) -> int:
        return len(self.sizes)

    @property
    def size_bytes(self) -> int:
        return sum(self.sizes)



def fsdp_check_values(config: FsdpConfig, world_size: int) -> int:
    """Expected values --check makes and compares in a run: the parameter shards once, then per checked
    step every rank's gathered parameters (forward, and backward when resharded), this rank's padded
    gradients, and its reduced chunks against each rank's contribution and the reference."""
    if not config.check:
        return 0
    plan = shard_model(load_model(config.model, config.layers), world_size, config.fsdp_version)
    gathered = world_size * plan.shard_numel * (2 if config.reshard else 1)
    per_step = gathered + world_size * plan.shard_numel + (world_size + 1) * plan.shard_numel
    checked_steps = 1 + len(parse_buckets(",".join(config.buckets)))
    return plan.shard_numel + checked_steps * per_step


def time_text(steps: int, cost: StepCost, alpha_beta: tuple[float, float], check_seconds: float = 0.0
              ) -> str:
    """'12 steps of 42 collectives moving 1.25 GiB each: about 3.1 min (α 120 µs, β 1.1 GB/s probed;
    --check's verification about 40 s of it)'."""
    alpha, beta = alpha_beta
    seconds = steps * (cost.calls * alpha + cost.size_bytes / beta) + check_seconds
    check = f"; --check's verification about {duration_text(check_seconds)} of it" if check_seconds else ""
    return (f"{steps} steps of {cost.calls} collectives moving {approximate_bytes(cost.size_bytes)} each: "
            f"about {duration_text(seconds)} (α {alpha * 1e6:.0f} µs, β {beta / 1e9:.3g} GB/s probed{check})")


def duration_text(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class StepProgress:
    """Counts a run's steps and says where it is, as a note, on a terminal or off it: when a step ends
    and PROGRESS_EVERY_S have passed since the last line (with the time left at the rate measured so
    far), and, from a thread, when a single step has run for HEARTBEAT_S without a line. A context
    manager: the thread runs inside the ``with``."""

    def __init__(self, note: Callable[[str], None], total: int, clock: Callable[[], float] = time.monotonic,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.note, self.total, self.clock, self.heartbeat_s = note, total, clock, heartbeat_s
        self.done = 0
        self.started = self.last = clock()
        self.what = ""
        self._lock = threading.Lock()  # the heartbeat thread and the steps both write lines
        self._stop = threading.Event()

    def __enter__(self) -> "StepProgress":
        threading.Thread(target=self._beat, name="commbench-progress", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def working(self, what: str) -> None:
        self.what = what

    def step_done(self) -> None:
        with self._lock:
            self.done += 1
            now = self.clock()
            if now - self.last < PROGRESS_EVERY_S or self.done >= self.total:
                return
            self.last = now
            elapsed = now - self.started
            left = elapsed / self.done * (self.total - self.done)
            self.note(f"progress: {self.done} of {self.total} steps in {duration_text(elapsed)}, about "
                      f"{duration_text(left)} left{self._doing()}")

    def beat(self) -> None:
        """A line when the step running has gone HEARTBEAT_S without one (a long --check step, say)."""
        with self._lock:
            now = self.clock()
            if now - self.last < self.heartbeat_s:
                return
            self.last = now
            self.note(f"progress: step {self.done + 1} of {self.total} still running after "
                      f"{duration_text(now - self.started)} in all{self._doing()}")

    def _doing(self) -> str:
        return f" ({self.what})" if self.what else ""

    def _beat(self) -> None:
        while not self._stop.wait(PROGRESS_EVERY_S):
            self.beat()
