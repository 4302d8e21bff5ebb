"""One fabric pass: every scheduled pair of ranks both ways, then all_reduce within and across nodes.

Per round, in this order and for both directions of every pair: bandwidth (``p2p``: the first rank of
the pair sends --size bytes, its partner receives them; then the other way) and latency (``ping_pong``
at --latency-size, led by the first rank, then by the second). Each of the four starts at a world
barrier and is warmed up. Bandwidth is timed --iters times with a world barrier before every message
(outside its time), so the pairs of a round start each message together and every link is loaded at
once; latency is timed over config.LATENCY_ITERS_PER_ITER x --iters round trips back to back (a barrier's
release skew would be larger than the round trip it precedes). --serial runs the round's pairs one
after another while every other rank waits at the same barriers; so do the ping-pongs alone where a
host has more CPU ranks than usable CPUs (latency_alone), since concurrent ones would time the CPU
scheduler.
A rank without a pair (a bye, or waiting its turn) issues nothing. After the round, every rank's times
are gathered; a sample of a pair is the slower of its two ranks' times for that message (the transfer is
over when both sides are done), and a latency sample is half of that round trip. Only rank 0 builds and
keeps the round's rows (2N of them; 2N(N-1) a pass), as a block of columns: it records them and draws
the conclusions, which it sends to the others (run.py). Rows are built by
rows.make_row from the measuring ranks' samples (the pair's, src_rank first; a node group's, in rank
order), so they carry every row's statistics and provenance columns; a fabric row's rank_mean_us is
therefore by position in that list, not by world rank. Nothing inside a timed region allocates: the
buffers exist before the first round. Before every round the ranks check in, so a missing rank is named
and a stop (a signal) is agreed on between rounds.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.core.groups import ranks_by_host
from commbench.core.sizes import format_size
from commbench.errors import Terminated, UsageError, brief, failures_named
from commbench.fabric.config import FabricConfig, available_host_bytes, memory_problem, phase_iters
from commbench.fabric.matrices import BANDWIDTH_COLLECTIVE, KIND, LATENCY_COLLECTIVE
from commbench.fabric.schedule import Round, Schedule
from commbench.measure.collectives import REGISTRY
from commbench.measure.sampling import Sampled
from commbench.measure.timing import BoundOp, time_sync, warm_up
from commbench.results.columns import RowBlock, RowColumns
from commbench.results.model import Row
from commbench.results.rows import make_row
from commbench.running.runner import Session
from commbench.writers.output import Output

PHASES = ("first to second", "second to first", "ping led by first", "ping led by second")
P2P_UNI, PING_PONG, ALL_REDUCE = (REGISTRY[name] for name in (BANDWIDTH_COLLECTIVE, LATENCY_COLLECTIVE,
                                                              "all_reduce"))
ROUND_TRIP_SHARE = 0.5  # a latency sample is half a round trip, as the ping_pong collective reports


@dataclass(frozen=True)
class FabricBuffers:
    """A rank's buffers, allocated once: bandwidth send/receive, latency ping/echo."""

    send: torch.Tensor
    receive: torch.Tensor
    ping: torch.Tensor
    echo: torch.Tensor

    def reduce_view(self) -> torch.Tensor:
        """The all_reduce buffer: the send buffer's bytes seen as float32 (at least one element)."""
        usable = self.send.numel() // 4 * 4
        return self.send[:usable].view(torch.float32) if usable else torch.zeros(1, device=self.send.device)


def allocate_buffers(backend: Backend, config: FabricConfig, hostnames: list[str]) -> FabricBuffers:
    """Every rank's buffers, or (on every rank alike) a UsageError naming the first rank that lacked
    memory: sizes that do not fit are bad input, found before anything is measured."""
    rank, device = backend.rank, backend.device
    if device.type == "cuda":
        problem = memory_problem(config, 1, torch.cuda.mem_get_info(device)[0])
    else:
        problem = memory_problem(config, hostnames.count(hostnames[rank]), available_host_bytes())
    buffers = None
    if problem is None:
        try:
            buffers = FabricBuffers(*(torch.zeros(size, dtype=torch.uint8, device=device) for size in
                                      (config.size, config.size, config.latency_size, config.latency_size)))
        except (RuntimeError, MemoryError) as exc:
            problem = f"--size {format_size(config.size)} does not fit in memory ({brief(exc)})"
    problems = backend.all_gather_object(problem)
    failed = next(((where, text) for where, text in enumerate(problems) if text), None)
    if failed is not None:
        raise UsageError(f"rank {failed[0]} ({hostnames[failed[0]]}): {failed[1]}")
    assert buffers is not None
    return buffers


