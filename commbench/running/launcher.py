"""Who started this process: torchrun, mpirun, srun, flux, or nobody. The launcher's variables become a
``RankInfo``; only here and in rank.py are a launcher's variables read (spawn.py sets them for the ranks
it starts). Imports no torch.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from commbench.core import devices
from commbench.errors import UsageError
from commbench.running.spawn import LAUNCHER_ENV


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int | None  # None: no launcher said; derived from the host names once the ranks meet
    launcher: str
    master_addr: str | None
    master_port: int | None


MAX_PORT = 65535

# (launcher, rank, world size) variable names, in order of precedence. The local rank has its own order
# (devices.LOCAL_RANK_VARIABLES): one launcher may set the rank and another the local rank (Cray MPICH
# under srun sets PMI_RANK and SLURM_LOCALID, no MPI_LOCALRANKID).
_LAUNCHER_VARIABLES = [
    ("torchrun", "RANK", "WORLD_SIZE"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("mpirun", "PMI_RANK", "PMI_SIZE"),
    ("mpirun", "PMIX_RANK", "PMIX_SIZE"),
    ("mpirun", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS"),
    ("flux", "FLUX_TASK_RANK", "FLUX_JOB_SIZE"),
]


def _int_variable(env: Mapping[str, str], name: str) -> int:
    value = env.get(name)
    if value is None:
        raise UsageError(f"{name} is not set")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"environment variable {name}={value!r} is not an integer") from None


def detect(env: Mapping[str, str], backend: str | None = None) -> RankInfo | None:
    """This process's place in the job from the launcher's variables, or None when not launched."""
    for launcher, rank_var, world_var in _LAUNCHER_VARIABLES:
        if rank_var not in env or world_var not in env:
            continue
        if launcher == "srun":
            step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
            if step is None or step in devices.SLURM_BATCH_STEPS:
                continue  # a batch script, not a task started by srun
            world_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else world_var
        if launcher == "torchrun":
            launcher = env.get(LAUNCHER_ENV) or ("torchrun" if "TORCHELASTIC_RUN_ID" in env else "env")
        rank = _int_variable(env, rank_var)
        world_size = _int_variable(env, world_var)
        local_rank = devices.local_rank_from(env)
        if world_size < 1 or not 0 <= rank < world_size:
            raise UsageError(f"{rank_var}={rank} does not fit {world_var}={world_size}")
        master_addr, master_port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
        if backend != "mpi" and (not master_addr or not master_port):
            missing = " and ".join(n for n, v in (("MASTER_ADDR", master_addr),
                                                  ("MASTER_PORT", master_port)) if not v)
            verb = "are" if " and " in missing else "is"
            raise UsageError(f"launched by {launcher} ({rank_var} is set) but {missing} {verb} not: export "
                             "MASTER_ADDR=<host of rank 0> MASTER_PORT=<free port>, e.g. 29500")
        port = _int_variable(env, "MASTER_PORT") if master_port else None
        if port is not None and not 1 <= port <= MAX_PORT:
            raise UsageError(f"MASTER_PORT={master_port} is not a TCP port (1 to {MAX_PORT})")
        return RankInfo(rank, world_size, local_rank, launcher, master_addr, port)
    return None
