"""Expert parallelism: a mixture-of-experts layer's token dispatch and combine, with a real router's splits.

Experts are spread over the n ranks of the expert-parallel group, E / n consecutive experts per rank
(Megatron-LM's layout). Each rank holds T = sequence x micro-batch tokens; the router sends each token to
``top_k`` distinct experts, drawn with probabilities that follow a Zipf law over the experts (weight of
the r-th most popular expert proportional to 1 / r^skew; --routing-skew 0 is uniform), the popularity
order shuffled per layer, every draw seeded by (seed, layer, draw, rank) so that every rank can compute
every rank's routing. Per MoE layer and micro-batch the forward pass

1. exchanges token counts: an all_to_all_single of each rank's per-expert counts (E / n int64 to each
   rank), from which every rank learns how many tokens it will receive from each rank (Megatron's
   dispatcher does the same before its all-to-all);
2. dispatches: an all-to-all(v) of the tokens, ``hidden`` elements each, ``count(s -> r) x hidden`` from
   rank s to rank r;
3. combines: the reverse all-to-all(v) of the experts' outputs.

The backward pass sends the combine's gradient the dispatch's way and the dispatch's gradient the
combine's way. Imbalance is the busiest rank's received tokens over the mean (1: balanced).
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from commbench.backends.base import CollectiveArgs
from commbench.patterns.parallel import GroupInfo
from commbench.patterns.schedule import DRY, Issuer, Label, dtype_name
from commbench.results.model import Row

_INT64 = 8


@dataclass(frozen=True)
class Router:
    """What draws a routing: experts, top-k, tokens per rank, ranks, the Zipf skew and the seed."""

    experts: int
    top_k: int
    tokens: int
    ranks: int
    skew: float
    seed: int

    def popularity(self, layer: int) -> torch.Tensor:
        """Each expert's weight: 1 / r^skew for its popularity rank r, the order shuffled per layer."""
        shuffle = torch.Generator().manual_seed(self.seed * 7919 + layer)
        order = torch.randperm(self.experts, generator=shuffle)
        weights = 1.0 / torch.arange(1, self.experts + 1, dtype=torch.float64) ** self.skew
        return weights[order]

    def counts(self, layer: int, draw: int) -> torch.Tensor:
        """[source rank][expert]: tokens each rank routes to each expert in this draw."""
        weights = self.popularity(layer).expand(self.tokens, self.experts)
        found = torch.zeros(self.ranks, self.experts, dtype=torch.int64)
        for source in range(self.ranks):
            seed = ((self.seed * 1_000_003 + layer) * 1_000_033 + draw) * 1031 + source
            chosen = torch.multinomial(weights, self.top_k, replacement=False,
                                       generator=torch.Generator().manual_seed(seed))
            found[source] = torch.bincount(chosen.flatten(), minlength=self.experts)
        return found

    def per_rank(self, counts: torch.Tensor) -> torch.Tensor:
        """[source][destination]: tokens each rank sends each rank (the destination's experts summed)."""
        return counts.view(self.ranks, self.ranks, self.experts // self.ranks).sum(dim=2)


def imbalance(sent: torch.Tensor) -> float:
    """The busiest rank's received tokens over the mean (rows: sources, columns: destinations)."""
    received = sent.sum(dim=0).to(torch.float64)
    return float(received.max() / received.mean())


class MoeStep:
    """Every MoE layer's count exchange, dispatch and combine for one micro-batch, and the backward
    pass's two all-to-alls; the routing cycles through ``draws`` precomputed draws, one per step."""

    compute_kernels = 0

    def __init__(self, router: Router, group: GroupInfo, layers: list[str], draws: int,
                 shape: tuple[int, torch.dtype, torch.device]) -> None:
        hidden, dtype, device = shape
        self.router, self.group, self.layers, self.hidden = router, group, layers, hidden
        # [draw][layer] -> [source][expert] and [source][destination] tokens
        self.counts = [[router.counts(layer, draw) for layer in range(len(layers))] for draw in range(draws)]
        self.sent = [[router.per_rank(counts) for counts in per_layer] for per_layer in self.counts]
        most = max(int(sent.sum(dim=0).max()) for per_layer in self.sent for sent in per_layer)
        self.local = torch.zeros(router.tokens * router.top_k * hidden, dtype=dtype, device=device)
        self.remote = torch.zeros(most * hidden, dtype=dtype, device=device)
        local_experts = router.experts // router.ranks
        self.count_input = torch.zeros(router.experts, dtype=torch.int64, device=device)
        self.count_output = torch.zeros(router.ranks * local_experts, dtype=torch.int64, device=device)
        self.runs = 0
        self.imbalances: list[list[float]] = []  # per run: each layer's imbalance
        self.mismatches: list[str] = []  # a count exchange that delivered other counts than the router's

    def run(self, issuer: Issuer, compute: Callable[[], None] | None = None) -> None:
        draw = self.runs % len(self.sent)
        self.runs += 1
        self.imbalances.append([imbalance(sent) for sent in self.sent[draw]])
        splits = [self._forward(issuer, unit, draw, layer) for layer, unit in enumerate(self.layers)]
        for layer in reversed(range(len(self.layers))):
            dispatch, combine = splits[layer]
            # the combine's gradient goes the dispatch's way, then the dispatch's the combine's
            self._all_to_all(issuer, self.layers[layer], "backward", dispatch, forward=True)
            self._all_to_all(issuer, self.layers[layer], "backward", combine, forward=False)

    def _forward(self, issuer: Issuer, unit: str, draw: int, layer: int
                 ) -> tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]]:
        me, ranks = self.group.rank, self.router.ranks
        sent = self.sent[draw][layer]
        self.count_input.copy_(self.counts[draw][layer][me])
        args = CollectiveArgs(input=self.count_input, output=self.count_output,
                              process_group=self.group.process_group)
        size = self.count_output.numel() * _INT64
        issuer.issue(Label("all_to_all_single", unit, "forward", size, self.count_output.numel() // ranks,
                           "int64", "", "ep", ranks), args)
        expected = self.counts[draw][layer][:, self._my_experts()]
        if issuer.mode != DRY and not torch.equal(self.count_output.view(ranks, -1).cpu(), expected):
            self.mismatches.append(f"the count exchange of {unit} delivered {self.count_output.tolist()}, "
                                   f"the router drew {expected.flatten().tolist()}")
        # what arrives: the exchanged counts (what the router drew, when no exchange took place)
        received = (expected if issuer.mode == DRY else self.count_output.view(ranks, -1).cpu()).sum(dim=1)
        dispatch = ([int(count) * self.hidden for count in sent[me]],
                    [int(count) * self.hidden for count in received])
        combine = (dispatch[1], dispatch[0])
        self._all_to_all(issuer, unit, "forward", dispatch, forward=True)
        self._all_to_all(issuer, unit, "forward", combine, forward=False)
        return dispatch, combine

    def _my_experts(self) -> slice:
        local = self.router.experts // self.router.ranks
        return slice(self.group.rank * local, (self.group.rank + 1) * local)

    def _all_to_all(self, issuer: Issuer, unit: str, phase: str, splits: tuple[list[int], list[int]], *,
                    forward: bool) -> None:
        """An all-to-all(v) with (input, output) element splits: forward sends local tokens to the
        experts' ranks, otherwise the experts' results come back."""
        sends, receives = splits
        source, target = (self.local, self.remote) if forward else (self.remote, self.local)
        args = CollectiveArgs(input=source[: sum(sends)], output=target[: sum(receives)], input_splits=sends,
                              output_splits=receives, process_group=self.group.process_group)
        moved = max(sum(sends), sum(receives))
        issuer.issue(Label("all_to_allv", unit, phase, moved * self.local.element_size(), moved,
                           dtype_name(self.local.dtype), "", "ep", self.router.ranks), args)


def imbalance_rows(step: MoeStep, rows: list[Row], iters: int) -> tuple[list[Row], list[str]]:
    """Rows with the timed steps' imbalance: each layer's on its dispatch row (the mean over steps), the
    worst layer's per step on the step row (the mean over steps); and a note listing it per step."""
    timed = step.imbalances[-iters:]
    per_layer = [sum(run[layer] for run in timed) / len(timed) for layer in range(len(step.layers))]
    per_step = [max(run) for run in timed]
    found = []
    for row in rows:
        if row.collective == "all_to_allv" and row.phase == "forward" and row.unit in step.layers:
            row = replace(row, imbalance=per_layer[step.layers.index(row.unit)])
        elif row.phase == "step":
            row = replace(row, imbalance=sum(per_step) / len(per_step))
        found.append(row)
    listed = ", ".join(f"{value:.2f}" for value in per_step)
    return found, [f"routing imbalance per timed step (the busiest rank's tokens over the mean, worst "
                   f"layer): {listed}"]