@dataclass(frozen=True)
class NodeGroups:
    """The all_reduce groups: the ranks of each host that has two or more, and the first rank of every
    host (when there are two hosts or more); this rank's process groups for them."""

    intra: tuple[tuple[int, ...], ...]
    inter: tuple[tuple[int, ...], ...]
    intra_process_group: Any
    inter_process_group: Any


def node_groups(backend: Backend, hostnames: list[str]) -> NodeGroups:
    """Create the groups (every rank together, in the same order, as process-group creation needs)."""
    hosts = ranks_by_host(hostnames)
    intra = tuple(tuple(ranks) for ranks in hosts.values() if len(ranks) > 1)
    inter = (tuple(ranks[0] for ranks in hosts.values()),) if len(hosts) > 1 else ()
    with failures_named(lambda: f"rank {backend.rank} could not create the fabric's node groups"):
        intra_group, inter_group = (backend.new_groups([list(ranks) for ranks in members])
                                    if members else None for members in (intra, inter))
    return NodeGroups(intra, inter, intra_group, inter_group)


@dataclass(frozen=True)
class FabricContext:
    """What every round of a pass needs; the same on every rank but for the buffers."""

    backend: Backend
    config: FabricConfig
    hostnames: list[str]
    schedule: Schedule
    buffers: FabricBuffers
    nodes: NodeGroups
    session: Session  # the stops every rank agrees on, the provenance of rows
    # oversubscribed hosts: host -> (its ranks, its usable CPUs)
    crowded: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def phase(self) -> str:
        return "serial" if self.config.serial else "concurrent"

    @property
    def latency_alone(self) -> bool:
        """Whether ping-pongs run one pair at a time even in a concurrent round: a host is oversubscribed."""
        return bool(self.crowded) and not self.config.serial


def _sit_out(backend: Backend, args: CollectiveArgs) -> None:
    """The op of a rank that sits a measurement out: it still meets the others at every barrier."""


def _pair_phases(ctx: FabricContext, peer: int | None, is_first: bool) -> list[BoundOp]:
    """This rank's four measurements with ``peer`` (None: none, but the same barriers)."""
    backend, buffers = ctx.backend, ctx.buffers
    if peer is None:
        return [BoundOp(backend, CollectiveArgs(input=None, output=None), _sit_out)] * len(PHASES)

    def transfer(sends: bool) -> BoundOp:
        return BoundOp(backend, CollectiveArgs(input=buffers.send, output=buffers.receive,
                                               send_peer=peer if sends else None,
                                               recv_peer=None if sends else peer), P2P_UNI.issue)

    def ping(leads: bool) -> BoundOp:
        args = CollectiveArgs(input=buffers.ping, output=buffers.echo, peer=peer, leads=leads)
        return BoundOp(backend, args, PING_PONG.issue)

    return [transfer(is_first), transfer(not is_first), ping(is_first), ping(not is_first)]


def _time_phases(ctx: FabricContext, phases: list[BoundOp], indices: tuple[int, ...]) -> list[float]:
    values: list[float] = []
    counts = phase_iters(ctx.config)
    for index in indices:
        op = phases[index]
        ctx.backend.barrier()
        warm_up(op, ctx.config.warmup)
        values.extend(time_sync(op, counts[index], barrier_per_iter=index < 2).seconds)
    return values


def _time_pairs(ctx: FabricContext, one: Round, indices: tuple[int, ...], one_at_a_time: bool) -> list[float]:
    """This rank's seconds for the phases ``indices`` of the round: every pair at once, or one pair
    after another while the others wait at the same barriers (zeros for a rank without a pair)."""
    rank = ctx.backend.rank
    peer = one.peer(rank)
    if not one_at_a_time:
        return _time_phases(ctx, _pair_phases(ctx, peer, peer is not None and rank < peer), indices)
    mine = [0.0] * sum(phase_iters(ctx.config)[index] for index in indices)
    for pair in one.pairs:
        active = rank in pair
        values = _time_phases(ctx, _pair_phases(ctx, peer if active else None, rank == pair[0]), indices)
        if active:
            mine = values
    return mine


def time_round(ctx: FabricContext, one: Round) -> list[float]:
    """This rank's seconds for the round: its pair's four measurements, in PHASES order."""
    serial = ctx.config.serial
    return (_time_pairs(ctx, one, (0, 1), serial)
            + _time_pairs(ctx, one, (2, 3), serial or ctx.latency_alone))


def fabric_row(ctx: FabricContext, sampled: Sampled, time_scale: float = 1.0, **identity: Any) -> Row:
    """A row of fabric's through rows.make_row: ``identity`` says what it measured (collective, size_bytes
    and src_rank and dst_rank, or a node group's fields, phase, ...); the rest is every fabric row's."""
    backend = ctx.backend
    fields: dict[str, Any] = dict(backend=backend.name, device=backend.device.type,
                                  world_size=backend.world_size, dtype="uint8", mode="sync", op="",
                                  warmup=ctx.config.warmup, busbw_factor=1.0, pattern=KIND, phase=ctx.phase)
    fields.update(identity)
    size = fields["size_bytes"]
    count = size // (4 if fields["dtype"] == "float32" else 1)
    return make_row(sampled, time_scale=time_scale, context=ctx.session.row_context, requested_bytes=size,
                    count_per_rank=count, **fields)


