"""Where a rank runs and how much memory it may fill, agreed with the other ranks before anything is
measured: its CUDA device (through the rendezvous store, before NCCL starts) and its memory budget
(through the control group). The rules are core/devices.py's pure functions; the environment mapping comes
from launch, the one module that reads it.
"""

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from commbench.backends.base import Backend
from commbench.config.launch import LaunchConfig
from commbench.coordination import StartUp
from commbench.core import devices
from commbench.core.devices import MemoryBudget
from commbench.errors import AlreadyReported, UsageError

HOSTNAME_ENV = "COMMBENCH_HOSTNAME"  # the host name a rank reports, when the system's says too little


def host_name(environ: Mapping[str, str]) -> str:
    return environ.get(HOSTNAME_ENV) or socket.gethostname()


def place(setup: LaunchConfig, ranks: tuple[int, int | None], environ: Mapping[str, str],
          startup: StartUp) -> Any:
    """This rank's device (``ranks``: its rank and the local rank a launcher gave, or None). On CUDA
    every rank first learns which ranks share its host (its local rank when no launcher gave one), then
    claims its physical device; a problem on any rank (too few devices, two ranks on one device) stops
    every rank before a communicator exists, with one message."""
    import torch

    if setup.device != "cuda":
        return torch.device("cpu")
    rank, local_rank = ranks
    host = host_name(environ)
    on_host = startup.peers("hosts", host)
    device, problem = None, None
    try:
        if local_rank is None:
            if on_host is None:
                raise UsageError(f"rank {rank}: no launcher variable gives its local rank (set "
                                 "LOCAL_RANK), and without a rendezvous store it cannot be derived")
            local_rank = devices.local_rank_among(on_host, rank)
        index = devices.device_index(local_rank, torch.cuda.device_count(), rank)
        device = torch.device("cuda", index)
        claim = devices.physical_device(environ, index, device_uuid(index))
    except UsageError as exc:
        problem, claim = str(exc), f"unplaced rank {rank}"
    sharing = startup.peers("devices", f"{host}|{claim}") or [rank]
    problem = problem or devices.duplicate_devices(host, claim, sharing)
    agreed = startup.agree("devices", problem)
    if agreed is not None:
        raise UsageError(agreed) if rank == 0 else AlreadyReported(UsageError.exit_code)
    return device


def device_uuid(index: int) -> str | None:
    """The device's UUID, where this torch reports one (the surest name for a physical GPU)."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return str(uuid) if uuid is not None else None


def memory_budget(backend: Backend, hostnames: list[str]) -> MemoryBudget | None:
    """The memory a rank may fill when --max-memory is not given: most of its device's free memory on
    CUDA, its share of the host's available memory on CPU; the smallest over ranks, so that every rank
    refuses the same sizes (None when a rank cannot tell)."""
    free = backend.free_device_memory()
    if free is not None:
        mine: MemoryBudget | None = devices.cuda_budget(free)
    else:
        try:
            available = devices.mem_available(Path("/proc/meminfo").read_text())
        except OSError:  # not Linux
            available = None
        mine = devices.cpu_budget(available, hostnames.count(hostnames[backend.rank]))
    budgets = backend.all_gather_object(mine)
    if any(budget is None for budget in budgets):
        return None
    return min(budgets, key=lambda budget: budget.limit)
