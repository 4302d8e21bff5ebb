"""Point-to-point patterns: send_recv, ping, ping_pong, p2p_uni, p2p_bidir and ring.

Ranks pair up as (0,1), (2,3), ...; an odd rank out sits the exchange out. Each descriptor sits beside
its buffers and the values --check expects of it.
"""

from commbench.measure.collectives.base import Buffers, Collective, Expected, Layout, register, unit_factor


def partner(layout: Layout) -> int | None:
    found = layout.rank ^ 1
    return found if found < layout.world_size else None


def from_partner(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [] if buffers.peer is None else [Expected(buffers.output, buffers.peer, 0, 0)]


def received(layout: Layout, buffers: Buffers) -> list[Expected]:
    return [] if buffers.recv_peer is None else [Expected(buffers.output, buffers.recv_peer, 0, 0)]


def per_message(layout: Layout) -> float:
    return 1.0 / layout.window


# --- send_recv ------------------------------------------------------------------------------------

def pairwise_buffers(layout: Layout) -> Buffers:
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank), partner(layout))


SEND_RECV = register(Collective(
    name="send_recv", summary="pairwise exchange: ranks 2k and 2k+1 send to each other",
    issue=lambda backend, args: backend.send_recv(args),
    build=pairwise_buffers, expect=from_partner, busbw_factor=unit_factor))


# --- one way: ping and p2p_uni ----------------------------------------------------------------------

def one_way(layout: Layout, window: int) -> Buffers:
    peer = partner(layout)
    if peer is None:
        return Buffers(None, None)
    if layout.rank % 2 == 0:  # the even rank of a pair sends
        return Buffers(layout.empty(layout.count_per_rank), None, send_peer=peer, window=window)
    return Buffers(None, layout.empty(layout.count_per_rank), recv_peer=peer, window=window)


def ping_buffers(layout: Layout) -> Buffers:
    return one_way(layout, 1)


PING = register(Collective(
    name="ping", summary="one-way: rank 2k sends one message to 2k+1 per op",
    issue=lambda backend, args: backend.p2p(args),
    build=ping_buffers, expect=received, busbw_factor=unit_factor))


def unidirectional_buffers(layout: Layout) -> Buffers:
    return one_way(layout, layout.window)


P2P_UNI = register(Collective(
    name="p2p_uni", summary="unidirectional bandwidth: 2k sends a window of messages to 2k+1",
    issue=lambda backend, args: backend.p2p(args),
    build=unidirectional_buffers, expect=received, busbw_factor=unit_factor, time_scale=per_message))


# --- both ways: ping_pong and p2p_bidir ----------------------------------------------------------------

def ping_pong_buffers(layout: Layout) -> Buffers:
    peer = partner(layout)
    if peer is None:
        return Buffers(None, None)
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank),
                   peer=peer, leads=layout.rank % 2 == 0)


def echoed(layout: Layout, buffers: Buffers) -> list[Expected]:
    # both ranks of a pair end with the leading rank's message: it went there and came back
    if buffers.peer is None:
        return []
    leader = layout.rank if buffers.leads else buffers.peer
    return [Expected(buffers.output, leader, 0, 0)]


def half(layout: Layout) -> float:
    return 0.5  # a round trip is two one-way trips


PING_PONG = register(Collective(
    name="ping_pong", summary="round trip 2k -> 2k+1 -> 2k; time is half the round trip",
    issue=lambda backend, args: backend.ping_pong(args),
    build=ping_pong_buffers, expect=echoed, busbw_factor=unit_factor, time_scale=half, modes=("sync",)))


def bidirectional_buffers(layout: Layout) -> Buffers:
    peer = partner(layout)
    if peer is None:
        return Buffers(None, None)
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank),
                   send_peer=peer, recv_peer=peer, window=layout.window)


P2P_BIDIR = register(Collective(
    name="p2p_bidir", summary="bidirectional bandwidth: 2k and 2k+1 send each other a window",
    issue=lambda backend, args: backend.p2p(args),
    build=bidirectional_buffers, expect=received, busbw_factor=unit_factor, time_scale=per_message))


# --- ring ------------------------------------------------------------------------------------------

def ring_buffers(layout: Layout) -> Buffers:
    n = layout.world_size
    if n == 1:
        return Buffers(None, None)
    return Buffers(layout.empty(layout.count_per_rank), layout.empty(layout.count_per_rank),
                   send_peer=(layout.rank + 1) % n, recv_peer=(layout.rank - 1) % n)


RING = register(Collective(
    name="ring", summary="ring exchange: every rank sends to rank+1 and receives from rank-1",
    issue=lambda backend, args: backend.p2p(args),
    build=ring_buffers, expect=received, busbw_factor=unit_factor))
