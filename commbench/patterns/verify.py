"""--check for the activation patterns: every collective of a checked step gets known inputs, and its
outputs are compared with what its group's ranks must have sent, element for element.

Rank s puts ``value(s, d, i) = (i + 3s + 5d) mod 4 + 1`` at position i of what it sends rank d (d = 0
when every rank gets the same: an all-gather's input, an all-reduce's); ranks are ranks in the
collective's group. Averaged inputs are multiplied by the group size first. Values stay small integers
and sums stay at most 4 x 64, exact in bfloat16 up to 64 ranks whatever order the ranks add in. A
router's count exchange (all_to_all_single) carries real counts: the MoE step checks those itself.
"""

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.errors import RunError
from commbench.patterns.parallel import GroupInfo
from commbench.patterns.schedule import Label


def values(source: int, destination: int, count: int, dtype: torch.dtype, device: torch.device,
           scale: int = 1) -> torch.Tensor:
    index = torch.arange(count, device=device)
    return (((index + 3 * source + 5 * destination) % 4 + 1) * scale).to(dtype)


def _segments(tensor: torch.Tensor, splits: list[int]) -> list[torch.Tensor]:
    return list(tensor.view(-1).split(splits))


class CollectiveChecker:
    """The issuer's CheckHooks: fill() before a collective, verify() after it; the first mismatch is
    kept in ``mismatches``."""

    def __init__(self, groups: dict[str, GroupInfo], world: GroupInfo) -> None:
        self.groups = groups
        self.world = world
        self.mismatches: list[str] = []

    def _group(self, label: Label) -> GroupInfo:
        return self.groups[label.group] if label.group else self.world

    def fill(self, label: Label, args: CollectiveArgs) -> None:
        group = self._group(label)
        me, size = group.rank, group.size
        scale = size if label.op == "avg" else 1  # an average of n x v is exact
        name = label.collective
        if name == "all_gather_base":
            _put(args.input, me, 0)
        elif name == "reduce_scatter_base":
            for destination, row in enumerate(args.input.view(size, -1)):
                _put(row, me, destination, scale)
        elif name == "all_reduce":
            _put(args.output, me, 0, scale)
        elif name == "all_to_allv":
            for destination, part in enumerate(_segments(args.input, args.input_splits)):
                _put(part, me, destination)
        elif name in ("send", "send_recv") and args.input is not None:
            _put(args.input, me, args.peer if name == "send_recv" else args.send_peer)

    def expected(self, label: Label, args: CollectiveArgs) -> list[tuple[torch.Tensor, torch.Tensor, str]]:
        """(output view, what it must hold, where it came from) for each part of the outputs."""
        group = self._group(label)
        me, size, name, out = group.rank, group.size, label.collective, args.output
        if name == "all_gather_base":
            rows = out.view(size, -1)
            return [(rows[source], _like(rows[source], source, 0), f"from rank {source}")
                    for source in range(size)]
        if name in ("reduce_scatter_base", "all_reduce"):
            destination = me if name == "reduce_scatter_base" else 0
            wide = out.view(-1).to(torch.float64)
            total = sum(_like(wide, source, destination) for source in range(size))
            return [(out.view(-1), total.to(out.dtype), "the reduction")]
        if name == "all_to_allv":
            return [(part, _like(part, source, me), f"from rank {source}")
                    for source, part in enumerate(_segments(out, args.output_splits))]
        if name in ("recv", "send_recv") and out is not None:
            peer = args.peer if name == "send_recv" else args.recv_peer
            return [(out.view(-1), _like(out.view(-1), peer, me), f"from rank {peer}")]
        return []

    def verify(self, label: Label, args: CollectiveArgs) -> None:
        if self.mismatches:
            return  # the first mismatch is the one worth reading
        for got, want, source in self.expected(label, args):
            got, want = got.reshape(-1), want.reshape(-1)
            if not torch.equal(got, want):
                index = int((got != want).nonzero()[0].item())
                where = f"unit {label.unit}" if label.unit else "the step"
                group = f", {label.group}" if label.group else ""
                self.mismatches.append(f"{label.collective} of {where} ({label.phase}{group}): element "
                                       f"{index} {source} is {got[index].item():g}, expected "
                                       f"{want[index].item():g}")
                return


def _put(tensor: torch.Tensor, source: int, destination: int, scale: int = 1) -> None:
    found = values(source, destination, tensor.numel(), tensor.dtype, tensor.device, scale)
    tensor.copy_(found.view_as(tensor))


def _like(tensor: torch.Tensor, source: int, destination: int) -> torch.Tensor:
    return values(source, destination, tensor.numel(), tensor.dtype, tensor.device)


def agree_on_check(backend: Backend, mismatches: list[str], context: str) -> None:
    """Every rank raises if any rank found a mismatch (none is left waiting in a collective)."""
    found = backend.all_gather_object(mismatches[:1])
    for rank, theirs in enumerate(found):
        if theirs:
            raise RunError(f"{context}: check failed on rank {rank}: {theirs[0]}")
