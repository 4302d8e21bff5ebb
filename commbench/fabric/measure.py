"""One fabric pass: every scheduled pair of ranks both ways, then all_reduce within and across nodes.

Per round, in this order and for both directions of every pair: bandwidth (``p2p``: the first rank of
the pair sends --size bytes, its partner receives them; then the other way) and latency (``ping_pong``
at --latency-size, led by the first rank, then by the second). Each of the four starts at a world
barrier and is warmed up. Bandwidth is timed --iters times with a world barrier before every message
(outside its time), so the pairs of a round start each message together and every link is loaded at
once; latency is timed over LATENCY_ITERS_PER_ITER x --iters round trips back to back (a barrier's
release skew would be larger than the round trip it precedes). --serial runs the round's pairs one
after another while every other rank waits at the same barriers; so do the ping-pongs alone where a
host has more ranks than cores (latency_alone), since concurrent ones would time the CPU scheduler.
A rank without a pair (a bye, or waiting its turn) issues nothing. After the round, every rank's times
are gathered; a sample of a pair is the slower of its two ranks' times for that message (the transfer is
over when both sides are done), and a latency sample is half of that round trip. Nothing inside a timed
region allocates: the buffers exist before the first round. Before every round the ranks check in, so a
missing rank is named and a stop (a signal) is agreed on between rounds.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from commbench.backends.base import Backend, CollectiveArgs
from commbench.errors import RunError, Terminated, UsageError, brief
from commbench.fabric.config import FabricConfig, available_host_bytes, memory_problem
from commbench.fabric.matrices import KIND
from commbench.fabric.schedule import Round, Schedule
from commbench.groups import ranks_by_host
from commbench.results import Row
from commbench.runner import Output
from commbench.sizes import format_size
from commbench.stats import algbw_gbps, slowest_rank_per_iteration, summarize
from commbench.timing import time_sync, warm_up

PHASES = ("first to second", "second to first", "ping led by first", "ping led by second")
LATENCY_ITERS_PER_ITER = 5  # small messages are cheap, and their times noisier


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
    host (when there are two hosts or more); the process-group handles of this rank's groups."""

    intra: tuple[tuple[int, ...], ...]
    inter: tuple[tuple[int, ...], ...]
    intra_handle: Any
    inter_handle: Any


def node_groups(backend: Backend, hostnames: list[str]) -> NodeGroups:
    """Create the groups (every rank together, in the same order, as process-group creation needs)."""
    hosts = ranks_by_host(hostnames)
    intra = tuple(tuple(ranks) for ranks in hosts.values() if len(ranks) > 1)
    inter = (tuple(ranks[0] for ranks in hosts.values()),) if len(hosts) > 1 else ()
    handles = []
    for members in (intra, inter):
        try:
            handles.append(backend.new_groups([list(ranks) for ranks in members]) if members else None)
        except Exception as exc:
            raise RunError(f"rank {backend.rank} could not create the fabric's node groups: {brief(exc)}") \
                from exc
    return NodeGroups(intra, inter, handles[0], handles[1])


@dataclass(frozen=True)
class FabricContext:
    """What every round of a pass needs; the same on every rank but for the buffers."""

    backend: Backend
    config: FabricConfig
    hostnames: list[str]
    schedule: Schedule
    buffers: FabricBuffers
    nodes: NodeGroups
    stop_requested: Callable[[], int]
    latency_alone: bool = False  # ping-pongs one pair at a time even in a concurrent round

    @property
    def phase(self) -> str:
        return "serial" if self.config.serial else "concurrent"


def _nothing(args: CollectiveArgs) -> None:
    """The op of a rank that sits a measurement out: it still meets the others at every barrier."""


Phase = tuple[Callable[[CollectiveArgs], None], CollectiveArgs]


def phase_iters(config: FabricConfig) -> list[int]:
    """Timed messages of each of the PHASES."""
    return [config.iters] * 2 + [config.iters * LATENCY_ITERS_PER_ITER] * 2


def _pair_phases(ctx: FabricContext, peer: int | None, is_first: bool) -> list[Phase]:
    """This rank's four measurements with ``peer`` (None: none, but the same barriers)."""
    backend, buffers = ctx.backend, ctx.buffers
    if peer is None:
        idle = CollectiveArgs(input=None, output=None)
        return [(_nothing, idle)] * len(PHASES)

    def transfer(sends: bool) -> CollectiveArgs:
        return CollectiveArgs(input=buffers.send, output=buffers.receive, send_peer=peer if sends else None,
                              recv_peer=None if sends else peer)

    def ping(leads: bool) -> CollectiveArgs:
        return CollectiveArgs(input=buffers.ping, output=buffers.echo, peer=peer, leads=leads)

    return [(backend.p2p, transfer(is_first)), (backend.p2p, transfer(not is_first)),
            (backend.ping_pong, ping(is_first)), (backend.ping_pong, ping(not is_first))]


def _time_phases(ctx: FabricContext, phases: list[Phase], indices: tuple[int, ...]) -> list[float]:
    values: list[float] = []
    counts = phase_iters(ctx.config)
    for index in indices:
        call, args = phases[index]
        ctx.backend.barrier()
        warm_up(call, ctx.backend, args, ctx.config.warmup)
        values.extend(time_sync(call, ctx.backend, args, counts[index], barrier_per_iter=index < 2).seconds)
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


