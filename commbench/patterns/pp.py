"""Pipeline parallelism: Megatron-LM's 1F1B schedule, its point-to-point messages and its bubble.

With p stages and m micro-batches, stage s first runs min(p - s - 1, m) forward passes (warm-up), then
alternates one forward and one backward (steady state), then runs the remaining backward passes
(cool-down). A forward pass receives the micro-batch's activations from stage s - 1 and sends its output
to stage s + 1; a backward pass receives the output's gradient from s + 1 and sends the input's gradient
to s - 1 (the first and last stages skip the sends and receives they have no neighbour for). In the
steady state a send and the next receive go to the same neighbour and are batched into one exchange
(Megatron's send_forward_recv_backward and send_backward_recv_forward), which is what keeps two stages
that send to each other at once from waiting on each other. Taken apart, the sends and receives are
those torch.distributed.pipelining's Schedule1F1B issues, in the same order. Every message is one
micro-batch's activation (or its gradient): tokens x hidden elements.

The bubble: with a forward pass taking t and a backward 2t on every stage, a stage computes for
m x 3t of a step lasting (m + p - 1) x 3t: it idles (p - 1) / (m + p - 1) of the step.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.measure.compute import MatmulKernel
from commbench.measure.stats import summarize
from commbench.patterns.measure import Breakdown
from commbench.patterns.parallel import GroupInfo
from commbench.patterns.schedule import Issuer, Label, dtype_name
from commbench.results.model import Row

FORWARD, BACKWARD = "forward", "backward"
PAIR_PHASE = "1f1b"  # a steady-state exchange: one direction's activation, the other's gradient


@dataclass(frozen=True)
class Action:
    """One step of a stage's schedule: compute (forward, backward) or a message.

    A message's ``sends`` and ``receives`` say which of activations (forward) and gradients (backward)
    it moves, to or from ``neighbour`` (-1: the previous stage, +1: the next)."""

    kind: str  # forward, backward, or message
    micro_batch: int
    sends: str = ""
    receives: str = ""
    neighbour: int = 0


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[Action]:
    """Stage ``stage``'s 1F1B schedule, as Megatron-LM's forward_backward_pipelining_without_interleaving
    runs it."""
    first, last = stage == 0, stage == stages - 1
    actions: list[Action] = []

    def message(micro_batch: int, sends: str, receives: str, neighbour: int) -> None:
        if (neighbour < 0 and not first) or (neighbour > 0 and not last):
            actions.append(Action("message", micro_batch, sends, receives, neighbour))

    warmup = min(stages - stage - 1, micro_batches)
    steady = micro_batches - warmup
    for micro_batch in range(warmup):
        message(micro_batch, "", FORWARD, -1)
        actions.append(Action(FORWARD, micro_batch))
        message(micro_batch, FORWARD, "", +1)
    if steady:
        message(warmup, "", FORWARD, -1)
    for index in range(steady):
        forward, backward = warmup + index, index
        actions.append(Action(FORWARD, forward))
        message(forward, FORWARD, BACKWARD, +1)
        actions.append(Action(BACKWARD, backward))
        message(backward, BACKWARD, "" if index == steady - 1 else FORWARD, -1)
    for backward in range(steady, micro_batches):
        message(backward, "", BACKWARD, +1)
        actions.append(Action(BACKWARD, backward))
        message(backward, BACKWARD, "", -1)
    return actions


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """1F1B's idle share of a step with equal stages: (p - 1) / (m + p - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


class PipelineLink:
    """One stage's messages to its neighbours in the pipeline group: a send buffer and a receive buffer
    of one activation each."""

    def __init__(self, group: GroupInfo, elements: int, dtype: torch.dtype, device: torch.device) -> None:
        self.group = group
        self.sending = torch.zeros(elements, dtype=dtype, device=device)
        self.receiving = torch.zeros(elements, dtype=dtype, device=device)
        self.unit = f"stage{group.rank}"

    def issue(self, issuer: Issuer, action: Action) -> None:
        peer = self.group.rank + action.neighbour
        buffers = self.sending, self.receiving
        if action.sends and action.receives:
            collective, phase = "send_recv", PAIR_PHASE
            args = CollectiveArgs(input=buffers[0], output=buffers[1], peer=peer)
        elif action.sends:
            collective, phase = "send", action.sends
            args = CollectiveArgs(input=buffers[0], output=None, send_peer=peer)
        else:
            collective, phase = "recv", action.receives
            args = CollectiveArgs(input=None, output=buffers[1], recv_peer=peer)
        args.process_group = self.group.process_group
        elements = self.sending.numel()
        label = Label(collective, self.unit, phase, elements * self.sending.element_size(), elements,
                      dtype_name(self.sending.dtype), "", "pp", self.group.size)
        issuer.issue(label, args)


class TimedCompute:
    """A stage's stand-in compute: ``kernels`` size x size matmuls per forward pass, twice as many per
    backward; the seconds it took in each step (ended by ``end_step``) for the bubble."""

    def __init__(self, backend: Backend, size: int, kernels: int, dtype: torch.dtype) -> None:
        self.backend = backend
        self.kernel = MatmulKernel(size, dtype, backend.device) if size else None
        self.kernels = kernels
        self.current = 0.0
        self.per_step: list[float] = []

    def __call__(self, passes: int) -> None:
        if self.kernel is None:
            return
        start = time.perf_counter()
        for _ in range(passes * self.kernels):
            self.kernel()
        self.backend.sync_device()
        self.current += time.perf_counter() - start

    def end_step(self) -> None:
        self.per_step.append(self.current)
        self.current = 0.0


class PpStep:
    """One stage's 1F1B step: its messages and, with --compute-size, its compute."""

    compute_kernels = 0  # its compute is its own (the bubble needs it), not --overlap's

    def __init__(self, link: PipelineLink, actions: list[Action], compute: TimedCompute) -> None:
        self.link = link
        self.actions = actions
        self.compute = compute

    def run(self, issuer: Issuer, compute: Callable[[], None] | None = None) -> None:
        for action in self.actions:
            if action.kind == FORWARD:
                self.compute(1)
            elif action.kind == BACKWARD:
                self.compute(2)
            else:
                self.link.issue(issuer, action)
        self.compute.end_step()


def bubble_rows(compute: TimedCompute, breakdown: Breakdown, stages: int, micro_batches: int,
                iters: int) -> tuple[list[Row], list[str]]:
    """The step row with the measured bubble (percent of the step a stage spends outside its compute,
    the mean over stages, p50 over steps; none without compute) and a note with the theoretical one."""
    theory = bubble_fraction(stages, micro_batches)
    note = f"1F1B bubble in theory (p - 1) / (m + p - 1) = {stages - 1} / {micro_batches + stages - 1} = " \
           f"{100 * theory:.1f}%"
    per_rank = compute.backend.all_gather_floats(compute.per_step[-iters:])
    if compute.kernel is None:
        return breakdown.rows, [note + "; give --compute-size to measure it"]
    steps = breakdown.step.slowest
    measured = [100 * (1 - sum(rank[index] for rank in per_rank) / len(per_rank) / steps[index])
                for index in range(len(steps))]
    bubble = summarize(measured).p50
    rows = [replace(row, bubble_pct=bubble) if row.phase == "step" else row for row in breakdown.rows]
    return rows, [f"{note}; measured {bubble:.1f}% (the step's time outside a stage's compute, mean over "
                  "stages, p50 over steps: idle and communicating)"]
