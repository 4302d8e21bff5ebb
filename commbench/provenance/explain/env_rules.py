"""The NCCL variables of rank 0 that cost bandwidth here: each rule prices its variable with the bound
model, as the best bound without the variable against the best with it (nccl_env.py reads them).

Invariants: as every rule (reason.py); a variable that changes nothing on this hardware gives no reason.
"""

from commbench.core.sizes import format_size
from commbench.provenance.explain.algorithms import best, bounds
from commbench.provenance.explain.nccl_env import DEFAULT_BUFFSIZE, NcclEnv
from commbench.provenance.explain.reason import Context, Reason, cost

FULL_CHANNELS = 16  # NCCL reaches NVLink's peak with its default 16 SMs (CHANNELS_SOURCE)
CHANNELS_SOURCE = "https://github.com/NVIDIA/nccl/issues/1649"


def _env_reason(ctx: Context, rule: str, names: tuple[str, ...], text: str) -> Reason | None:
    """An NCCL variable's cost: the best bound without it against the best with it."""
    variables = ctx.scope.env.variables
    set_here = {name: variables[name] for name in names if name in variables}
    if not set_here:
        return None
    without = NcclEnv({name: value for name, value in variables.items() if name not in names})
    before, after = best(bounds(ctx.scope, without, ctx.baselines)), best(ctx.allowed)
    loss = cost(before, after)
    if not loss or before is None:
        return None
    return Reason(rule, text, {**set_here, "bound_without": round(before.gbps or 0, 2),
                               "best_without": before.algorithm,
                               "bound_with": None if after is None else round(after.gbps or 0, 2)},
                  loss, "model: the best bound without the variable and with it")


def nccl_algo(ctx: Context) -> Reason | None:
    value = ctx.scope.env.variables.get("NCCL_ALGO", "")
    return _env_reason(ctx, "nccl-algo", ("NCCL_ALGO",), f"NCCL_ALGO={value} is set")


def nccl_proto(ctx: Context) -> Reason | None:
    value = ctx.scope.env.variables.get("NCCL_PROTO", "")
    return _env_reason(ctx, "nccl-proto", ("NCCL_PROTO",), f"NCCL_PROTO={value} leaves no Simple protocol")


def nvls_disabled(ctx: Context) -> Reason | None:
    if not ctx.scope.env.nvls_disabled:
        return None
    return _env_reason(ctx, "nvls-disabled", ("NCCL_NVLS_ENABLE",), "NCCL_NVLS_ENABLE=0 is set")


def p2p_disabled(ctx: Context) -> Reason | None:
    if not ctx.scope.env.p2p_disabled:
        return None
    return _env_reason(ctx, "p2p-disabled", ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"),
                       "P2P is disabled (NCCL_P2P_DISABLE/NCCL_P2P_LEVEL): GPUs on a host talk through host "
                       "memory")


def shm_disabled(ctx: Context) -> Reason | None:
    if not ctx.scope.env.shm_disabled:
        return None
    return _env_reason(ctx, "shm-disabled", ("NCCL_SHM_DISABLE",),
                       "NCCL_SHM_DISABLE=1 with P2P off: GPUs on a host talk through the network")


def ib_disabled(ctx: Context) -> Reason | None:
    if not ctx.scope.env.ib_disabled:
        return None
    return _env_reason(ctx, "ib-disabled", ("NCCL_IB_DISABLE", "NCCL_NET"),
                       "InfiniBand/RoCE is disabled (NCCL_IB_DISABLE/NCCL_NET): NCCL uses TCP sockets")


def ib_hca(ctx: Context) -> Reason | None:
    chosen = ctx.scope.env.hca
    if chosen is None:
        return None
    host = ctx.scope.hosts[ctx.scope.ranks[0][0]]
    named = sum(chosen.allows(port.device, port.port) for port in host.ports)
    return _env_reason(ctx, "ib-hca", ("NCCL_IB_HCA",),
                       f"NCCL_IB_HCA={chosen.text} names {named} of {host.name}'s {len(host.ports)} "
                       "active ports")


def gdr_level(ctx: Context) -> Reason | None:
    if not ctx.scope.env.gdr_disabled:
        return None
    return _env_reason(ctx, "gdr-disabled", ("NCCL_NET_GDR_LEVEL",),
                       "NCCL_NET_GDR_LEVEL turns GPUDirect RDMA off: network traffic goes through host "
                       "memory")


def channels(ctx: Context) -> Reason | None:
    limit = ctx.scope.env.max_channels
    if limit is None or limit[1] >= FULL_CHANNELS or ctx.scope.backend != "nccl":
        return None
    name, value = limit
    return Reason("channels", f"{name}={value} caps NCCL at {value} channels", {name: value},
                  1 - value / FULL_CHANNELS, f"rough: NCCL reaches the links' peak with {FULL_CHANNELS} "
                  f"channels ({CHANNELS_SOURCE}); fewer move proportionally less")


def buffsize(ctx: Context) -> Reason | None:
    size = ctx.scope.env.buffsize
    if size is None or size >= DEFAULT_BUFFSIZE or ctx.scope.backend != "nccl":
        return None
    return Reason("buffsize", f"NCCL_BUFFSIZE={size} is below NCCL's {format_size(DEFAULT_BUFFSIZE)} "
                  "default", {"NCCL_BUFFSIZE": size}, None,
                  "not estimated: smaller buffers shorten each channel's pipeline")