def round_rows(ctx: FabricContext, one: Round, per_rank: list[list[float]], phase: str) -> list[Row]:
    """Four rows per pair of the round from every rank's gathered seconds (see time_round)."""
    config = ctx.config
    counts = phase_iters(config)
    starts = [sum(counts[:index]) for index in range(len(counts))]
    rows = []
    for first, second in one.pairs:
        for index, (src, dst) in enumerate(((first, second), (second, first)) * 2):
            window = slice(starts[index], starts[index] + counts[index])
            sampled = Sampled([per_rank[src][window], per_rank[dst][window]], counts[index])
            pair = dict(src_rank=src, dst_rank=dst, phase=phase)
            if index < 2:
                rows.append(fabric_row(ctx, sampled, collective=P2P_UNI.name, size_bytes=config.size, **pair))
            else:
                rows.append(fabric_row(ctx, sampled, ROUND_TRIP_SHARE, collective=PING_PONG.name,
                                       size_bytes=config.latency_size, **pair))
    return rows


def _check_in(ctx: FabricContext, label: str) -> None:
    config = ctx.config
    signature = f"fabric|{label}|{config.size}|{config.latency_size}|{config.iters}|{config.serial}"
    stop = ctx.backend.check_in(label, signature, ctx.session.stop_requested())
    if stop:
        raise Terminated(stop, agreed=True)  # every rank got the same answer at this check-in


def measure_nodes(ctx: FabricContext, output: Output, phase: str) -> list[Row]:
    """all_reduce at --size within each node (the nodes at once) and across one rank per node."""
    _check_in(ctx, f"fabric {phase} all_reduce within and across nodes")
    backend, rows = ctx.backend, []
    tensor = ctx.buffers.reduce_view()
    for layout, members, process_group in (
            ("intra-node", ctx.nodes.intra, ctx.nodes.intra_process_group),
            ("inter-node", ctx.nodes.inter, ctx.nodes.inter_process_group)):
        if not members:
            continue
        member = any(backend.rank in ranks for ranks in members)
        op = BoundOp(backend, CollectiveArgs(input=tensor, output=tensor, process_group=process_group),
                     ALL_REDUCE.issue if member else _sit_out)
        what = f"fabric {layout} all_reduce at {format_size(tensor.nbytes)} failed on rank {backend.rank}"
        with failures_named(lambda: what):  # noqa: B023 - used at once
            warm_up(op, ctx.config.warmup)
            seconds = time_sync(op, ctx.config.iters, barrier_per_iter=True).seconds
            per_rank = backend.all_gather_floats(seconds)
        for ranks in members:
            rows.append(fabric_row(
                ctx, Sampled([per_rank[rank] for rank in ranks], ctx.config.iters),
                collective=ALL_REDUCE.name, size_bytes=tensor.nbytes, dtype="float32", op="sum",
                busbw_factor=ALL_REDUCE.busbw_factor(len(ranks)), group_size=len(ranks), group_layout=layout,
                group_count=len(members), host=ctx.hostnames[ranks[0]] if layout == "intra-node" else "",
                phase=phase))
            output.row(rows[-1])
    return rows


def measure_rounds(ctx: FabricContext, rounds: tuple[Round, ...], output: Output, phase: str) -> RowColumns:
    """Every round, its rows reaching ``output`` as soon as the round is over, as one block of columns
    (results/columns.py: 2N rows that differ in a few fields); ``phase`` goes in the rows (concurrent,
    serial, or recheck)."""
    backend, config, rows = ctx.backend, ctx.config, RowColumns()
    for index, one in enumerate(rounds):
        label = f"fabric {phase} round {index + 1} of {len(rounds)}"
        _check_in(ctx, label)
        output.working(label)
        what = (f"fabric {phase} round {index + 1} (p2p at {format_size(config.size)}, ping_pong at "
                f"{format_size(config.latency_size)}) failed on rank {backend.rank}")
        with failures_named(lambda: what):  # noqa: B023 - used at once
            per_rank = backend.all_gather_array(time_round(ctx, one))
        if backend.rank == 0:  # rank 0 records and concludes: the others keep none of the 2N(N-1) rows
            measured = RowBlock.of(round_rows(ctx, one, per_rank, phase))
            output.batch(measured)  # one sync for the round's rows (a sync each took seconds)
            rows.extend(measured)
    return rows