def fabric_row(ctx: FabricContext, collective: str, size: int, seconds: list[float], **where: Any) -> Row:
    """A row of fabric's, one sample per message timed: ``where`` says what it measured (src_rank and
    dst_rank, or a group's fields); bandwidth rows are bytes, all_reduce rows float32 sums (give dtype,
    op, busbw_factor)."""
    samples_us = [round(value * 1e6, 3) for value in seconds]
    summary = summarize(samples_us)
    algbw = algbw_gbps(size, summary.p50 * 1e-6)
    factor = where.pop("busbw_factor", 1.0)
    dtype = where.pop("dtype", "uint8")
    return Row(collective=collective, backend=ctx.backend.name, device=ctx.backend.device.type,
               world_size=ctx.backend.world_size, dtype=dtype, mode="sync", op=where.pop("op", ""),
               size_bytes=size, requested_bytes=size, count_per_rank=size // (4 if dtype == "float32" else 1),
               iters=len(samples_us), warmup=ctx.config.warmup, time_us_p50=summary.p50,
               time_us_p95=summary.p95, time_us_min=summary.min, time_us_max=summary.max,
               time_us_mean=summary.mean, algbw_gbps=algbw,
               busbw_gbps=None if algbw is None else algbw * factor, busbw_factor=factor,
               samples=len(samples_us), time_us_p99=summary.p99, time_us_stdev=summary.stdev,
               time_us_cv=summary.cv, ci95_rel=summary.ci95_rel, samples_us=samples_us, pattern=KIND,
               phase=where.pop("phase", ctx.phase), **where)


def round_rows(ctx: FabricContext, one: Round, per_rank: list[list[float]], phase: str) -> list[Row]:
    """Four rows per pair of the round from every rank's gathered seconds (see time_round)."""
    config = ctx.config
    counts = phase_iters(config)
    starts = [sum(counts[:index]) for index in range(len(counts))]
    rows = []
    for first, second in one.pairs:
        def seconds(index: int, pair: tuple[int, int] = (first, second)) -> list[float]:
            window = slice(starts[index], starts[index] + counts[index])
            return slowest_rank_per_iteration([per_rank[pair[0]][window], per_rank[pair[1]][window]])

        rows += [fabric_row(ctx, "p2p_uni", config.size, seconds(0), src_rank=first, dst_rank=second,
                            phase=phase),
                 fabric_row(ctx, "p2p_uni", config.size, seconds(1), src_rank=second, dst_rank=first,
                            phase=phase)]
        rows += [fabric_row(ctx, "ping_pong", config.latency_size, [value / 2 for value in seconds(index)],
                            src_rank=leader, dst_rank=follower, phase=phase)
                 for index, leader, follower in ((2, first, second), (3, second, first))]
    return rows


@contextmanager
def named_failures(what: str, rank: int) -> Iterator[None]:
    """A backend failure becomes a RunError naming what was measured and the rank."""
    try:
        yield
    except (RunError, UsageError, Terminated):
        raise
    except Exception as exc:
        raise RunError(f"fabric {what} failed on rank {rank}: {brief(exc)}") from exc


def _check_in(ctx: FabricContext, label: str) -> None:
    config = ctx.config
    signature = f"fabric|{label}|{config.size}|{config.latency_size}|{config.iters}|{config.serial}"
    stop = ctx.backend.check_in(label, signature, ctx.stop_requested())
    if stop:
        raise Terminated(stop)


def measure_nodes(ctx: FabricContext, output: Output, phase: str) -> list[Row]:
    """all_reduce at --size within each node (the nodes at once) and across one rank per node."""
    _check_in(ctx, f"fabric {phase} all_reduce within and across nodes")
    backend, rows = ctx.backend, []
    tensor = ctx.buffers.reduce_view()
    for layout, members, handle in (("intra-node", ctx.nodes.intra, ctx.nodes.intra_handle),
                                    ("inter-node", ctx.nodes.inter, ctx.nodes.inter_handle)):
        if not members:
            continue
        member = any(backend.rank in ranks for ranks in members)
        args = CollectiveArgs(input=tensor, output=tensor, group=handle)
        call = backend.all_reduce if member else _nothing
        with named_failures(f"{layout} all_reduce at {format_size(tensor.nbytes)}", backend.rank):
            warm_up(call, backend, args, ctx.config.warmup)
            seconds = time_sync(call, backend, args, ctx.config.iters, barrier_per_iter=True).seconds
            per_rank = backend.all_gather_floats(seconds)
        for ranks in members:
            size = len(ranks)
            rows.append(fabric_row(
                ctx, "all_reduce", tensor.nbytes, slowest_rank_per_iteration([per_rank[r] for r in ranks]),
                dtype="float32", op="sum", busbw_factor=2 * (size - 1) / size, group_size=size,
                group_layout=layout, group_count=len(members),
                host=ctx.hostnames[ranks[0]] if layout == "intra-node" else "", phase=phase))
            output.row(rows[-1])
    return rows


def measure_rounds(ctx: FabricContext, rounds: tuple[Round, ...], output: Output, phase: str) -> list[Row]:
    """Every round, its rows reaching ``output`` as soon as the round is over; ``phase`` goes in the
    rows (concurrent, serial, or recheck)."""
    backend, rows = ctx.backend, []
    for index, one in enumerate(rounds):
        label = f"fabric {phase} round {index + 1} of {len(rounds)}"
        _check_in(ctx, label)
        output.working(label)
        with named_failures(f"{phase} round {index + 1} (p2p at {format_size(ctx.config.size)}, ping_pong "
                            f"at {format_size(ctx.config.latency_size)})", backend.rank):
            per_rank = backend.all_gather_floats(time_round(ctx, one))
        for row in round_rows(ctx, one, per_rank, phase):
            output.row(row)
            rows.append(row)
    return rows
